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
    """The ``spark.silt.storage.*`` options set in ``session``'s conf (SparkConf, then the SQL
    conf, which wins for a name set in both), prefix stripped.

    This runs on the driver each time an operator is built, a restart included. pyspark's
    ``SparkConf.getAll`` and ``RuntimeConfig.getAll`` copy every entry of both confs through
    py4j, two or three calls into the JVM per entry (about 300 for a plain session: 25 ms in a
    warm JVM, a third of a second in a restarted one on a busy host); a classic session is
    asked for the prefixed SparkConf entries and for the SQL conf's keys in one string, then
    only for the values of the keys under the prefix (about ten calls). Other sessions (Spark
    Connect) are read through pyspark's ``getAll``."""
    if session is None:
        return {}
    try:
        return _from_jvm(session)
    except Exception:  # not a classic session (Spark Connect), or a pyspark without these
        return _from_getall(session)


def _from_jvm(session: Any) -> dict[str, str]:
    """:func:`from_conf` of a classic session, asking the JVM for little (see there)."""
    sc = session.sparkContext
    found = {str(t._1()): str(t._2())
             for t in sc._jsc.sc().conf().getAllWithPrefix(CONF_PREFIX)}
    sql = session.conf._jconf.getAllAsJava()  # a java.util.Map, not copied
    # Conf keys hold no NUL; were one to, its pieces would name no key and be skipped below.
    keys = sc._jvm.java.lang.String.join("\0", sql.keySet())
    for key in keys.split("\0"):
        if key.startswith(CONF_PREFIX):
            value = sql.get(key)
            if value is not None:
                found[key[len(CONF_PREFIX):]] = str(value)
    return found


def _from_getall(session: Any) -> dict[str, str]:
    """:func:`from_conf` through pyspark's ``getAll`` of both confs."""
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
