"""Streaming deduplication: each key's first row only, keys remembered forever, until the
query-wide watermark passes their first event time plus the delay (Spark's
``dropDuplicatesWithinWatermark``), or for a processing-time TTL.

No Python runs per row:

1. **Before the shuffle** (``mapInArrow`` per input partition) each row gets a sequence number
   ``__seq = partition id * 2^40 + row index`` (its position in the micro-batch's input, which a
   re-run of the batch reproduces), and duplicates within the partition are dropped with one
   ``pyarrow`` ``group_by`` (the smallest ``__seq`` per key wins).
2. **Per shard**: the same again across partitions, then one sorted ``multi_get`` of the batch's
   distinct keys; keys without state are new. Their rows are emitted (in input order) and their
   keys written with one ``WriteBatch``, with the TTL as silt's own expiry.

State entry per key::

    key:   kg:u16be 'D' enc(grouping key)
    value: the micro-batch id that first saw the key (u64be)
           [event time: then expires_at (i64be, us): the first row's event time + the delay]

**Event time** (``event_time_column``, as ``dropDuplicatesWithinWatermark``): batch ``b`` runs
with the query-wide watermark ``W`` of the batches before it, and ``L``, the one batch ``b - 1``
ran with (``_watermark.py``; ``L == W`` unless batches run back to back). Rows whose event time
is at or before ``L`` are late and dropped (before the shuffle already); a row of a key still
remembered is a duplicate, a row of a forgotten one is emitted and remembered anew; then, after
the batch's rows, as in Spark, the keys with ``expires_at <= W`` are forgotten. Later
duplicates do not extend a key's life: the first occurrence decides. An index ``kg:u16be 'E'
expires_at:u64be(+2^63) enc(grouping key)`` finds the forgotten keys to delete, with a lower
bound of its entries in the manifest meta (``spark.dedup_next_expiry_us``) so a batch in which
nothing expires scans nothing.

**Processing time** (``ttl``): a key is remembered for the TTL from its first row, with silt's
own expiry; expired keys read as absent (a new first row is emitted) and compaction drops them.

The module owns the operator: its builder (:func:`deduplicate`, which plans the query on the
driver), its executors (``number_and_drop`` before the shuffle, ``merge_partition`` in the shard's
task) and :func:`decode` (its entries as ``read_state`` rows). Keys are built and split through
``_keys.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from silt.errors import InvalidArgumentError
from silt.tierkit import public_url

from ..runtime import _api, _codec, _keys, _layout, _readers, _root, _shard, _watermark
from ..runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ..runtime._ndarrays import from_numpy, scalar, to_numpy
from ..runtime._shard import ShardTask
from ._batchkeys import encode_key_columns
from ._groupby import group_by

#: The operator kind, as recorded in the state root's descriptor.
KIND = "dedup"
DEDUP_TAG = _keys.DEDUP_TAG
#: Event-time expiry index: ``kg 'E' expires_at enc(key)`` (value empty).
EXPIRY_TAG = _keys.EXPIRY_TAG
META_NEXT_EXPIRY = "spark.dedup_next_expiry_us"
_I64 = struct.Struct(">q")
SEQ_COLUMN = "__silt_seq"
_U64 = struct.Struct(">Q")
#: Rows per input partition that a sequence number can tell apart.
_ROW_BITS = 40


@dataclass(frozen=True)
class DedupPlan:
    key_columns: tuple[str, ...]
    ttl_ms: int | None
    output_schema: Any  # pyarrow.Schema of the input (and output) rows
    seq_schema: Any  # the input plus SEQ_COLUMN
    #: Event-time mode: the timestamp column and the delay (ms); ``None`` otherwise.
    event_time_column: str | None = None
    delay_ms: int = 0


def drop_late(t: Any, dp: DedupPlan, watermark_ms: int) -> Any:
    """``t`` without the rows whose event time is at or before the watermark (Spark keeps rows
    with a null event time)."""
    import pyarrow.compute as pc

    us = _watermark.event_us(t[dp.event_time_column])
    # A null event time is never late: and_kleene(null, false) is false (fill_null(False)
    # would import pandas for its scalar).
    late = pc.and_kleene(pc.less_equal(us, scalar(watermark_ms * 1000)), pc.is_valid(us))
    return t.filter(pc.invert(late)) if pc.any(late).as_py() else t


def _first_per_key(t: Any, keys: tuple[str, ...], extra: tuple[str, ...] = ()) -> Any:
    """Rows of ``t`` with the smallest ``SEQ_COLUMN`` of their key, in ``SEQ_COLUMN`` order."""
    import pyarrow.compute as pc

    g = group_by(t.select([*keys, *extra, SEQ_COLUMN]), [*keys, *extra], [(SEQ_COLUMN, "min")])
    if g.num_rows < t.num_rows:
        t = t.filter(pc.is_in(t[SEQ_COLUMN], value_set=g[f"{SEQ_COLUMN}_min"]))
    return t.take(pc.sort_indices(t[SEQ_COLUMN]))


def number_and_drop(
    batches: Iterator[Any], dp: DedupPlan, watermark: Callable[[], int] | None = None
) -> Iterator[Any]:
    """Before the shuffle: add ``SEQ_COLUMN``, drop late rows (event time: ``watermark()`` is
    the batch's watermark) and keep each key's first row of the partition."""
    import numpy as np
    import pyarrow as pa
    from pyspark import TaskContext

    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    ctx = TaskContext.get()
    base = (ctx.partitionId() if ctx is not None else 0) << _ROW_BITS
    t = pa.Table.from_batches(batches)
    if t.num_rows >= 1 << _ROW_BITS:
        raise ValueError("an input partition of more than 2^40 rows")
    t = t.append_column(SEQ_COLUMN, from_numpy(np.arange(base, base + t.num_rows, dtype=np.int64)))
    if dp.event_time_column is not None and watermark is not None:
        # Late rows never count as a key's first row. They cannot raise the largest event
        # time either (they are at or before the watermark), so the shards need not see them.
        t = drop_late(t, dp, watermark())
        if t.num_rows == 0:
            return
    yield from _first_per_key(t, dp.key_columns).cast(dp.seq_schema).to_batches()


def merge_partition(task: ShardTask, batches: Iterator[Any], dp: DedupPlan) -> Iterator[Any]:
    """After the shuffle, in the shard's task: emit the rows of keys not seen before (event
    time: not remembered at the watermark) and forget expired keys."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import silt

    batches = [b for b in batches if b.num_rows]
    event = dp.event_time_column is not None
    if not batches and not event:
        return  # nothing to look up and nothing to forget: the shard is not even opened
    ops: list[tuple[bytes, bytes | None, float | None]] = []
    meta = task.base_meta
    bound: int | None = None
    limit = late_limit = 0
    if event:
        # As Spark: the batch's rows meet the keys as batch b - 1 left them (its watermark
        # for late events), and keys are forgotten after them (its watermark for eviction).
        limit = task.watermark * 1000  # us: keys with expires_at <= limit are forgotten
        late_limit = (task.late_watermark or 0) * 1000
        raw = meta.get(META_NEXT_EXPIRY)
        bound = int(raw) if raw else None
        if bound is not None and bound <= limit:
            bound = _forget(task, limit, ops)
    out = None
    if batches:
        t = pa.Table.from_batches(batches)
        if pc.min(t[KG_COLUMN]).as_py() < 0:
            t = t.filter(pc.greater_equal(t[KG_COLUMN], 0))  # tick rows only make a batch
    if batches and t.num_rows:
        if event:
            t = drop_late(t, dp, task.late_watermark or 0)  # (already dropped before the shuffle)
            event_us = _watermark.event_us(t[dp.event_time_column])
            top = pc.max(event_us).as_py() if t.num_rows else None
            if top is not None:
                task.observe_event_time(top // 1000)
        t = _first_per_key(t.drop_columns([PARTITION_COLUMN]), dp.key_columns, (KG_COLUMN,))
        keys = encode_key_columns(t[KG_COLUMN], [t[c] for c in dp.key_columns], DEDUP_TAG)
        seen = task.db.multi_get(keys)
        if event:
            new = np.fromiter(
                (v is None or _I64.unpack_from(v, 8)[0] <= late_limit for v in seen), bool,
                len(seen),
            )
        else:
            new = np.fromiter((v is None for v in seen), bool, len(seen))
        if new.any():
            idx = np.flatnonzero(new)
            head = _U64.pack(task.batch_id)
            if event:
                expires = (
                    to_numpy(_watermark.event_us(t[dp.event_time_column]))[idx]
                    + dp.delay_ms * 1000
                ).tolist()
                pack, kgs = _I64.pack, to_numpy(t[KG_COLUMN])[idx].tolist()
                for i, e, kg in zip(idx.tolist(), expires, kgs):
                    k = keys[i]
                    if e <= limit:  # emitted, and forgotten in this batch (after its rows)
                        continue
                    ops.append((k, head + pack(e), None))
                    index = _keys.timed_key(kg, EXPIRY_TAG, e, _keys.body(k))
                    ops.append((index, b"", None))
                    if bound is None or e < bound:
                        bound = e
            else:
                ttl = None if dp.ttl_ms is None else dp.ttl_ms / 1000.0
                ops.extend((keys[i], head, ttl) for i in idx.tolist())
            out = t.filter(from_numpy(new)).select(list(dp.output_schema.names))
    if ops:
        batch = silt.WriteBatch()
        batch.ops = ops
        task.db.write(batch)
        task.changed = True
    if event:
        old = meta.get(META_NEXT_EXPIRY) or ""
        new_bound = "" if bound is None else str(bound)
        if new_bound != old:
            task.meta_updates[META_NEXT_EXPIRY] = new_bound
            task.changed = True
    if out is not None:
        yield from out.cast(dp.output_schema).to_batches()


def _forget(task: ShardTask, limit: int, ops: list) -> int | None:
    """Delete the keys whose ``expires_at <= limit`` and their index entries (appended to
    ``ops``); return the smallest expiry left in the index (``None``: empty). One short scan
    per key group of the shard, and one ``multi_get``: a key re-emitted since an index entry was
    written has a newer expiry and stays."""
    due, nxt = _keys.due_entries(task.db, task.first_kg, task.last_kg, EXPIRY_TAG, limit)
    due_keys: list[bytes] = []
    for _, kg, k in due:
        ops.append((k, None, None))
        due_keys.append(_keys.head(kg, DEDUP_TAG) + _keys.after_time(k))
    if due_keys:
        for k, v in zip(due_keys, task.db.multi_get(due_keys)):
            if v is not None and _I64.unpack_from(v, 8)[0] <= limit:
                ops.append((k, None, None))
    return nxt


# --- driver: the query plan ------------------------------------------------------------------

@_api.root_parameters
def deduplicate(
    df: Any,
    key_columns: Sequence[str] | str,
    state_url: str,
    num_shards: int,
    *,
    event_time_column: str | None = None,
    watermark_delay: Any = 0,
    ttl: Any = None,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    reset: bool | None = None,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """Drop duplicate rows of a streaming DataFrame: each key's first row only.

    The counterpart of ``df.dropDuplicates(keys)`` (no ``event_time_column``, no ``ttl``), of
    ``df.withWatermark(col, delay).dropDuplicatesWithinWatermark(keys)`` (with
    ``event_time_column`` and ``watermark_delay``: same results), or, with a ``ttl``, a
    deduplication that forgets keys in processing time. Vectorized: before the shuffle,
    duplicates within each input partition are dropped with ``pyarrow``; each shard then reads
    its batch's distinct keys with one sorted ``multi_get`` and writes the new ones with one
    write batch.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame.
    key_columns : str or list of str
        The columns that identify a duplicate (nulls compare equal, as in Spark).
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    event_time_column : str, optional
        A timestamp column: deduplicate **in event time**, as ``dropDuplicatesWithinWatermark``.
        Micro-batch ``b`` runs with the query-wide watermark (the largest event time of the
        batches before ``b`` minus ``watermark_delay``, at least 0). Rows whose event time is at
        or before batch ``b - 1``'s watermark are late and dropped (Spark's rule); a key is
        remembered until the watermark reaches its first row's event time plus
        ``watermark_delay`` (forgotten after the batch's rows), then its next row is emitted
        again.
    watermark_delay : int, str or timedelta, default 0
        With ``event_time_column``: how late rows may arrive (ms, ``"10 minutes"``, a
        ``timedelta``); also how long past its first event time a key is remembered.
    ttl : int, str or timedelta, optional
        Instead of ``event_time_column``: how long a key is remembered after its first row, in
        **processing time** (wall clock), so results depend on when batches run. Later
        duplicates do not extend it; once it has passed, the key's next row is emitted again.
        Neither option: keys are remembered forever.
    {root_parameters}

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame with ``df``'s columns: the first row of each key not seen before
        (within the TTL). Among one micro-batch's rows of a new key, the first in the batch's
        input order (input partition, then position) wins, so a re-run of the batch emits the
        same row.

    Examples
    --------
    >>> import silt_spark
    >>> clicks = spark.readStream.schema("event_id string, user string, ts timestamp") \\
    ...     .json("/data/clicks")
    >>> unique = silt_spark.deduplicate(
    ...     clicks, ["event_id"], state_url="file:///data/state/dedup", num_shards=4,
    ...     ttl="24 hours")
    >>> query = (unique.writeStream.format("parquet").option("path", "/data/out/clicks")
    ...          .option("checkpointLocation", "/data/chk/dedup").start())
    """
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    keys = _api.key_list(key_columns, df)
    ttl_ms = None if ttl is None else _api._duration_ms(ttl, "ttl")
    delay_ms = _api.parse_delay_ms(watermark_delay)
    if event_time_column is not None:
        if ttl is not None:
            raise InvalidArgumentError(
                "pass event_time_column (forget keys in event time, as "
                "dropDuplicatesWithinWatermark) or ttl (forget keys in processing time), not both"
            )
        _api._timestamp_column(df, event_time_column, "event_time_column")
    elif delay_ms:
        raise InvalidArgumentError("watermark_delay needs event_time_column")
    for name in (SEQ_COLUMN, _layout.KG_COLUMN, _layout.PARTITION_COLUMN):
        if name in df.columns:
            raise InvalidArgumentError(f"the DataFrame must not have a column named {name!r}")
    delays = (delay_ms,) if event_time_column is not None else ()
    spec = _api.operator_spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        storage_options=storage_options,
        event_time_delays=delays,
    )
    mode = "event_time" if event_time_column is not None else "processing_time"
    have = _root.read_descriptor(state_url, spec.storage_options) if mode == "event_time" else None
    if have is not None and have.get("operator") == "dedup" and "dedup_time" not in have:
        from ..errors import LayoutMismatchError

        raise LayoutMismatchError(
            f"the state root {public_url(state_url)!r} holds a processing-time deduplication's "
            "keys; "
            "event-time deduplication needs another state_url"
        )
    spec = _root.ensure_descriptor(
        spec, {"key_columns": _api.key_types(df, keys), "dedup_time": mode},
        (*_api.PINNED, "dedup_time"),
    )
    seq_struct = T.StructType([*df.schema.fields, T.StructField(SEQ_COLUMN, T.LongType())])
    dp = DedupPlan(
        tuple(keys), ttl_ms, to_arrow_schema(df.schema, timezone="UTC"),
        to_arrow_schema(seq_struct, timezone="UTC"), event_time_column, delay_ms,
    )
    root, incarnation = spec.root, spec.incarnation

    def watermark() -> int:  # late rows are judged against batch b - 1's watermark
        return _watermark.in_task(root, delays, incarnation, spec.storage_options,
                                  late=spec.ticks)

    def number_fn(batches: Any) -> Any:
        return number_and_drop(batches, dp, watermark if delays else None)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return merge_partition(task, batches, dp)

    numbered = df.mapInArrow(number_fn, seq_struct)
    return _api.shard_stage(_api.route(numbered, keys, spec), df, spec, process, df.schema)


# --- read-back: read_state ----------------------------------------------------------------


def typed_columns(desc: dict[str, Any]) -> list[tuple[str, str]]:
    """``read_state(state_name="seen")``'s columns after the key columns and before
    ``shard_version``: the micro-batch that first saw the key, and when silt forgets it (the
    event time plus the watermark delay, or the first row's time plus the ``ttl``; null when
    it is kept for ever)."""
    return [("first_batch_id", "bigint"), ("expires_at", "timestamp")]


def typed_rows(items: Any, desc: dict[str, Any], url: str, schema: Any) -> Any:
    """``read_state(state_name="seen")`` of one shard: a pyarrow table of ``schema`` per key
    remembered; ``None`` when there is none."""
    import pyarrow as pa

    gkeys, batches, expires, versions = [], [], [], []
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != DEDUP_TAG:
            continue
        gkeys.append(_codec.decode(_keys.body(key)))
        batches.append(_U64.unpack_from(value)[0])
        if len(value) >= 16:  # event time: the key's expiry (us), after the batch
            expires.append(_I64.unpack_from(value, 8)[0])
        else:
            expires.append(None if expiry is None else expiry * 1000)
        versions.append(ver)
    if not gkeys:
        return None
    nk = len(schema) - 3  # the key columns, then first batch, expiry, shard version
    arrays = [pa.array([k[j] for k in gkeys], type=schema.field(j).type) for j in range(nk)]
    arrays += [pa.array(batches, pa.int64()),
               pa.array(expires, pa.int64()).cast(schema.field(nk + 1).type),
               pa.array(versions, pa.int64())]
    return pa.Table.from_arrays(arrays, schema=schema)


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: ``(key tuple, state, map_key, value,
    expires_at_ms, version)`` per live entry of ``items`` (``(key, value, expires_at_ms,
    version)`` of one shard)."""
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) == DEDUP_TAG:  # value: the micro-batch that first saw the key
            batch = _U64.unpack_from(value)[0]  # (event time: then its expiry)
            yield _codec.decode(_keys.body(key)), "seen", None, str(batch), expiry, ver


_readers.register(_readers.StateReader(
    KIND, decode, states=("seen",),
    typed_columns=lambda desc, state_name: typed_columns(desc),
    typed_rows=lambda items, desc, root, schema, state_name: typed_rows(items, desc, root, schema),
))
