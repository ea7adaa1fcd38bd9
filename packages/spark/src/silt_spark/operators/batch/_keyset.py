"""The grouping keys of one shard's micro-batch (:class:`BatchKeys`): the keys state calls
take, each key's state prefix, and the position of any key row among them, all without a
Python call per key.

The batch's distinct keys get positions ``0..n-1`` (in the order given; keys added later, those
whose timers fire, after them). Their encodings ``enc(key)`` (``runtime._codec``'s tuple
encoding, from ``operators._batchkeys.encode_key_tuples``, or ``runtime._rowcodec`` for
the key columns that does not take) are one Arrow binary array, and so are
their state prefixes (``operators._varkeys.key_prefix``: ``kg:u16be 'S' len:u32be enc(key)``,
built with numpy). A table of key rows is resolved to positions by encoding its key columns
the same way and looking the encodings up with one Arrow ``index_in``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from silt.errors import InvalidArgumentError

from ...runtime import _rowcodec
from ...runtime._ndarrays import to_numpy
from .._batchkeys import encode_key_tuples
from .._varkeys import STATE_TAG
from ._tables import as_table


def _object_array(items: list[Any]) -> np.ndarray:
    """``items`` as a numpy array of Python objects (bytes stay bytes)."""
    out = np.empty(len(items), object)
    out[:] = items
    return out


def encode_keys(columns: list[Any], n: int) -> _rowcodec.Rows:
    """``enc(key)`` of each row of the key ``columns`` (``n`` rows): ``_codec``'s tuple
    encoding, from ``_batchkeys.encode_key_tuples`` where it takes the columns (integer,
    floating-point and string columns without nulls), else from ``_rowcodec.encode_tuples``."""
    encoded = encode_key_tuples(columns, n)
    if encoded is None:
        return _rowcodec.encode_tuples(columns, n)
    return _rowcodec.Rows.from_arrow(encoded)


def _lookup_column(column: Any, like: Any = None) -> Any:
    """A key column as one Arrow array whose values are equal exactly when their ``_codec``
    encodings are: an integer column (but ``uint64``) as ``int64``, a string column as
    ``large_string``; ``None`` for other types (looked up by their encodings). ``like``: the
    type the other side has; ``None`` when this column's does not match it."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    t = column.type
    if pa.types.is_integer(t) and t != pa.uint64():
        target = pa.int64()
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        target = pa.large_string()
    else:
        return None
    if like is not None and like != target:
        return None
    return column.cast(target) if t != target else column


class BatchKeys:
    """The grouping keys of one shard's micro-batch: each key's encoding, key group and state
    prefix, by position (see the module docstring).

    ``encoded``: the keys' ``enc(key)`` (a list of bytes or :class:`~._rowcodec.Rows`),
    ``kgs`` their key groups; a key given twice keeps its first key group."""

    def __init__(self, key_columns: list[str], encoded: Any, kgs: Any,
                 processor: str, columns: list[Any] | None = None) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.key_columns = list(key_columns)
        self.processor = processor
        #: ``enc(key)`` of each key, by position (a ``large_binary`` Arrow array).
        self.encoded = pa.array([], pa.large_binary())
        #: The state prefix of each key, by position (``large_binary``, and Python bytes).
        self.prefix_array = pa.array([], pa.large_binary())
        self._prefixes = np.empty(0, object)
        self._kgs = np.zeros(0, np.int64)
        #: The last table resolved and its positions (``get`` then ``put`` of one table).
        self._last: tuple[Any, np.ndarray] | None = None
        #: The key column of the keys, by position, when there is one of a type whose values
        #: are equal exactly when their encodings are (see :func:`_lookup_column`).
        self._column = None if columns is None or len(columns) != 1 else _lookup_column(
            columns[0])
        if (isinstance(encoded, _rowcodec.Rows) and self._column is None
                and len(encoded) != pc.count_distinct(encoded.to_arrow()).as_py()):
            encoded = encoded.to_list()  # equal encodings: the first one's key group
        if not isinstance(encoded, _rowcodec.Rows):
            encoded = list(encoded)
            kgs = list(kgs)
            if len(set(encoded)) != len(encoded):
                first: dict[bytes, int] = {}
                for e, kg in zip(encoded, kgs):
                    first.setdefault(e, kg)
                encoded, kgs = list(first), list(first.values())
            encoded = _rowcodec.Rows.from_list(encoded)
        self._append(encoded, np.asarray(kgs, np.int64))

    def __len__(self) -> int:
        return len(self._prefixes)

    def _append(self, rows: _rowcodec.Rows, kgs: np.ndarray) -> None:
        """Take the distinct keys ``rows`` (none already held) with key groups ``kgs``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(rows)
        if not n:
            return
        head = np.empty(n, [("kg", ">u2"), ("tag", "u1"), ("len", ">u4")])
        head["kg"] = kgs
        head["tag"] = STATE_TAG[0]
        head["len"] = rows.lengths
        encoded = rows.to_arrow()
        prefixes = pc.binary_join_element_wise(
            pa.FixedSizeBinaryArray.from_buffers(pa.binary(head.itemsize), n,
                                                 [None, pa.py_buffer(head.tobytes())]
                                                 ).cast(pa.large_binary()),
            encoded, pa.scalar(b"", pa.large_binary()))
        self.encoded = pa.concat_arrays([self.encoded, encoded])
        self.prefix_array = pa.concat_arrays([self.prefix_array, prefixes])
        self._prefixes = np.concatenate([self._prefixes, _object_array(prefixes.to_pylist())])
        self._kgs = np.concatenate([self._kgs, kgs])
        self._last = None
        if len(self.encoded) != n:
            self._column = None  # keys added: look them up by their encodings

    def order(self, start: int = 0) -> np.ndarray:
        """The positions ``start..`` sorted by state prefix (bytewise), relative to ``start``:
        for one integer key column by its numbers (a prefix is ``kg:u16be 'S' len:u32be``, then
        for an integer ``0x07 count:u32be 0x03 value:i64be``, for a null a shorter ``enc``, so
        the order is key group, null first, then the value's bits as unsigned), else by an Arrow
        sort of the prefixes."""
        import pyarrow as pa
        import pyarrow.compute as pc

        column = self._column
        if start == 0 and column is not None and pa.types.is_integer(column.type):
            bits = to_numpy(column, 0).astype(np.int64) ^ np.int64(-(1 << 63))
            if column.null_count:
                valid = column.is_valid().to_numpy(zero_copy_only=False)
                return np.lexsort((bits, valid, self._kgs))
            by_bits = np.argsort(bits, kind="stable")  # then by key group (a radix sort)
            return by_bits[np.argsort(self._kgs[by_bits].astype(np.uint16), kind="stable")]
        return pc.sort_indices(self.prefix_array[start:]).to_numpy().astype(np.int64)

    @property
    def prefixes(self) -> list[bytes]:
        """The state prefix of every key, by position."""
        return self._prefixes.tolist()

    @property
    def kgs(self) -> np.ndarray:
        """The key group of every key, by position (int64)."""
        return self._kgs

    def add(self, rows: _rowcodec.Rows, kgs: np.ndarray) -> list[bytes]:
        """Take the keys ``rows`` (``enc(key)`` each) with key groups ``kgs`` as keys of the
        batch too (the keys whose timers fire), after those held, each once (a key given
        twice keeps its first key group); return the state prefixes of those that were not
        held. No Python call per key."""
        import pyarrow.compute as pc

        encoded = rows.to_arrow()
        fresh = np.flatnonzero(pc.is_null(pc.index_in(encoded, value_set=self.encoded))
                               .to_numpy(zero_copy_only=False))
        if not len(fresh):
            return []
        codes = pc.dictionary_encode(encoded.take(fresh)).indices.to_numpy()
        _, first = np.unique(codes, return_index=True)
        keep = fresh[np.sort(first)]
        start = len(self)
        self._append(rows.take(keep), np.asarray(kgs, np.int64)[keep])
        return self._prefixes[start:].tolist()

    def positions_of(self, rows: _rowcodec.Rows) -> np.ndarray:
        """The position of each of the held keys ``rows`` (``enc(key)`` each; int64)."""
        import pyarrow.compute as pc

        return pc.index_in(rows.to_arrow(), value_set=self.encoded).to_numpy(
            zero_copy_only=False).astype(np.int64)

    def positions(self, keys: Any, what: str) -> tuple[Any, np.ndarray]:
        """``keys`` (a table of key rows of this batch, in any order, a key any number of
        times) as a ``pyarrow.Table`` and the position of each row's key (int64), or an error
        naming ``what`` (the processor and variable) and the first row that is not a key of
        the batch."""
        import pyarrow.compute as pc

        table = self._key_table(keys, what)
        last = self._last
        if last is not None and last[0] is table:
            return table, last[1]
        columns = [table[c] for c in self.key_columns]
        mine = self._column
        column = None if mine is None else _lookup_column(columns[0], mine.type)
        if column is not None:  # one integer or string key column: look its values up
            found = pc.index_in(column, value_set=mine)
        else:
            encoded = encode_keys(columns, table.num_rows).to_arrow()
            found = pc.index_in(encoded, value_set=self.encoded)
        if found.null_count:
            self._refuse(columns, found, what)
        pos = found.to_numpy(zero_copy_only=False).astype(np.int64)
        self._last = (table, pos)
        return table, pos

    def resolve(self, keys: Any, what: str) -> tuple[Any, list[bytes]]:
        """``keys`` as a ``pyarrow.Table`` and the state prefix of each of its rows (see
        :meth:`positions`)."""
        table, pos = self.positions(keys, what)
        return table, self._prefixes[pos].tolist()

    def _refuse(self, columns: list[Any], found: Any, what: str) -> None:
        import pyarrow.compute as pc

        i = int(pc.index(found.is_null(), True).as_py())
        key = tuple(c[i].as_py() for c in columns)
        if any(v is None for v in key):
            why = (f"the key columns {self.key_columns} hold a null in row {i} {key!r}, "
                   "and no row of this batch has that key")
        else:
            why = f"row {i} {key!r} is not a key of this batch"
        raise InvalidArgumentError(
            f"{what}: {why}. State calls take keys of the batch, e.g. "
            f"batch.select({self.key_columns}) or a group_by of it"
        )

    def _key_table(self, keys: Any, what: str) -> Any:
        keys = as_table(keys, f"{what}: keys must be a pyarrow Table or RecordBatch (or a "
                              f"pandas DataFrame) with the key columns {self.key_columns}, "
                              "got {got}")
        missing = [c for c in self.key_columns if c not in keys.column_names]
        if missing:
            raise InvalidArgumentError(
                f"{what}: keys lack the key columns {missing} (they have {keys.column_names})"
            )
        return keys
