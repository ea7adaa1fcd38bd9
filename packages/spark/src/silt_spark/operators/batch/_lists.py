"""List state variables of the batch processor: many keys' lists read and written at once.

The shape is Arrow's "long" form: a list of many keys is a table with the key columns and the
element columns, one row per element, and writes take two tables of equal length, row ``i`` of
the elements going to the key in row ``i`` of the keys (as ``batch.select(keys)`` and
``batch.select(elements)`` give them). Layout and encoding: the per-key processor's (see
``_state.py``): one entry per element, ``key_prefix + name 0xFF seq:u64be``, appended after the
list's last element; ``put`` and ``delete`` remove a list with one range delete.
"""

from __future__ import annotations

from typing import Any

from .._varkeys import _SEQ, LIST_ELEMENT, list_seq
from ._state import BatchVariable, rows_table


def _end(list_key: bytes) -> bytes:
    """The end of ``list_key``'s range (a name never ends in 0xFF: its last byte is UTF-8)."""
    return list_key[:-1] + bytes([list_key[-1] + 1])


class BatchListState(BatchVariable):
    """A list state variable for many keys at once.

    Examples
    --------
    >>> class Recent(BatchProcessor):
    ...     def init(self, handle):
    ...         handle.getListState("amounts", "amount long")
    ...     def process(self, batch, state, timers):
    ...         amounts = state.list("amounts")
    ...         amounts.append(batch.select(["user"]), batch.select(["amount"]))
    ...         keys = batch.group_by("user").aggregate([])
    ...         every = amounts.get(keys)  # user, amount: every element of every key's list
    ...         return every.group_by("user").aggregate([("amount", "sum")])
    """

    kind = "list"

    def _elements(self, list_key: bytes) -> list[tuple[bytes, bytes]]:
        """The list's live entries in key order (from the prefetch and this batch's writes):
        the older one-entry form (at the list's key) first, then the elements."""
        return list(self._handle._state.map_items(list_key))

    def _load(self, list_key: bytes) -> list[tuple]:
        codec = self._codec
        out: list[tuple] = []
        for k, raw in self._elements(list_key):
            if k == list_key:  # the whole list, as older silt_spark stored it
                out.extend(codec.decode_list(raw) or ())
            else:
                item = codec.decode(raw)
                if item is not None:  # None: a deleted generation's element
                    out.append(item)
        return out

    def get(self, keys: Any) -> Any:
        """Every element of the lists of ``keys`` (key rows of this batch) as one
        ``pyarrow.Table``: the key columns (as ``keys`` has them), then the element columns
        (every field nullable), one row per element; the lists in the order of the key rows,
        each in list order (append order). A key without a list has no row. Served from the
        batch's prefetch and this batch's own writes."""
        import pyarrow as pa

        table, list_keys = self._resolve(keys, "get")
        rows: list[tuple] = []
        take: list[int] = []
        for i, lk in enumerate(list_keys):
            items = self._load(lk)
            rows.extend(items)
            take.extend([i] * len(items))
        key_part = table.select(self._handle._keys.key_columns).take(pa.array(take, pa.int64()))
        values = rows_table(rows, self._read_schema)
        for field, column in zip(values.schema, values.columns):
            key_part = key_part.append_column(field, column)
        return key_part

    def exists(self, keys: Any) -> Any:
        """A ``pyarrow.BooleanArray``: whether each of ``keys`` has a non-empty list."""
        import pyarrow as pa

        _, list_keys = self._resolve(keys, "exists")
        return pa.array([bool(self._load(lk)) for lk in list_keys], pa.bool_())

    def append(self, keys: Any, elements: Any) -> None:
        """Append row ``i`` of ``elements`` (a table with the element schema's columns, cast to
        its types) to the list of the key in row ``i`` of ``keys``: as many rows as keys, a key
        may repeat (its elements are appended in row order). Everything is checked before
        anything is written; one write for the whole call."""
        _, list_keys = self._resolve(keys, "append")
        encoded = self._encoded(elements, "append", len(list_keys), "elements", "element")
        self._append(list_keys, encoded, [])

    def put(self, keys: Any, elements: Any) -> None:
        """Replace the lists of the keys in ``keys`` by the rows of ``elements`` given for
        them (row ``i`` of ``elements`` belongs to the key in row ``i`` of ``keys``, in list
        order); the lists of other keys are untouched (use :meth:`delete` to empty one).
        Checked before anything is written; one write for the whole call."""
        _, list_keys = self._resolve(keys, "put")
        encoded = self._encoded(elements, "put", len(list_keys), "elements", "element")
        self._append(list_keys, encoded, list(dict.fromkeys(list_keys)))

    def delete(self, keys: Any) -> None:
        """Empty the lists of ``keys`` (one range delete each, in one write)."""
        _, list_keys = self._resolve(keys, "delete")
        self._append([], [], list(dict.fromkeys(list_keys)))

    def _append(self, list_keys: list[bytes], encoded: list[bytes],
                cleared: list[bytes]) -> None:
        """Remove the lists ``cleared``, then append ``encoded[i]`` to ``list_keys[i]``."""
        handle = self._handle
        state = handle._state
        nexts = handle._list_next
        gone: list[tuple[bytes, bytes]] = []  # (list key, entry) removed
        ranges = []  # a list with no entries is not range-deleted (as the per-key clear)
        for lk in cleared:
            held = self._elements(lk)
            if held:
                ranges.append((lk, _end(lk)))
                gone.extend((lk, k) for k, _ in held)
            nexts[lk] = 0
        puts = []
        for lk, raw in zip(list_keys, encoded):
            seq = nexts.get(lk)
            if seq is None:  # the first append to this list in the batch: after its last
                entries = self._elements(lk)
                last = entries[-1][0] if entries else lk
                seq = list_seq(last, len(lk)) + 1 if len(last) > len(lk) else 0
            puts.append((lk + LIST_ELEMENT + _SEQ.pack(seq), raw))
            nexts[lk] = seq + 1
        if not (puts or gone):
            return
        self._write(puts, ranges=ranges)
        handle._wrote(self.name, bool(puts))
        for lk, k in gone:
            state.map_wrote(lk, k, None)
        for lk, (k, v) in zip(list_keys, puts):
            state.map_wrote(lk, k, v)
