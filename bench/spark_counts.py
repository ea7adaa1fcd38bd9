"""The benchmark's running count + sum per key, written once for each stateful API that
bench/spark_bench.py compares: silt's per-key processor (pandas rows, and Arrow rows on its
fast path), silt's batch processor, Spark's ``transformWithStateInPandas`` and
``applyInPandasWithState``; and the stateless floor's identity map.

Import it after bench/spark_bench.py (or the script importing it) has put the checkout's
packages on ``sys.path``; the classes reach Spark's Python workers by value
(``cloudpickle.register_pickle_by_value``, done by spark_bench), as the workers cannot import
this folder.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import silt_spark


def identity(batches):
    """The stateless floor's ``mapInArrow`` function: every Arrow batch as it came."""
    yield from batches


class Count(silt_spark.StatefulProcessor):
    def init(self, handle):
        self.state = handle.getValueState("s", "n long, total long")

    def handleInputRows(self, key, rows, timerValues):
        n, total = self.state.get() or (0, 0)
        for df in rows:
            n += len(df)
            total += int(df["amount"].sum())
        self.state.update((n, total))
        yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})


class FastCount(silt_spark.StatefulProcessor):
    """The same logic on silt's fast path: Arrow rows in, one tuple out per key."""

    def init(self, handle):
        self.state = handle.getValueState("s", "n long, total long")

    def handleInputRows(self, key, rows, timerValues):
        import pyarrow.compute as pc

        n, total = self.state.get() or (0, 0)
        for t in rows:
            n += t.num_rows
            total += pc.sum(t["amount"]).as_py() or 0
        self.state.update((n, total))
        yield (key[0], n, total)


class BatchCount(silt_spark.BatchProcessor):
    """The same logic as a batch processor: once per shard and micro-batch, over columns.

    Rows are grouped by key with numpy (one stable sort, ``np.add.reduceat``), not with
    ``Table.group_by``: pyarrow's runs through ``pyarrow.acero``, which imports pandas (about
    0.2 s of CPU in each fresh Python worker)."""

    def init(self, handle):
        handle.getValueState("s", "n long, total long")

    def process(self, batch, state, timers):
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = batch["key"].to_numpy()
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        per_key = pa.table({
            "key": sorted_keys[starts],
            "count_all": np.diff(np.r_[starts, len(keys)]),
            "amount_sum": np.add.reduceat(batch["amount"].to_numpy()[order], starts),
        })
        totals = state.value("s")
        old = totals.get(per_key)
        n = pc.add(pc.fill_null(old["n"], 0), per_key["count_all"])
        total = pc.add(pc.fill_null(old["total"], 0), per_key["amount_sum"])
        totals.put(per_key, pa.table({"n": n, "total": total}))
        return pa.table({"key": per_key["key"], "n": n, "total": total})


class SparkCount:
    """The same logic for transformWithStateInPandas."""

    def __new__(cls):
        from pyspark.sql.streaming import StatefulProcessor

        class _P(StatefulProcessor):
            def init(self, handle):
                self.state = handle.getValueState("s", "n long, total long")

            def handleInputRows(self, key, rows, timerValues):
                n, total = self.state.get() if self.state.exists() else (0, 0)
                for df in rows:
                    n += len(df)
                    total += int(df["amount"].sum())
                self.state.update((n, total))
                yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})

        return _P()


def pandas_with_state_count(key, pdfs, state):
    """The same logic for applyInPandasWithState."""
    n, total = state.get if state.exists else (0, 0)
    for df in pdfs:
        n += len(df)
        total += int(df["amount"].sum())
    state.update((n, total))
    yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})
