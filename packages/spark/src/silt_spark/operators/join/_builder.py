"""``join``: the stream-stream join's builder (driver side): checks the sides, the join keys and
the time bounds, records them in the root's descriptor, and plans the query (both sides
routed by key group into one ``mapInArrow`` task per shard running ``_probe.merge_partition``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _api, _layout, _root, _shard
from ...runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ._buffers import (
    HOWS,
    JOIN_KEYS,
    KIND,
    LEFT,
    MIN_BUCKET_US,
    RIGHT,
    SIDE_COLUMN,
    SIDE_TYPES,
    SIDES,
    TIME_INDEX,
    JoinPlan,
)
from ._probe import merge_partition


def _on(on: Any, left: Any, right: Any) -> tuple[list[str], list[str], bool]:
    """``(left key columns, right key columns, using)``: ``using`` when ``on`` names columns
    of both sides (Spark's ``join(other, "k")``), not when it pairs ``(left, right)`` names."""
    items = [on] if isinstance(on, (str, tuple)) else list(on or [])
    if not items:
        raise InvalidArgumentError(
            "on must name the join key: a column of both sides ('user', ['user', 'day']) or "
            "(left column, right column) pairs ([('order_user', 'pay_user')])"
        )
    if all(isinstance(x, str) for x in items):
        lk, rk, using = list(items), list(items), True
    elif all(isinstance(x, tuple) and len(x) == 2 and all(isinstance(c, str) for c in x)
             for x in items):
        lk, rk, using = [x[0] for x in items], [x[1] for x in items], False
    else:
        raise InvalidTypeError(
            "on must be a column name, a list of names, or a list of (left, right) name pairs, "
            f"got {on!r}"
        )
    for name, cols, df in (("left", lk, left), ("right", rk, right)):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise InvalidArgumentError(
                f"join key columns {missing} are not in the {name} DataFrame ({df.columns})"
            )
    lt = {f.name: f.dataType for f in left.schema.fields}
    rt = {f.name: f.dataType for f in right.schema.fields}
    for a, b in zip(lk, rk):
        if lt[a] != rt[b]:
            raise InvalidTypeError(
                f"join key {a!r} is {lt[a].simpleString()} on the left but {b!r} is "
                f"{rt[b].simpleString()} on the right: cast one side so both have one type "
                "(a key's type decides its key group)"
            )
    return lk, rk, using


@_api.root_parameters
def join(
    left: Any,
    right: Any,
    on: Any,
    how: str = "inner",
    *,
    state_url: str,
    num_shards: int,
    left_time_column: str | None = None,
    right_time_column: str | None = None,
    left_watermark_delay: Any = 0,
    right_watermark_delay: Any = 0,
    time_range: tuple[Any, Any] | None = None,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    heartbeat: bool = False,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """Join two streaming DataFrames on equal keys, with each side's buffer in silt.

    The counterpart of Spark's stream-stream join::

        left.withWatermark(left_time_column, left_watermark_delay).join(
            right.withWatermark(right_time_column, right_watermark_delay),
            keys & (lt >= rt - a) & (lt <= rt + b), how)

    with the same output rows (see ``docs/spark.md`` for the differences). Both inputs reach a
    shard through one shuffle; per shard, each batch's rows are matched against the other
    side's buffer with one prefix scan per join key and time bucket, and all writes go in one
    write batch. Rows the watermark has expired are evicted by whole time buckets.

    Parameters
    ----------
    left, right : pyspark.sql.DataFrame
        Streaming DataFrames.
    on : str, list of str, or list of (str, str)
        The equality keys: column names both sides have (the output has each once, as Spark's
        ``join(other, ["k"])``), or ``(left column, right column)`` pairs (the output keeps all
        columns of both sides, as ``join(other, left.a == right.b)``). Paired key columns must
        have the same type.
    how : str, default "inner"
        ``"inner"``, ``"left"`` (``"left_outer"``), ``"right"`` (``"right_outer"``), ``"full"``
        (``"outer"``, ``"full_outer"``) or ``"left_semi"``. Outer and semi joins need event
        time and a ``time_range`` (as in Spark): an outer side's row never matched is emitted
        once, with nulls for the other side, in the first micro-batch whose watermark expires
        it (after a batch that moved it, silt's tick source runs Spark's no-data batch).
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards. Restarting with another number rescales without moving state.
    left_time_column, right_time_column : str, optional
        Each side's event-time column (``timestamp`` or ``timestamp_ntz``): give both or
        neither. Micro-batch ``b`` runs with the query-wide watermark (the minimum over the
        sides of their largest event time before ``b`` minus their delay); rows at or before it
        are late and dropped.
    left_watermark_delay, right_watermark_delay : int, str, timedelta or None, default 0
        Each side's ``withWatermark`` delay (ms, ``"10 seconds"``, a ``timedelta``); ``None``
        for a side without a watermark, as a Spark input without ``withWatermark``: its rows are
        never late, and no row of either side expires (Spark's rule: a side's rows expire only
        when both sides have one). A left outer or semi join needs one on the right, a right
        outer join on the left, a full join on either, as in Spark.
    time_range : (a, b), optional
        Match only rows whose left time lies between the right time minus ``a`` and the right
        time plus ``b`` (inclusive; durations as for the delays; ``a + b >= 0``). Rows expire
        once no future row of the other side can match them.
    {root_parameters}
    heartbeat : bool, default False
        Union a 1 row/s ``rate`` source so batches keep running while both inputs are idle
        (needed only with ``spark.silt.tick=false``, see docs/spark.md).

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame with the columns of Spark's join: for ``on`` names, the key columns
        (the right side's for ``"right"``, coalesced for ``"full"``), then the left side's other
        columns, then the right side's; for pairs, all left columns then all right columns;
        for ``"left_semi"``, the left columns.

    Examples
    --------
    >>> import silt_spark
    >>> orders = spark.readStream.schema("user string, order_id long, ot timestamp") \\
    ...     .parquet("/data/orders")
    >>> payments = spark.readStream.schema("user string, amount double, pt timestamp") \\
    ...     .parquet("/data/payments")
    >>> paid = silt_spark.join(
    ...     orders, payments, "user", "left", state_url="file:///data/state/paid",
    ...     num_shards=4, left_time_column="ot", right_time_column="pt",
    ...     left_watermark_delay="1 minute", right_watermark_delay="1 minute",
    ...     time_range=("1 hour", "0 seconds"))  # payment within an hour after the order
    >>> query = (paid.writeStream.format("parquet").option("path", "/data/out/paid")
    ...          .option("checkpointLocation", "/data/chk/paid").start())
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    kind = HOWS.get(how.lower() if isinstance(how, str) else how)
    if kind is None:
        raise InvalidArgumentError(
            f"how must be one of inner, left, right, full, left_semi, got {how!r}"
        )
    lk, rk, using = _on(on, left, right)
    if (left_time_column is None) != (right_time_column is None):
        raise InvalidArgumentError(
            "give left_time_column and right_time_column (event time on both sides) or neither"
        )
    event = left_time_column is not None
    if event:
        _api._timestamp_column(left, left_time_column, "left_time_column")
        _api._timestamp_column(right, right_time_column, "right_time_column")
    delays = tuple(None if d is None else _api.parse_delay_ms(d, f"{name}_watermark_delay")
                   for d, name in ((left_watermark_delay, "left"),
                                   (right_watermark_delay, "right")))
    if not event and any(delays):
        raise InvalidArgumentError("watermark delays need left_time_column and right_time_column")
    rng: tuple[int, int] | None = None
    if time_range is not None:
        if not event:
            raise InvalidArgumentError("time_range needs left_time_column and right_time_column")
        if not isinstance(time_range, (tuple, list)) or len(time_range) != 2:
            raise InvalidTypeError(f"time_range must be a pair (a, b), got {time_range!r}")
        a = _signed_ms(time_range[0], "time_range[0]")
        b = _signed_ms(time_range[1], "time_range[1]")
        if a + b < 0:
            raise InvalidArgumentError(
                f"time_range ({a} ms, {b} ms) is empty: left time between right time - a and "
                "right time + b needs a + b >= 0"
            )
        rng = (a * 1000, b * 1000)
    if kind != "inner" and rng is None:
        raise InvalidArgumentError(
            f"a {kind} join needs event time and a time_range (as Spark's stream-stream joins): "
            "without them its buffers would never expire and unmatched rows never come out"
        )
    watermarked = [d is not None for d in delays] if event else [False, False]
    # Spark's rule for outer and semi joins: a watermark on the side whose rows come out with
    # nulls (or decide a semi join's rows), so that the other side's rows can expire.
    needs = {"left": "right", "left_semi": "right", "right": "left"}.get(kind)
    if needs is not None and not watermarked[SIDES.index(needs)]:
        raise InvalidArgumentError(
            f"a {kind} join needs a watermark on the {needs} side (as Spark's): give "
            f"{needs}_watermark_delay (0 or more), not None"
        )
    if kind == "full" and not any(watermarked):
        raise InvalidArgumentError(
            "a full join needs a watermark on at least one side (as Spark's): give "
            "left_watermark_delay or right_watermark_delay (0 or more), not None"
        )
    inputs = iter(range(2))
    watermark_inputs = tuple(next(inputs) if w else None for w in watermarked)
    internal = {SIDE_COLUMN, KG_COLUMN, PARTITION_COLUMN}
    for name, df in (("left", left), ("right", right)):
        bad = [c for c in df.columns if c in internal or c.startswith("__")]
        if bad:
            raise InvalidArgumentError(
                f"the {name} DataFrame must not have columns starting with '__' ({bad})"
            )
    lcols, rcols = tuple(left.columns), tuple(right.columns)
    lf = {f.name: f for f in left.schema.fields}
    rf = {f.name: f for f in right.schema.fields}

    # Output columns, as Spark's join gives them.
    out_fields: list[Any] = []
    output: list[tuple] = []
    if kind == "left_semi":
        for i, c in enumerate(lcols):
            out_fields.append(T.StructField(c, lf[c].dataType, True))
            output.append(("L", i))
    elif using:
        for a, b in zip(lk, rk):
            li, ri = lcols.index(a), rcols.index(b)
            spec = {"right": ("R", ri), "full": ("C", li, ri)}.get(kind, ("L", li))
            out_fields.append(T.StructField(a, lf[a].dataType, True))
            output.append(spec)
        for i, c in enumerate(lcols):
            if c not in lk:
                out_fields.append(T.StructField(c, lf[c].dataType, True))
                output.append(("L", i))
        for i, c in enumerate(rcols):
            if c not in rk:
                out_fields.append(T.StructField(c, rf[c].dataType, True))
                output.append(("R", i))
    else:
        for i, c in enumerate(lcols):
            out_fields.append(T.StructField(c, lf[c].dataType, True))
            output.append(("L", i))
        for i, c in enumerate(rcols):
            out_fields.append(T.StructField(c, rf[c].dataType, True))
            output.append(("R", i))
    names = [f.name for f in out_fields]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidArgumentError(
            f"both sides have columns named {dup}: rename one side's (withColumnRenamed), as "
            "the output needs distinct column names"
        )
    out_struct = T.StructType(out_fields)
    bucket_us = None if rng is None else max(MIN_BUCKET_US, rng[0] + rng[1])

    spec = _api.operator_spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=left,
        storage_options=storage_options,
        event_time_delays=tuple(d for d in delays if d is not None) if event else (),
    )
    if event and not all(watermarked):
        spec = replace(spec, no_data_batches=False)  # nothing ever expires (see JoinPlan)
    _api._check_streaming(right, KIND)
    side_types = {SIDES[i]: [[f.name, f.dataType.simpleString()] for f in df.schema.fields]
                  for i, df in enumerate((left, right))}
    # A new root keeps a time index of its outer sides; one created before the index existed
    # goes on without (its descriptor never gains the field: its rows have no entries).
    fresh = _root.read_descriptor(spec.root, spec.storage_options) is None
    spec = _root.ensure_descriptor(spec, {
        "key_columns": _api.key_types(left, lk),
        "join": {"how": kind, "bucket_us": bucket_us, "left": list(lcols),
                 "right": list(rcols),
                 # which sides have a watermark, only where not both (as every root made before
                 # a side could go without): the markers number the watermarked inputs
                 **({"watermarked": watermarked} if event and not all(watermarked) else {})},
        SIDE_TYPES: side_types,
        **({TIME_INDEX: 1} if fresh else {}),
    }, (*_api.PINNED, "join"))
    _root.refresh_descriptor(spec, {SIDE_TYPES: side_types,
                                     JOIN_KEYS: {"left": list(lk), "right": list(rk)}})
    time_indexed = (_root.read_descriptor(spec.root, spec.storage_options) or {}).get(
        TIME_INDEX) == 1

    def side_struct(df: Any, prefix: str) -> list[Any]:
        return [T.StructField(f"{prefix}{i}", f.dataType, True)
                for i, f in enumerate(df.schema.fields)]

    l_struct, r_struct = side_struct(left, "__l"), side_struct(right, "__r")
    jp = JoinPlan(
        how=kind, nkeys=len(lk), columns=(lcols, rcols),
        time_index=(lcols.index(left_time_column) if event else None,
                    rcols.index(right_time_column) if event else None),
        time_range=rng, bucket_us=bucket_us, output=tuple(output),
        side_schemas=(to_arrow_schema(T.StructType(l_struct), timezone="UTC"),
                      to_arrow_schema(T.StructType(r_struct), timezone="UTC")),
        output_schema=to_arrow_schema(out_struct, timezone="UTC"),
        time_indexed=time_indexed, watermark_inputs=watermark_inputs,
    )

    def tagged(df: Any, side: int, keys: list[str]) -> Any:
        own, other = (l_struct, r_struct) if side == LEFT else (r_struct, l_struct)
        cols = [F.col(c).alias(f"__k{i}") for i, c in enumerate(keys)]
        cols.append(F.lit(side).cast("int").alias(SIDE_COLUMN))
        mine = [F.col(c).alias(f.name) for c, f in zip(df.columns, own)]
        nulls = [F.lit(None).cast(f.dataType).alias(f.name) for f in other]
        cols += (mine + nulls) if side == LEFT else (nulls + mine)
        return df.select(*cols)

    union = tagged(left, LEFT, lk).unionByName(tagged(right, RIGHT, rk))

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return merge_partition(task, batches, jp)

    key_cols = [f"__k{i}" for i in range(len(lk))]
    routed = _api.route(union, key_cols, spec, heartbeat)
    return _api.shard_stage(routed, left, spec, process, out_struct)


def _signed_ms(value: Any, name: str) -> int:
    """A duration of ``time_range`` in ms; a leading ``-`` (or a negative int/timedelta) is
    allowed (the range may lie after or before the other side's time)."""
    import datetime as dt

    if isinstance(value, str) and value.strip().startswith("-"):
        return -_api.parse_delay_ms(value.strip()[1:], name)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return -_api.parse_delay_ms(-value, name)
    if isinstance(value, dt.timedelta) and value < dt.timedelta(0):
        return -_api.parse_delay_ms(-value, name)
    return _api.parse_delay_ms(value, name)
