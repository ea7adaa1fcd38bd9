"""Streaming deduplication: each key's first row only, keys remembered for a TTL.

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

The TTL is **processing time** and runs from the key's first row: later duplicates do not extend
it (as in Spark's ``dropDuplicatesWithinWatermark``, where the first occurrence decides). Expired
keys read as absent (a new first row is emitted) and compaction drops them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ._aggregate import state_keys
from ._layout import KG_COLUMN, PARTITION_COLUMN
from ._shard import ShardTask, check_key_groups

DEDUP_TAG = b"D"
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


def _first_per_key(t: Any, keys: tuple[str, ...], extra: tuple[str, ...] = ()) -> Any:
    """Rows of ``t`` with the smallest ``SEQ_COLUMN`` of their key, in ``SEQ_COLUMN`` order."""
    import pyarrow.compute as pc

    g = t.select([*keys, *extra, SEQ_COLUMN]).group_by(
        [*keys, *extra], use_threads=False
    ).aggregate([(SEQ_COLUMN, "min")])
    if g.num_rows < t.num_rows:
        t = t.filter(pc.is_in(t[SEQ_COLUMN], value_set=g[f"{SEQ_COLUMN}_min"]))
    return t.take(pc.sort_indices(t[SEQ_COLUMN]))


def number_and_drop(batches: Iterator[Any], dp: DedupPlan) -> Iterator[Any]:
    """Before the shuffle: add ``SEQ_COLUMN`` and keep each key's first row of the partition."""
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
    t = t.append_column(SEQ_COLUMN, pa.array(np.arange(base, base + t.num_rows), pa.int64()))
    yield from _first_per_key(t, dp.key_columns).cast(dp.seq_schema).to_batches()


def merge_partition(task: ShardTask, batches: Iterator[Any], dp: DedupPlan) -> Iterator[Any]:
    """After the shuffle, in the shard's task: emit the rows of keys not seen before."""
    import numpy as np
    import pyarrow as pa

    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    t = pa.Table.from_batches(batches)
    check_key_groups(task, t[KG_COLUMN])
    t = _first_per_key(t.drop_columns([PARTITION_COLUMN]), dp.key_columns, (KG_COLUMN,))
    keys = state_keys(t[KG_COLUMN], [t[c] for c in dp.key_columns], DEDUP_TAG)
    seen = task.db.multi_get(keys)
    new = np.fromiter((v is None for v in seen), bool, len(seen))
    if not new.any():
        return
    import silt

    ttl = None if dp.ttl_ms is None else dp.ttl_ms / 1000.0
    value = _U64.pack(task.batch_id)
    batch = silt.WriteBatch()
    batch.ops = [(keys[i], value, ttl) for i in np.flatnonzero(new).tolist()]
    task.db.write(batch)
    task.changed = True
    out = t.filter(pa.array(new)).select(list(dp.output_schema.names))
    yield from out.cast(dp.output_schema).to_batches()
