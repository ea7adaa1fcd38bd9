"""Storage options of an operator root: object-store settings and credentials passed with the
job instead of taken from each executor's environment.

They come from the builder's (or reader's) ``storage_options=`` argument and from the Spark
conf keys ``spark.silt.storage.<option>`` (the argument wins for a name given both ways), are
checked on the driver when the operator is built (unknown names fail before anything is
written), travel to the executors inside the pickled
:class:`~silt_spark.runtime._shard.OperatorSpec`, and go to the tier each time a store or shard
of the root is opened (``silt.open(url, storage_options=...)``). The accepted names are the tier's
(docs/spark.md).

Secrets are never shown: the spec keeps them out of its ``repr``, the descriptor stored under
the root never records them, the plan names the operator, not its options, and tiers keep them
out of messages. Spark itself shows conf values in its UI and event logs unless their key
matches ``spark.redaction.regex`` (by default: ``secret``, ``password``, ``token``,
``access.key``); docs/spark.md says which keys that covers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from silt.plugins import check_storage_options

#: The Spark conf prefix: ``spark.silt.storage.secret_access_key`` sets ``secret_access_key``.
CONF_PREFIX = "spark.silt.storage."


def from_conf(session: Any) -> dict[str, str]:
    """The ``spark.silt.storage.*`` options set in ``session``'s conf (SQL conf and
    SparkConf), prefix stripped."""
    if session is None:
        return {}
    found: dict[str, str] = {}
    try:
        spark_conf = session.sparkContext.getConf().getAll()
    except Exception:  # a Spark Connect session has no SparkContext
        spark_conf = []
    for key, value in spark_conf:
        if key.startswith(CONF_PREFIX):
            found[key[len(CONF_PREFIX):]] = str(value)
    for key, value in dict(getattr(session.conf, "getAll", None) or {}).items():
        if key.startswith(CONF_PREFIX):
            found[key[len(CONF_PREFIX):]] = str(value)
    return found


def resolve(
    storage_options: Mapping[str, str] | None, session: Any = None
) -> dict[str, str] | None:
    """The options for a root: ``session``'s ``spark.silt.storage.*`` conf, overridden by
    ``storage_options``; ``None`` when there are none. Raises
    :class:`~silt.errors.InvalidTypeError` for a value that is not a ``str`` (never showing
    it)."""
    given = check_storage_options(storage_options)
    merged = {**from_conf(session), **given}
    return merged or None


def active_session() -> Any:
    """The active Spark session, or ``None`` (no pyspark session in this process)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - silt_spark requires pyspark
        return None
    return SparkSession.getActiveSession()
