"""``Table.group_by(...).aggregate(...)`` without importing pandas.

pyarrow's ``TableGroupBy.aggregate`` runs an Acero plan through the ``pyarrow.acero`` module,
which imports ``pyarrow.dataset``, which imports pandas: about 0.2 s of CPU in every fresh
Spark Python worker, paid by the first batch after a cold restart (the partial aggregation
before the shuffle, then again in each worker of the shard stage). :func:`group_by` builds the
same two-node plan (a table source, then the aggregation) from ``pyarrow._acero``, where those
node classes live, and returns the same table: same rows in the same order, the same column
names (``<column>_<function>``, ``count_all``) and types. When that module is missing (a
pyarrow without Acero's own extension module) it falls back to ``Table.group_by``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def group_by(table: Any, keys: str | Sequence[str], aggregations: Sequence[tuple[Any, ...]],
             *, use_threads: bool = False) -> Any:
    """``table.group_by(keys, use_threads=use_threads).aggregate(aggregations)``.

    ``aggregations`` are pyarrow's: ``(column or columns, function)`` or ``(column or columns,
    function, options)``; a function without its ``hash_`` prefix gets it when there are
    keys. Without a worker thread pool (``use_threads=False``, the default here) the output is
    in order of each group's first row, as pyarrow's.
    """
    key_list = [keys] if isinstance(keys, str) else list(keys)
    try:
        from pyarrow._acero import AggregateNodeOptions, Declaration, TableSourceNodeOptions
    except ImportError:  # pragma: no cover - a pyarrow built without Acero's module
        return table.group_by(key_list, use_threads=use_threads).aggregate(list(aggregations))
    specs = []
    for aggr in aggregations:
        if len(aggr) == 2:
            target, func = aggr
            opt = None
        else:
            target, func, opt = aggr
        target = list(target) if isinstance(target, (list, tuple)) else [target]
        if key_list and not func.startswith("hash_"):
            func = "hash_" + func
        if not key_list and func.startswith("hash_"):
            func = func[5:]
        bare = func[5:] if func.startswith("hash_") else func
        specs.append((target, func, opt, "_".join(target) + "_" + bare if target else bare))
    plan = Declaration.from_sequence([
        Declaration("table_source", TableSourceNodeOptions(table)),
        Declaration("aggregate", AggregateNodeOptions(specs, keys=key_list)),
    ])
    return plan.to_table(use_threads=use_threads)
