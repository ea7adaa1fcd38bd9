"""The query-start guard: a streaming query's silt operators checked on the driver before its
first micro-batch.

Two mistakes can only be seen once a query has an id and a checkpoint: a second streaming query
on a ``state_url`` that serves another query (:class:`~silt_spark.errors.ForeignStateError`),
and a state root deleted or moved while the query's checkpoint was kept
(:class:`~silt_spark.errors.StateLostError`). The tasks check both (``_lifecycle.check_origin``,
``ShardTask``), but only once the first micro-batch runs. So every builder registers its
operator here and installs, once per Spark session, a :class:`StreamingQueryListener`. Spark
calls its ``onQueryStarted`` synchronously on the query's own thread before the first
micro-batch (``start()`` waits for it), with the query's id; the guard then

1. finds the query's silt operators in its analyzed plan (each one's observed metrics carry
   ``_progress.observation_name``), and the micro-batch the query starts at from its
   checkpoint's offset and commit logs;
2. runs :func:`silt_spark.runtime._lifecycle.preflight` on each root (reads only: a LIST of the
   root's ``lifecycle/`` folder and of each shard's manifests, the latest manifest's GETs);
3. on a mistake, logs silt's message (logger ``silt_spark``) and sets it as the Spark local
   property :data:`REFUSED` of the query's thread (PySpark runs a listener's calls into the
   JVM on the thread that called it, with its pinned-thread mode, the default), so every task
   of the query's first micro-batch raises silt's error as its first act, before any request
   to the root: nothing is written.

What Spark allows and what it does not: a listener cannot fail a query (Spark's listener bus
logs what a listener raises and goes on), and an error raised in a task reaches
``query.exception()`` behind Spark's own wrapping (``[STREAM_FAILED] ... Job aborted ...
PythonException``, or the ``foreachBatch`` function's traceback). So silt's message is the
first line of the driver's log for the query, and the message of the error the query dies
with; its first line there is Spark's.

Simplifications: the guard works with PySpark's classic (Py4J) sessions; when it cannot read
the query's plan or logs (Spark Connect, pinned threads turned off, a Spark without those
internals), it does nothing and the tasks' own checks stand.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from typing import Any, ClassVar

from ..errors import ForeignStateError, SparkStateError, StateLostError
from . import _lifecycle, _progress

log = logging.getLogger("silt_spark")

#: The Spark local property carrying the guard's refusals to the first batch's tasks: a JSON
#: object, observation name -> [error class name, message].
REFUSED = "silt.refused"
_ERRORS: dict[str, type[SparkStateError]] = {
    "ForeignStateError": ForeignStateError, "StateLostError": StateLostError,
}

#: Observation name -> operator spec, of the operators built in this driver process.
_SPECS: dict[str, Any] = {}
_INSTALLED: weakref.WeakSet[Any] = weakref.WeakSet()
_LOCK = threading.Lock()


def register(session: Any, spec: Any) -> None:
    """Remember the operator ``spec`` built on ``session`` and install the guard's listener on
    ``session`` (once). Driver side, when a builder plans its operator."""
    if session is None:
        return
    with _LOCK:
        _SPECS[_progress.observation_name(spec.kind, spec.root)] = spec
        if session in _INSTALLED:
            return
        _INSTALLED.add(session)
    session.streams.addListener(_listener_class()(session))


def start_batch(commit_latest: int | None, offset_latest: int | None) -> int:
    """The micro-batch a query runs first, from its checkpoint's latest committed batch and
    latest planned one (``None``: none): a planned batch not committed runs again."""
    if offset_latest is not None and (commit_latest is None or offset_latest > commit_latest):
        return offset_latest
    return 0 if commit_latest is None else commit_latest + 1


def refusals(plan: str, query_id: str, batch: int) -> dict[str, list[str]]:
    """Observation name -> [error class, message] for each silt operator in the query's
    analyzed ``plan`` (its text) that would make a mistake (see the module docstring)."""
    with _LOCK:
        specs = dict(_SPECS)
    found: dict[str, list[str]] = {}
    for name, spec in specs.items():
        if f"CollectMetrics {name}," not in plan:
            continue
        error = _lifecycle.preflight(spec, query_id, batch)
        if error is not None:
            found[name] = [type(error).__name__, str(error)]
    return found


def check_task(local_property: str | None, spec: Any) -> None:
    """Raise the guard's refusal of ``spec``'s operator, if the task's :data:`REFUSED` local
    property holds one (the first act of every task: see the module docstring)."""
    if not local_property:
        return
    refused = json.loads(local_property).get(_progress.observation_name(spec.kind, spec.root))
    if refused is not None:
        raise _ERRORS.get(refused[0], SparkStateError)(refused[1])


def _java_option(option: Any) -> int | None:
    return int(option.get()) if option.isDefined() else None


class _StartsOnly:
    """The JVM side's view of the guard (a Py4J proxy of Spark's
    ``PythonStreamingQueryListener``): only a query's start reaches the guard.

    Spark's listener bus calls a Python listener for every event of every query in the
    session, and PySpark's own proxy converts each event into Python objects before the
    listener sees it; a progress event's conversion (once per micro-batch) looks up
    ``PythonSQLUtils`` by its short name for each observed metric, and each such lookup makes
    the driver search every jar of Spark's classpath for the packages it does not find. The
    guard needs only ``onQueryStarted``: the other events are dropped here unconverted, so a
    micro-batch costs the driver one Py4J callback for the guard and nothing more."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        from pyspark.sql.streaming.listener import QueryStartedEvent

        self.listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        pass

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def _listener_class() -> type:
    from pyspark.sql.streaming import StreamingQueryListener

    class Guard(StreamingQueryListener):
        """Checks each starting query's silt operators (see the module docstring)."""

        def __init__(self, session: Any) -> None:
            super().__init__()
            self.session = session
            try:  # PySpark's classic listeners keep their JVM proxy here (see _StartsOnly)
                jvm = session.sparkContext._jvm
                self._jlistenerobj = jvm.org.apache.spark.sql.streaming \
                    .PythonStreamingQueryListenerWrapper(_StartsOnly(self))
            except Exception:  # Spark Connect or other internals: PySpark's own proxy serves
                log.debug("silt_spark: the guard listens through PySpark's proxy",
                          exc_info=True)

        def onQueryStarted(self, event: Any) -> None:
            query_id = str(event.id)
            try:
                execution = self.session.streams.get(query_id)._jsq.streamingQuery()
                plan = execution.analyzedPlan().toString()
                batch = start_batch(_java_option(execution.commitLog().getLatestBatchId()),
                                    _java_option(execution.offsetLog().getLatestBatchId()))
            except Exception:  # not a classic session (see the module docstring)
                log.debug("silt_spark: cannot check query %s when it starts", query_id,
                          exc_info=True)
                return
            try:
                found = refusals(plan, query_id, batch)
            except Exception:  # the root cannot be read now: the tasks check (and say why)
                log.warning("silt_spark: cannot check query %s's state roots when it starts",
                            query_id, exc_info=True)
                return
            if found:
                for kind, message in found.values():
                    log.error("silt_spark: %s: %s", kind, message)
                self.session.sparkContext.setLocalProperty(REFUSED, json.dumps(found))

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Guard
