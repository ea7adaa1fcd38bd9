"""A small, stable, self-describing binary encoding for keys and state values.

State outlives processes and Python versions, so it is never pickled. Each value is a one-byte
tag and a fixed or length-prefixed payload (big-endian). Supported: ``None``, ``bool``, ``int``
(64-bit signed; larger ints as decimal text), ``float``, ``str``, ``bytes``, ``tuple``/``list``
(decoded as tuple / list), ``dict``, ``datetime.datetime`` (UTC microseconds),
``datetime.date``, ``decimal.Decimal``, and numpy / pandas scalars (converted to the above).

The format is on-disk: tags may be added, never changed or reused.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
from typing import Any

# On-disk tags: never change or reuse one.
_NONE = 0x00
_FALSE = 0x01
_TRUE = 0x02
_INT = 0x03
_FLOAT = 0x04
_STR = 0x05
_BYTES = 0x06
_TUPLE = 0x07
_LIST = 0x08
_DICT = 0x09
_DATETIME = 0x0A
_DATE = 0x0B
_DECIMAL = 0x0C
_BIGINT = 0x0D

_Q = struct.Struct(">q")
_D = struct.Struct(">d")
_I = struct.Struct(">I")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_DATE = _dt.date(1970, 1, 1)


def _enc(value: Any, out: bytearray) -> None:
    cls = value.__class__
    if cls is str:
        b = value.encode("utf-8")
        out.append(_STR)
        out += _I.pack(len(b))
        out += b
    elif cls is int:
        if -(1 << 63) <= value < (1 << 63):
            out.append(_INT)
            out += _Q.pack(value)
        else:
            b = str(value).encode()
            out.append(_BIGINT)
            out += _I.pack(len(b))
            out += b
    elif value is None:
        out.append(_NONE)
    elif cls is float:
        out.append(_FLOAT)
        out += _D.pack(value)
    elif cls is bool:
        out.append(_TRUE if value else _FALSE)
    elif cls is tuple or cls is list:
        out.append(_TUPLE if cls is tuple else _LIST)
        out += _I.pack(len(value))
        for item in value:
            _enc(item, out)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
        out.append(_BYTES)
        out += _I.pack(len(b))
        out += b
    elif isinstance(value, dict):
        out.append(_DICT)
        out += _I.pack(len(value))
        for k, v in value.items():
            _enc(k, out)
            _enc(v, out)
    elif isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        out.append(_DATETIME)
        out += _Q.pack(micros)
    elif isinstance(value, _dt.date):
        out.append(_DATE)
        out += _Q.pack((value - _EPOCH_DATE).days)
    elif isinstance(value, decimal.Decimal):
        b = str(value).encode()
        out.append(_DECIMAL)
        out += _I.pack(len(b))
        out += b
    elif isinstance(value, bool):  # numpy.bool_ is handled below via .item()
        out.append(_TRUE if value else _FALSE)
    elif isinstance(value, int):
        _enc(int(value), out)
    elif isinstance(value, float):
        _enc(float(value), out)
    elif isinstance(value, str):
        _enc(str(value), out)
    elif hasattr(value, "to_pydatetime"):  # pandas.Timestamp
        if value != value:  # NaT
            out.append(_NONE)
        else:
            _enc(value.to_pydatetime(), out)
    elif hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalar
        _enc(value.item(), out)
    elif hasattr(value, "asDict"):  # pyspark Row
        _enc(tuple(value), out)
    else:
        raise TypeError(
            f"cannot store a {type(value).__name__} in silt state: use None, bool, int, float, "
            "str, bytes, tuple, list, dict, datetime, date or Decimal values"
        )


def encode(value: Any) -> bytes:
    """Encode ``value`` (see the module docstring for the supported types)."""
    out = bytearray()
    _enc(value, out)
    return bytes(out)


def _dec(buf: bytes, pos: int) -> tuple[Any, int]:
    tag = buf[pos]
    pos += 1
    if tag == _STR:
        (n,) = _I.unpack_from(buf, pos)
        pos += 4
        return buf[pos:pos + n].decode("utf-8"), pos + n
    if tag == _INT:
        return _Q.unpack_from(buf, pos)[0], pos + 8
    if tag == _NONE:
        return None, pos
    if tag == _FLOAT:
        return _D.unpack_from(buf, pos)[0], pos + 8
    if tag == _TRUE:
        return True, pos
    if tag == _FALSE:
        return False, pos
    if tag == _TUPLE or tag == _LIST:
        (n,) = _I.unpack_from(buf, pos)
        pos += 4
        items = []
        for _ in range(n):
            item, pos = _dec(buf, pos)
            items.append(item)
        return (tuple(items) if tag == _TUPLE else items), pos
    if tag == _BYTES:
        (n,) = _I.unpack_from(buf, pos)
        pos += 4
        return bytes(buf[pos:pos + n]), pos + n
    if tag == _DICT:
        (n,) = _I.unpack_from(buf, pos)
        pos += 4
        d = {}
        for _ in range(n):
            k, pos = _dec(buf, pos)
            v, pos = _dec(buf, pos)
            d[k] = v
        return d, pos
    if tag == _DATETIME:
        micros = _Q.unpack_from(buf, pos)[0]
        value = _EPOCH + _dt.timedelta(microseconds=micros)
        return value, pos + 8
    if tag == _DATE:
        return _EPOCH_DATE + _dt.timedelta(days=_Q.unpack_from(buf, pos)[0]), pos + 8
    if tag == _DECIMAL or tag == _BIGINT:
        (n,) = _I.unpack_from(buf, pos)
        pos += 4
        text = buf[pos:pos + n].decode()
        return (decimal.Decimal(text) if tag == _DECIMAL else int(text)), pos + n
    raise ValueError(f"unknown silt_spark value tag 0x{tag:02x} at offset {pos - 1}")


def decode(data: bytes) -> Any:
    """Inverse of :func:`encode`."""
    value, pos = _dec(data, 0)
    if pos != len(data):
        raise ValueError(f"trailing bytes after a silt_spark value ({len(data) - pos})")
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def to_json(value: Any) -> str:
    """The compact JSON text ``read_state`` shows for a decoded value (bytes as hex, dates and
    times in ISO form, anything else unknown as its ``str``)."""
    import json

    return json.dumps(value, default=_json_default, separators=(",", ":"))
