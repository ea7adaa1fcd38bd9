"""``_codec`` for whole Arrow columns: encode, take apart and decode many rows with numpy.

The join (``operators/join``) keeps each buffered row under a key and a value made of ``_codec``
encodings (``enc(join key tuple)``, ``enc(row tuple)``). Building them row by row in Python is
the join's largest cost, so this module builds the same bytes for all the rows of a batch at
once, and reads them back the same way:

* :func:`encode_tuples` gives, per row, exactly ``_codec.encode(tuple(row))`` (byte for byte,
  so state written either way is one format) as a :class:`Rows` (offsets and bytes);
* :func:`concat` lays several such per-row pieces and fixed-width fields side by side
  (a state key is ``head, bucket, enc(key), time, seq``);
* :func:`slices` takes byte ranges out of many keys at once (e.g. ``enc(key)`` of row keys);
* :func:`decode_tuples` turns ``enc(row tuple)`` bytes back into Arrow columns of a schema.

Vectorized types: integers (to 64-bit signed), bool, floats, string, binary, timestamp (``us``,
``ms``, ``s``), date32 and nulls of each. Other types (decimal, nested, ``ns`` timestamps,
unsigned 64-bit) go through ``_codec`` value by value: correct, but Python per row, and said so
by :func:`vectorized`.

Everything works on plain numpy arrays: ``offsets`` (int64, ``n + 1``) and ``data`` (uint8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _codec

_NONE, _FALSE, _TRUE, _INT, _FLOAT, _STR, _BYTES, _TUPLE = 0, 1, 2, 3, 4, 5, 6, 7
_DATETIME, _DATE = 0x0A, 0x0B
_U8 = np.uint8


@dataclass
class Rows:
    """``n`` byte strings: row ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    offsets: np.ndarray  # int64, n + 1
    data: np.ndarray  # uint8

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to_arrow(self) -> Any:
        import pyarrow as pa

        return pa.Array.from_buffers(
            pa.large_binary(), len(self),
            [None, pa.py_buffer(np.ascontiguousarray(self.offsets, np.int64)),
             pa.py_buffer(np.ascontiguousarray(self.data))],
        )

    def to_list(self) -> list[bytes]:
        """Python ``bytes`` per row (one C-level conversion, no Python loop)."""
        return self.to_arrow().to_pylist()

    def take(self, idx: np.ndarray) -> Rows:
        starts, ends = self.offsets[:-1][idx], self.offsets[1:][idx]
        return _gather(self.data, starts, ends - starts)

    @staticmethod
    def from_arrow(arr: Any) -> Rows:
        """From a (large_)binary Arrow array without nulls (chunked arrays combined)."""
        import pyarrow as pa

        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        if arr.type != pa.large_binary():
            arr = arr.cast(pa.large_binary())
        _, off_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(off_buf, np.int64)[arr.offset:arr.offset + len(arr) + 1]
        data = (np.frombuffer(data_buf, _U8) if data_buf is not None
                else np.zeros(0, _U8))
        return Rows(offsets, data)

    @staticmethod
    def from_list(items: list[bytes]) -> Rows:
        import pyarrow as pa

        return Rows.from_arrow(pa.array(items, pa.large_binary()))


def fixed(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` as an ``(n, width)`` uint8 matrix of big-endian ``dtype`` (``'>u8'``...)."""
    v = np.ascontiguousarray(np.asarray(values).astype(dtype))
    return v.view(_U8).reshape(len(v), v.dtype.itemsize)


def _gather(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Rows:
    """The rows ``data[starts[i]:starts[i] + lens[i]]``."""
    lens = np.asarray(lens, np.int64)
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return Rows(offsets, np.zeros(0, _U8))
    idx = np.repeat(np.asarray(starts, np.int64) - offsets[:-1], lens) + np.arange(total)
    return Rows(offsets, data[idx])


def concat(n: int, pieces: list[Any]) -> Rows:
    """Per row, the pieces one after another. A piece is ``bytes`` (the same for every row), an
    ``(n, w)`` uint8 matrix (:func:`fixed`) or :class:`Rows`."""
    lens = np.zeros(n, np.int64)
    for p in pieces:
        lens += _piece_lengths(p, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    out = np.empty(int(offsets[-1]), _U8)
    at = offsets[:-1].copy()
    for p in pieces:
        if isinstance(p, (bytes, bytearray)):
            if p:
                out[at[:, None] + np.arange(len(p))] = np.frombuffer(bytes(p), _U8)
                at += len(p)
        elif isinstance(p, Rows):
            plen = p.lengths
            total = int(plen.sum())
            if total:
                dst = np.repeat(at - p.offsets[:-1], plen) + np.arange(total) + p.offsets[0]
                out[dst] = p.data[p.offsets[0]:p.offsets[-1]]
            at += plen
        else:
            w = p.shape[1]
            if w:
                out[at[:, None] + np.arange(w)] = p
            at += w
    return Rows(offsets, out)


def _piece_lengths(p: Any, n: int) -> np.ndarray | int:
    if isinstance(p, (bytes, bytearray)):
        return len(p)
    if isinstance(p, Rows):
        if len(p) != n:
            raise ValueError(f"a piece has {len(p)} rows, not {n}")
        return p.lengths
    if p.shape[0] != n:
        raise ValueError(f"a piece has {p.shape[0]} rows, not {n}")
    return p.shape[1]


def slices(rows: Rows, start: int, end_from_back: int) -> Rows:
    """Per row, its bytes from ``start`` to ``end_from_back`` before its end."""
    starts = rows.offsets[:-1] + start
    return _gather(rows.data, starts, rows.offsets[1:] - end_from_back - starts)


def u64_at_end(rows: Rows, back: int) -> np.ndarray:
    """Per row, the big-endian u64 starting ``back`` bytes before its end (as uint64)."""
    pos = rows.offsets[1:] - back
    return _read_fixed(rows.data, pos, ">u8")


def field_at(rows: Rows, at: int, dtype: str) -> np.ndarray:
    """Per row, the big-endian fixed-width ``dtype`` field (``'>u8'``...) starting ``at`` bytes
    into it (in native byte order)."""
    return _read_fixed(rows.data, rows.offsets[:-1] + at, dtype)


def _read_fixed(data: np.ndarray, pos: np.ndarray, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    if len(pos) == 0:
        return np.zeros(0, np.dtype(dtype).newbyteorder("="))
    m = data[pos[:, None] + np.arange(width)]
    return np.ascontiguousarray(m).view(dtype).reshape(len(pos)).astype(
        np.dtype(dtype).newbyteorder("="))


# --- encode ---------------------------------------------------------------------------------


def vectorized(typ: Any) -> bool:
    """Whether columns of Arrow type ``typ`` are encoded and decoded without Python per row."""
    import pyarrow.types as t

    return bool(
        (t.is_integer(typ) and typ.bit_width <= 64 and not t.is_uint64(typ))
        or t.is_boolean(typ) or t.is_floating(typ) or t.is_string(typ)
        or t.is_large_string(typ) or t.is_binary(typ) or t.is_large_binary(typ)
        or (t.is_timestamp(typ) and typ.unit in ("s", "ms", "us")) or t.is_date32(typ)
        or t.is_null(typ)
    )


def _valid(arr: Any) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)


def _tagged_fixed(valid: np.ndarray, tag: int, payload: np.ndarray) -> Rows:
    """``tag payload`` where valid, ``0x00`` (None) elsewhere."""
    n = len(valid)
    w = payload.shape[1] + 1
    lens = np.where(valid, w, 1).astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), _U8)
    at = offsets[:-1]
    out[at[valid]] = tag
    vat = at[valid]
    if len(vat):
        out[vat[:, None] + 1 + np.arange(w - 1)] = payload[valid]
    return Rows(offsets, out)


def encode_column(arr: Any) -> Rows:
    """Per value of ``arr``, ``_codec.encode(value)`` (the value as ``to_pylist`` gives it)."""
    import pyarrow as pa
    import pyarrow.types as t

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else (
            arr.chunk(0) if arr.num_chunks else pa.array([], arr.type))
    typ = arr.type
    n = len(arr)
    if t.is_null(typ):
        return Rows(np.arange(n + 1, dtype=np.int64), np.zeros(n, _U8))
    if not vectorized(typ):
        return Rows.from_list([_codec.encode(v) for v in arr.to_pylist()])
    valid = _valid(arr)
    if t.is_boolean(typ):
        v = np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), bool)
        tags = np.where(valid, np.where(v, _TRUE, _FALSE), _NONE).astype(_U8)
        return Rows(np.arange(n + 1, dtype=np.int64), tags)
    if t.is_integer(typ):
        v = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
        return _tagged_fixed(valid, _INT, fixed(v, ">i8"))
    if t.is_floating(typ):
        v = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.float64)
        return _tagged_fixed(valid, _FLOAT, fixed(v, ">f8"))
    if t.is_timestamp(typ):
        from ._watermark import event_us

        v = np.asarray(event_us(arr).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        return _tagged_fixed(valid, _DATETIME, fixed(v, ">i8"))
    if t.is_date32(typ):
        v = np.asarray(arr.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False)
                       ).astype(np.int64)
        return _tagged_fixed(valid, _DATE, fixed(v, ">i8"))
    # string / binary: tag, u32be length, bytes
    tag = _STR if (t.is_string(typ) or t.is_large_string(typ)) else _BYTES
    raw = Rows.from_arrow(arr.cast(pa.large_binary()).fill_null(b""))
    lens = raw.lengths
    head = np.zeros((n, 5), _U8)
    head[:, 0] = tag
    head[:, 1:] = fixed(lens, ">u4")
    body = concat(n, [head, raw])
    if valid.all():
        return body
    # nulls: keep only their tag byte (0x00)
    keep_lens = np.where(valid, body.lengths, 1)
    out = _gather(body.data, body.offsets[:-1], keep_lens)
    out.data[out.offsets[:-1][~valid]] = _NONE
    return out


def encode_tuples(columns: list[Any], n: int | None = None) -> Rows:
    """Per row, ``_codec.encode(tuple(values of the row))`` of the Arrow ``columns``."""
    if n is None:
        n = len(columns[0]) if columns else 0
    head = bytes([_TUPLE]) + len(columns).to_bytes(4, "big")
    return concat(n, [head, *[encode_column(c) for c in columns]])


# --- decode ---------------------------------------------------------------------------------


def decode_tuples(rows: Rows, schema: Any, skip: int = 0) -> list[Any]:
    """Arrow columns (of ``schema``'s types) of the tuples ``rows`` hold, each row's first
    ``skip`` bytes aside: the inverse of :func:`encode_tuples`. Falls back to ``_codec`` per row
    when a type is not vectorized or a value was stored with another type's tag."""
    import pyarrow as pa

    n = len(rows)
    types = [f.type for f in schema]
    if n == 0:
        return [pa.array([], typ) for typ in types]
    data = rows.data
    pos = rows.offsets[:-1] + skip
    ok = all(vectorized(typ) for typ in types)
    if ok:
        ok = bool((data[pos] == _TUPLE).all()) and bool(
            (_read_fixed(data, pos + 1, ">u4") == len(types)).all())
    cols: list[Any] = []
    if ok:
        pos = pos + 5
        for typ in types:
            got = _decode_column(data, pos, typ)
            if got is None:
                ok = False
                break
            col, pos = got
            cols.append(col)
        ok = ok and bool((pos == rows.offsets[1:]).all())
    if ok:
        return cols
    values = [_codec.decode(b[skip:]) for b in rows.to_list()]
    return [pa.array([v[i] for v in values], typ) for i, typ in enumerate(types)]


def _decode_column(data: np.ndarray, pos: np.ndarray, typ: Any) -> tuple[Any, np.ndarray] | None:
    import pyarrow as pa
    import pyarrow.types as t

    tags = data[pos]
    valid = tags != _NONE
    if t.is_null(typ):
        return (pa.nulls(len(pos)), pos + 1) if not valid.any() else None
    if t.is_boolean(typ):
        if not np.isin(tags, (_NONE, _TRUE, _FALSE)).all():
            return None
        return pa.array(tags == _TRUE, pa.bool_(), mask=~valid), pos + 1
    if t.is_string(typ) or t.is_large_string(typ) or t.is_binary(typ) or t.is_large_binary(typ):
        want = _STR if (t.is_string(typ) or t.is_large_string(typ)) else _BYTES
        if not (tags[valid] == want).all():
            return None
        lens = np.zeros(len(pos), np.int64)
        vp = pos[valid]
        lens[valid] = _read_fixed(data, vp + 1, ">u4")
        body = _gather(data, pos + 5, lens)
        arr = body.to_arrow()
        if not valid.all():
            arr = _with_nulls(arr, valid)
        return arr.cast(typ), pos + np.where(valid, 5 + lens, 1)
    want = (_INT if t.is_integer(typ) else _FLOAT if t.is_floating(typ)
            else _DATETIME if t.is_timestamp(typ) else _DATE)
    if not (tags[valid] == want).all():
        return None
    raw = np.zeros(len(pos), np.int64 if want != _FLOAT else np.float64)
    if valid.any():
        raw[valid] = _read_fixed(data, pos[valid] + 1, ">f8" if want == _FLOAT else ">i8")
    if want == _FLOAT:
        arr = pa.array(raw, pa.float64(), mask=~valid).cast(typ)
    elif want == _INT:
        arr = pa.array(raw, pa.int64(), mask=~valid).cast(typ)
    elif want == _DATETIME:
        per = {"s": 1_000_000, "ms": 1000, "us": 1}[typ.unit]
        arr = pa.array(raw // per if per != 1 else raw, pa.int64(), mask=~valid).cast(typ)
    else:
        arr = pa.array(raw.astype(np.int32), pa.int32(), mask=~valid).cast(typ)
    return arr, pos + np.where(valid, 9, 1)


def _with_nulls(arr: Any, valid: np.ndarray) -> Any:
    """``arr`` with nulls where ``valid`` is False."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pa.array(valid), arr, pa.scalar(None, arr.type))
