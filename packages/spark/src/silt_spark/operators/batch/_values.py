"""The value states of one shard's micro-batch, held by key position (:class:`HeldValues`).

Before ``process`` runs, every value variable of every key of the batch is read with **one**
sorted ``multi_get`` (the entries ``key prefix + name``, built and sorted in Arrow); each
variable's values are then one numpy array of Python objects (the stored bytes, ``None``:
absent) indexed by the key's position in :class:`~._keyset.BatchKeys`, next to the array of its
entry keys. A ``get`` is one ``take`` of positions, a ``put`` or ``delete`` one assignment at
positions: no Python call per key, and a read after a write in the same batch sees the write.
Values are as of the prefetch: a TTL that runs out during the batch takes effect from the next
batch, as for the per-key processor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._keyset import BatchKeys, _object_array


class HeldValues:
    """Value states of the batch's keys, one slot per variable and key position."""

    def __init__(self, task: Any, keys: BatchKeys) -> None:
        #: Reads go to ``task.db`` (whatever the task's DB is at the time of the read).
        self._task = task
        self._keys = keys
        #: Variable name (as in an entry key) -> the value of each key (bytes or ``None``).
        self._values: dict[bytes, np.ndarray] = {}
        #: Variable name -> the entry key of each key (``key prefix + name``).
        self._entries: dict[bytes, np.ndarray] = {}

    def load(self, names: list[bytes]) -> None:
        """Read the variables ``names`` of the keys whose values are not held yet (all of them
        at first, then those added since) with one sorted ``multi_get`` per starting point
        (one in all when the variables were loaded together)."""
        by_start: dict[int, list[bytes]] = {}
        for name in names:
            by_start.setdefault(len(self._entries.get(name, ())), []).append(name)
        for start, group in by_start.items():
            self._load(group, start)

    def _load(self, names: list[bytes], start: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        prefixes = self._keys.prefix_array[start:]
        n = len(prefixes)
        if not n:
            return
        empty = pa.scalar(b"", pa.large_binary())
        parts = [pc.binary_join_element_wise(prefixes, pa.scalar(name, pa.large_binary()), empty)
                 for name in names]
        entries = pa.concat_arrays(parts)
        # sorted as multi_get reads them: by key prefix (no prefix starts another), then name
        rank = np.argsort(np.array(names, object)).astype(np.int64)
        order = (self._keys.order(start)[:, None] + n * rank[None, :]).ravel()
        flat = _object_array(entries.to_pylist())
        got = self._task.db.multi_get(flat[order].tolist())
        values = np.empty(len(got), object)
        values[order] = _object_array(got)
        for j, name in enumerate(names):
            mine = slice(j * n, (j + 1) * n)
            self._values[name] = np.concatenate([self._values.get(name, values[:0]),
                                                 values[mine]])
            self._entries[name] = np.concatenate([self._entries.get(name, flat[:0]),
                                                  flat[mine]])

    def _held(self, name: bytes) -> None:
        """Read ``name`` of the keys not held yet (a variable declared after the prefetch)."""
        if len(self._entries.get(name, ())) < len(self._keys):
            self.load([name])

    def get(self, name: bytes, pos: np.ndarray) -> np.ndarray:
        """The values of the keys at ``pos`` (an object array; ``None``: absent)."""
        self._held(name)
        return self._values[name][pos]

    def entries(self, name: bytes, pos: np.ndarray) -> list[bytes]:
        """The entry keys of the keys at ``pos``."""
        self._held(name)
        return self._entries[name][pos].tolist()

    def wrote(self, name: bytes, pos: np.ndarray, values: list[bytes] | None) -> None:
        """Note a write of the keys at ``pos`` (``values[i]`` at ``pos[i]``; ``None``:
        deleted)."""
        self._held(name)
        self._values[name][pos] = None if values is None else _object_array(values)
