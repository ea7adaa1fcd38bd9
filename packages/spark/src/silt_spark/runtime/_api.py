"""Driver plumbing shared by the operators: options checked, the descriptor's pinned fields,
the routing shuffle, the per-shard task function. No state is touched here.

Each operator's own builder (the public function that plans its query) lives in its module
(``operators/``) and calls these.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError
from silt.tierkit import public_url

from . import _guard, _interval, _layout, _metrics, _progress, _root, _run, _shard, _storage, _tick


def operator_spec(
    kind: str,
    state_url: str,
    num_shards: int,
    key_groups: int,
    take_over: bool,
    settings: Any,
    *,
    df: Any = None,
    reset: bool | None = None,
    storage_options: Any = None,
    **options: Any,
) -> _root.OperatorSpec:
    """The operator's options, checked (``df``: refused unless streaming or in foreachBatch;
    ``reset``: the deprecated name of ``take_over``; ``storage_options``: as given, merged
    with the session's ``spark.silt.storage.*`` conf, see _storage.py)."""
    import silt

    if df is not None:
        _check_streaming(df, kind)
    if reset is not None:
        import warnings

        warnings.warn(
            "reset= is renamed take_over= (it discards another streaming query's state)",
            DeprecationWarning, stacklevel=3,
        )
        take_over = take_over or bool(reset)
    if not isinstance(state_url, str) or "://" not in state_url:
        raise InvalidArgumentError(
            "state_url must be a store URL such as 'file:///data/state/op1', got "
            f"{public_url(state_url)!r}"
        )
    if state_url.startswith("memory://"):
        raise InvalidArgumentError(
            "memory:// state lives in one process; Spark runs tasks in other processes. Use "
            "file:// (one machine) or an object-store URL"
        )
    _layout.check_layout(num_shards, key_groups)
    if settings is not None and not isinstance(settings, silt.Settings):
        raise InvalidTypeError(
            f"settings must be a silt.Settings, got {type(settings).__name__}"
        )
    session = getattr(df, "sparkSession", None)
    return _root.OperatorSpec(
        # (not inside foreachBatch: a batch DataFrame cannot take a streaming source)
        ticks=bool(options.get("event_time_delays")) and bool(getattr(df, "isStreaming", True))
        and _tick.enabled(session),
        kind=kind,
        root=state_url,
        num_shards=num_shards,
        key_groups=key_groups,
        take_over=bool(take_over),
        settings=settings.to_dict() if settings is not None else None,
        memory_budget=_memory_budget(df),
        maintenance_batches=_maintenance_batches(df),
        storage_options=_storage.resolve(storage_options, getattr(df, "sparkSession", None)),
        **options,
    )


#: The Spark conf that sets each Python worker's silt memory budget (see docs/spark.md).
MEMORY_BUDGET_CONF = "spark.silt.memoryBudget"
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str, what: str) -> int:
    """A byte size as Spark writes them (``"536870912"``, ``"512m"``, ``"2g"``, ``"2gb"``;
    binary units), or an :class:`~silt.errors.InvalidArgumentError` naming ``what``."""
    import re

    m = re.fullmatch(r"\s*(\d{1,19})\s*([bkmgt]?)b?\s*", text.lower())
    if m is None:
        raise InvalidArgumentError(
            f"{what} must be a size such as '512m', '2g' or a number of bytes, got {text!r:.80}"
        )
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


def _memory_budget(df: Any) -> int | None:
    """The bytes of ``spark.silt.memoryBudget`` in the session's conf (checked here, on the
    driver, so a bad value fails the query before any task runs), or ``None`` when unset."""
    from silt.budget import check_budget_bytes

    session = getattr(df, "sparkSession", None)
    if session is None:
        return None
    text = session.conf.get(MEMORY_BUDGET_CONF, None)
    if text is None:
        return None
    return check_budget_bytes(
        parse_size(str(text), MEMORY_BUDGET_CONF), f"{MEMORY_BUDGET_CONF} ({text})"
    )


#: The Spark conf that sets how often a shard collects its garbage (see docs/spark.md).
MAINTENANCE_CONF = "spark.silt.maintenance.intervalBatches"
DEFAULT_MAINTENANCE_BATCHES = 100


def _maintenance_batches(df: Any) -> int:
    """``spark.silt.maintenance.intervalBatches`` from the session's conf (checked on the
    driver: a bad value fails the query before any task runs); 0 turns maintenance off."""
    session = getattr(df, "sparkSession", None)
    text = None if session is None else session.conf.get(MAINTENANCE_CONF, None)
    if text is None:
        return DEFAULT_MAINTENANCE_BATCHES
    value = str(text).strip()
    if not value.isdigit() or int(value) > 10**9:
        raise InvalidArgumentError(
            f"{MAINTENANCE_CONF} must be a number of micro-batches from 0 (never) to 10^9, "
            f"got {text!r:.80}"
        )
    return int(value)


def _check_streaming(df: Any, kind: str) -> None:
    """Refuse a batch DataFrame when the operator is built, before any state is touched,
    unless it is built inside ``foreachBatch`` (the micro-batch id is then known)."""
    from ..errors import NotStreamingError

    if getattr(df, "isStreaming", False):
        _check_no_spark_watermark(df, kind)
        return
    session = getattr(df, "sparkSession", None)
    if session is not None and session.sparkContext.getLocalProperty(
        "streaming.sql.batchId"
    ) is not None:
        return  # inside foreachBatch: the tasks see the micro-batch id and the query id
    raise NotStreamingError(
        f"silt_spark's {kind} operator needs a streaming DataFrame (spark.readStream...) or "
        "a micro-batch DataFrame inside foreachBatch: its state version is the micro-batch "
        "id, which a batch query has not"
    )


#: The column metadata Spark's ``withWatermark`` leaves on its event-time column.
SPARK_WATERMARK_METADATA = "spark.watermarkDelayMs"


def _check_no_spark_watermark(df: Any, kind: str) -> None:
    """Refuse a DataFrame that carries a Spark watermark (``withWatermark``): silt's operators
    keep their own query-wide watermark from their own arguments, and running one of them
    silently beside Spark's would let the two disagree on what is late."""
    marked = [(f.name, f.metadata[SPARK_WATERMARK_METADATA]) for f in df.schema.fields
              if SPARK_WATERMARK_METADATA in (f.metadata or {})]
    if not marked:
        return
    column, delay_ms = marked[0]
    raise InvalidArgumentError(
        f"silt_spark's {kind} operator does not read Spark's watermark, and its input has one "
        f"(withWatermark({column!r}, ...), {delay_ms} ms): remove the .withWatermark(...) "
        "call and give the operator the event time instead: window_aggregate(time_column="
        f"{column!r}, watermark_delay={delay_ms}), deduplicate and transform_with_state("
        f"event_time_column={column!r}, watermark_delay={delay_ms}), join(left_time_column=..., "
        f"left_watermark_delay={delay_ms}, ...); or, if a Spark operator upstream needs it, "
        "apply silt's operator before that one"
    )


def require_methods(processor: Any, methods: Sequence[str], see: str) -> None:
    """Refuse (:class:`~silt.errors.InvalidTypeError`) a user object that lacks one of the
    ``methods`` its operator calls; ``see`` names the class it should follow."""
    for method in methods:
        if not callable(getattr(processor, method, None)):
            raise InvalidTypeError(
                f"processor must have a {method}() method (see {see}), "
                f"got {type(processor).__name__}"
            )


def key_list(key_columns: Sequence[str] | str, df: Any) -> list[str]:
    keys = [key_columns] if isinstance(key_columns, str) else list(key_columns)
    if not keys:
        raise InvalidArgumentError("key_columns must name at least one column")
    missing = [c for c in keys if c not in df.columns]
    if missing:
        raise InvalidArgumentError(
            f"key columns {missing} are not in the DataFrame ({df.columns})"
        )
    return keys


#: Descriptor fields a restart must not change: the key columns' Spark types decide the key
#: groups (Spark's xxhash64 depends on them).
PINNED = ("key_columns",)


def key_types(df: Any, keys: list[str]) -> list[list[str]]:
    fields = {f.name: f for f in df.schema.fields}
    return [[c, fields[c].dataType.simpleString()] for c in keys]


def _struct(schema: Any) -> Any:
    from pyspark.sql.types import DataType, StructType

    if isinstance(schema, str):
        schema = DataType.fromDDL(schema)
    if not isinstance(schema, StructType):
        raise InvalidTypeError(
            f"output_schema must be a StructType or DDL string, got {schema!r}"
        )
    return schema


def route(df: Any, keys: list[str], spec: _root.OperatorSpec, heartbeat: bool = False) -> Any:
    """``df`` with its routing columns, shuffled to the operator's shards; an event-time
    operator's input gets silt's tick source (``_tick.py``, unless ``spark.silt.tick=false``),
    and ``heartbeat`` a 1 row/s ``rate`` source."""
    routed = _layout.with_routing_columns(df, keys, spec.num_shards, spec.key_groups)
    session = df.sparkSession
    if spec.ticks and spec.no_data_batches:
        routed = routed.union(_filler(_tick.stream(session, spec), routed.schema))
    if heartbeat:
        rate = session.readStream.format("rate").option("rowsPerSecond", 1).load()
        routed = routed.union(_filler(rate, routed.schema))
    return routed.repartition(spec.num_shards, _layout.PARTITION_COLUMN)


def _filler(stream: Any, schema: Any) -> Any:
    """``stream``'s rows shaped like the routed input, with key group ``-1`` (tasks drop such
    rows): they only make micro-batches happen, and Spark then runs every shard."""
    from pyspark.sql import functions as F

    cols = []
    for f in schema.fields:
        if f.name == _layout.KG_COLUMN:
            cols.append(F.lit(-1).cast(f.dataType).alias(f.name))
        elif f.name == _layout.PARTITION_COLUMN:
            cols.append(F.lit(_layout.partition_values(1)[0]).cast(f.dataType).alias(f.name))
        else:
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
    return stream.select(*cols)


def shard_stage(
    routed: Any, df: Any, spec: _root.OperatorSpec,
    process: Callable[[_shard.ShardTask, Any], Any], struct: Any,
) -> Any:
    """The shuffled stage: ``mapInArrow`` runs ``process`` on one shard's rows in each task
    (``_run.run_shard``), its metrics reported to ``df``'s session and observed in the
    query's progress (:mod:`silt_spark.runtime._progress`); returns the operator's output
    ``struct``. A streaming operator's root is checked when its query starts
    (:mod:`silt_spark.runtime._guard`)."""
    report = _metrics.accumulator(df)
    schema = _progress.arrow_schema(struct)
    if getattr(df, "isStreaming", False):
        _guard.register(df.sparkSession, spec)  # checks the root when the query starts

    def shard_fn(batches: Any) -> Any:
        return _run.run_shard(spec, batches, process, report, schema)

    # The name Spark's plan shows for the stage: MapInArrow silt_aggregate(...), not shard_fn.
    shard_fn.__name__ = shard_fn.__qualname__ = f"silt_{spec.kind}"
    mapped = routed.mapInArrow(shard_fn, _progress.stage_struct(struct))
    return _progress.observe(mapped, spec.kind, spec.root)


#: The longest duration an option may give: Spark timestamps are 64-bit microseconds.
MAX_DURATION_MS = _interval.MAX_DURATION_MS


def parse_delay_ms(delay: Any, name: str = "watermark_delay") -> int:
    """A delay (``watermark_delay``) in ms, ``0..MAX_DURATION_MS``: ``int`` ms, a
    ``datetime.timedelta`` or an interval string (``_interval.py``). Raises
    :class:`~silt.errors.InvalidTypeError` or :class:`~silt.errors.InvalidArgumentError` naming
    ``name`` otherwise (``inf``, ``nan`` included)."""
    return _interval.duration_ms(value=delay, name=name, positive=False, months_ok=True)


def _timestamp_column(df: Any, column: str, name: str) -> None:
    """Refuse ``column`` unless it is a ``timestamp`` or ``timestamp_ntz`` column of ``df``."""
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise InvalidArgumentError(
            f"{name} {column!r} is not in the DataFrame ({sorted(fields)})"
        )
    t = fields[column]
    if not isinstance(t, (T.TimestampType, T.TimestampNTZType)):
        raise InvalidTypeError(
            f"{name} {column!r} has type {t.simpleString()}; it must be a timestamp column "
            "(cast epoch values with timestamp_millis(...) or to_timestamp(...))"
        )


def _duration_ms(value: Any, name: str) -> int:
    """A positive duration (a window, a slide, a TTL) in ms, ``1..MAX_DURATION_MS``: ``int``
    ms, a ``datetime.timedelta`` or an interval string (``_interval.py``)."""
    return _interval.duration_ms(value=value, name=name, positive=True, months_ok=False)


#: The parameters every operator's builder shares, documented once: each builder's docstring
#: has ``{root_parameters}`` where they go (:func:`root_parameters`).
ROOT_PARAMETERS = """\
key_groups : int, default 256
    Number of key groups, fixed per root.
take_over : bool, default False
    Take the state root over from another streaming query: discard the state that
    belongs to another query id (a new checkpoint means a new query id) instead of failing
    with :class:`~silt_spark.errors.ForeignStateError`. To start your own query's state
    over, use :func:`silt_spark.drop_state`. (``reset=`` is its deprecated old name.)
settings : silt.Settings, optional
    LSM settings for the shards.
storage_options : dict of str, optional
    Object-store options for the state root, credentials included (``access_key_id``,
    ``secret_access_key``... for ``s3://``; see docs/spark.md): passed with the job to the
    executors, never shown. ``spark.silt.storage.<name>`` in the Spark conf sets them too;
    this argument wins.
"""


def root_parameters(builder: Callable[..., Any]) -> Callable[..., Any]:
    """Put :data:`ROOT_PARAMETERS` into ``builder``'s docstring at its ``{root_parameters}``
    line, indented as that line is."""
    doc = builder.__doc__ or ""
    marker = re.search(r"^([ \t]*)\{root_parameters\}\n", doc, re.M)
    if marker is not None:
        indent = marker.group(1)
        block = "".join(indent + line + "\n" if line else "\n"
                        for line in ROOT_PARAMETERS.splitlines())
        builder.__doc__ = doc[:marker.start()] + block + doc[marker.end():]
    return builder
