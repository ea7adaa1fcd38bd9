"""The schema-driven encoding of typed state values (on-disk; see docs/format.md)::

    value:  0x80 schema_id:u16be row
    list:   0x81 schema_id:u16be count:u32be row*   (a whole list, as older versions stored
            lists; a list's elements are now one value entry each)
    row:    null bitmap ((n+7)//8 bytes, bit i of byte i//8 set = field i is null)
            fixed part: one slot per field, in schema order, big-endian: tinyint b, smallint h,
              int/date(days) i, bigint/timestamp(us) q, float f, double d, boolean ?, and
              u32 byte length for string (UTF-8), binary, decimal (its text) and nested types
              (their silt_spark.runtime._codec encoding); a null field's slot is zero
            variable part: the variable-length fields' bytes, in schema order

Field names are never stored per value: the schema id names them. A value without the 0x80/0x81
tag was written without a schema (``_codec``, whose tags are below 0x80) and decodes as before.
Old values are converted to the latest schema on read (:class:`VarCodec`).

:class:`TupleCodec` encodes one schema's tuples (compiled per schema); it is unrelated to
``_rowcodec.py``, the vectorized encoding of whole Arrow columns with ``_codec``.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
from collections.abc import Callable
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ..errors import StateSchemaError
from . import _codec
from ._types import FIXED, INTEGRAL, Schema, as_schema, show

# On-disk tags (never change or reuse one); silt_spark.runtime._codec's tags are all below 0x80.
TYPED_VALUE = 0x80


TYPED_LIST = 0x81


_U32 = struct.Struct(">I")


_ID = struct.Struct(">H")


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)


_EPOCH_DATE = _dt.date(1970, 1, 1)


def _micros(v: Any) -> int:
    if not isinstance(v, _dt.datetime):
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        else:
            raise TypeError(f"expects timestamp (a datetime), got {type(v).__name__}")
    if v.tzinfo is None:
        v = v.replace(tzinfo=_dt.UTC)
    d = v - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _micros_ntz(v: Any) -> int:
    if not isinstance(v, _dt.datetime):
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        else:
            raise TypeError(f"expects timestamp (a datetime), got {type(v).__name__}")
    d = v.replace(tzinfo=None) - _EPOCH_NAIVE
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _days(v: Any) -> int:
    if isinstance(v, _dt.datetime) or not isinstance(v, _dt.date):
        raise TypeError(f"expects date (a datetime.date), got {type(v).__name__}")
    return (v - _EPOCH_DATE).days


def _boolean(v: Any) -> bool:
    # struct's "?" takes any object's truth value (None included): check the type first
    if v.__class__ is bool or type(v).__name__ == "bool_":
        return bool(v)
    raise TypeError(f"expects boolean, got {type(v).__name__} {v!r:.40}")


def _utf8(v: Any) -> bytes:
    if not isinstance(v, str):
        raise TypeError(f"expects string (a str), got {type(v).__name__}")
    return v.encode("utf-8")


def _binary(v: Any) -> bytes:
    if not isinstance(v, (bytes, bytearray, memoryview)):
        raise TypeError(f"expects binary (bytes), got {type(v).__name__}")
    return bytes(v)


def _decimal_text(v: Any) -> bytes:
    if isinstance(v, bool) or not isinstance(v, (decimal.Decimal, int)):
        raise TypeError(f"expects decimal (a Decimal or an int), got {type(v).__name__}")
    return str(v).encode()


def _to_timestamp(us: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(microseconds=us)


def _to_timestamp_ntz(us: int) -> _dt.datetime:
    return _EPOCH_NAIVE + _dt.timedelta(microseconds=us)


def _to_date(days: int) -> _dt.date:
    return _EPOCH_DATE + _dt.timedelta(days=days)


def _check_fixed(t: str, v: Any) -> Any:
    """``v`` as the struct slot of fixed type ``t``, or a TypeError saying why not."""
    if t in INTEGRAL:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"expects {t} (an int), got {type(v).__name__} {v!r:.40}")
        return int(v)
    if t in ("float", "double"):
        if isinstance(v, bool) or (not isinstance(v, (int, float)) and not hasattr(v, "__float__")):
            raise TypeError(f"expects {t} (a float), got {type(v).__name__} {v!r:.40}")
        return float(v)
    if t == "boolean":
        return _boolean(v)
    if t == "date":
        return _days(v)
    if t == "timestamp":
        return _micros(v)
    return _micros_ntz(v)


_VAR_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "string": _utf8, "binary": _binary,
}


_VAR_DECODE = {"string": "{b}.decode('utf-8')", "binary": "bytes({b})"}


_FIXED_ENCODE = {"boolean": "_boolean({v})", "date": "_days({v})", "timestamp": "_micros({v})",
                 "timestamp_ntz": "_micros_ntz({v})"}


_FIXED_DECODE = {"date": "_to_date({v})", "timestamp": "_to_timestamp({v})",
                 "timestamp_ntz": "_to_timestamp_ntz({v})"}


def _var_encoder(t: str) -> Callable[[Any], bytes]:
    if t in _VAR_ENCODERS:
        return _VAR_ENCODERS[t]
    if t.startswith("decimal"):
        return _decimal_text
    return _codec.encode


def _var_decoder(t: str) -> Callable[[bytes], Any]:
    if t == "string":
        return lambda b: b.decode("utf-8")
    if t == "binary":
        return bytes
    if t.startswith("decimal"):
        return lambda b: decimal.Decimal(b.decode())
    return _codec.decode


class TupleCodec:
    """Encoder and decoder of one schema's rows (see the module docstring), compiled into
    straight-line Python: one ``struct`` call per row, no per-field loop on the common path.

    ``pack(v)`` returns the row's bytes (bitmap, fixed part, variable part) or raises
    :class:`TypeError`/:class:`ValueError` saying which field is wrong; ``unpack(buf, pos)``
    returns ``(tuple, next position)``.
    """

    def __init__(self, fields: Schema, what: str) -> None:
        self.fields = fields
        self.what = what
        n = len(fields)
        self.nbytes = (n + 7) // 8
        self.zero = bytes(self.nbytes)
        fmt = ">" + "".join(FIXED.get(t, "I") for _, t, _ in fields)
        self.struct = s = struct.Struct(fmt)
        self.var = [i for i, (_, t, _) in enumerate(fields) if t not in FIXED]
        self.var_enc = {i: _var_encoder(fields[i][1]) for i in self.var}
        self.var_dec = {i: _var_decoder(fields[i][1]) for i in self.var}
        env: dict[str, Any] = {
            "_S_pack": s.pack, "_S_unpack": s.unpack_from, "_SIZE": s.size, "_NB": self.nbytes,
            "_ZERO": self.zero, "_slow": self._pack_slow,
            "_days": _days, "_micros": _micros, "_micros_ntz": _micros_ntz, "_to_date": _to_date,
            "_to_timestamp": _to_timestamp, "_to_timestamp_ntz": _to_timestamp_ntz,
            "_utf8": _utf8, "_binary": _binary, "_boolean": _boolean,
        }
        names = [f"f{i}" for i in range(n)]
        unpack_target = ", ".join(names) + ("," if n == 1 else "")
        pre, args, post = [], [], []
        for i, (_, t, _) in enumerate(fields):
            v = f"f{i}"
            if t in FIXED:
                args.append(_FIXED_ENCODE.get(t, "{v}").format(v=v))
            else:
                env[f"_venc{i}"] = self.var_enc[i]
                pre.append(f"        b{i} = _venc{i}({v})")
                args.append(f"len(b{i})")
                post.append(f"b{i}")
        tail = "".join(f" + {p}" for p in post)
        # With nulls: the same, a null replaced by a zero slot and its bitmap bit set.
        nsrc = ["def pack_nulls(v):", f"    {unpack_target} = v", "    bm = 0"]
        for i, (_, t, nullable) in enumerate(fields):
            v = f"f{i}"
            if t in FIXED:
                if nullable:
                    zero = "False" if t == "boolean" else "0"
                    nsrc.append(f"    if {v} is None: bm |= {1 << i}; {v} = {zero}; x{i} = {zero}")
                    nsrc.append(f"    else: x{i} = {_FIXED_ENCODE.get(t, '{v}').format(v=v)}")
                else:
                    nsrc.append(f"    x{i} = {_FIXED_ENCODE.get(t, '{v}').format(v=v)}")
            elif nullable:
                nsrc.append(f"    if {v} is None: bm |= {1 << i}; b{i} = b''")
                nsrc.append(f"    else: b{i} = _venc{i}({v})")
            else:
                nsrc.append(f"    b{i} = _venc{i}({v})")
        nargs = [f"x{i}" if t in FIXED else f"len(b{i})" for i, (_, t, _) in enumerate(fields)]
        nsrc.append(f"    return bm.to_bytes(_NB, 'little') + _S_pack({', '.join(nargs)}){tail}")
        src = [
            "def pack(v):",
            "    if v.__class__ is not tuple and v.__class__ is not list:",
            "        return _slow(v)  # a Row, a dict by field name, or a wrong value",
            "    try:",
            f"        {unpack_target} = v",
            *pre,
            f"        return _ZERO + _S_pack({', '.join(args)}){tail}",
            "    except Exception:",
            "        pass",
            "    try:",
            "        return pack_nulls(v)",
            "    except Exception:",
            "        return _slow(v)",
        ]
        exec("\n".join(nsrc), env)  # code generated from the schema's types only
        dsrc = ["def unpack(buf, pos):", "    nb = buf[pos:pos + _NB]",
                f"    {unpack_target} = _S_unpack(buf, pos + _NB)",
                "    pos += _NB + _SIZE"]
        for i, (_, t, _) in enumerate(fields):
            if t in _FIXED_DECODE:
                dsrc.append(f"    f{i} = {_FIXED_DECODE[t].format(v=f'f{i}')}")
            elif t not in FIXED:
                env[f"_vdec{i}"] = self.var_dec[i]
                dsrc.append(f"    end = pos + f{i}")
                if t == "string":
                    dsrc.append(f"    f{i} = buf[pos:end].decode('utf-8')")
                elif t == "binary":
                    dsrc.append(f"    f{i} = buf[pos:end]")
                else:  # never empty unless null
                    dsrc.append(f"    f{i} = _vdec{i}(buf[pos:end]) if f{i} else None")
                dsrc.append("    pos = end")
        row = "(" + ", ".join(names) + ("," if n == 1 else "") + ")"
        nulled = "(" + ", ".join(
            f"None if bm & {1 << i} else f{i}" for i in range(n)) + ("," if n == 1 else "") + ")"
        dsrc += ["    if nb != _ZERO:", "        bm = int.from_bytes(nb, 'little')",
                 f"        return {nulled}, pos", f"    return {row}, pos"]
        exec("\n".join(src), env)
        exec("\n".join(dsrc), env)
        self.pack: Callable[[Any], bytes] = env["pack"]
        self.unpack: Callable[[bytes, int], tuple[tuple, int]] = env["unpack"]

    def _pack_slow(self, v: Any) -> bytes:
        """``pack`` for rows with nulls, and the clear error for a wrong one."""
        fields = self.fields
        if isinstance(v, tuple) and v.__class__ is not tuple:  # a Row or a namedtuple
            v = tuple(v)
        if isinstance(v, dict):
            extra = sorted(set(v) - {f[0] for f in fields})
            if extra:
                raise InvalidArgumentError(
                    f"{self.what}: the value has fields {extra} not in the schema "
                    f"({show(fields)})"
                )
            v = tuple(v.get(f[0]) for f in fields)
        if not isinstance(v, (tuple, list)):
            raise InvalidTypeError(
                f"{self.what}: a value is a tuple of {len(fields)} field(s) ({show(fields)}), "
                f"got {type(v).__name__}"
            )
        if len(v) != len(fields):
            raise InvalidArgumentError(
                f"{self.what}: the value has {len(v)} field(s), the schema {len(fields)} "
                f"({show(fields)})"
            )
        bitmap = bytearray(self.nbytes)
        slots: list[Any] = []
        tail: list[bytes] = []
        for i, ((name, t, nullable), x) in enumerate(zip(fields, v)):
            if x is None:
                if not nullable:
                    raise InvalidArgumentError(
                        f"{self.what}: field {name!r} is NOT NULL, got None"
                    )
                bitmap[i >> 3] |= 1 << (i & 7)
                slots.append(False if t == "boolean" else 0)
                continue
            try:
                if t in FIXED:
                    slot = _check_fixed(t, x)
                    struct.pack(">" + FIXED[t], slot)  # range check
                    slots.append(slot)
                else:
                    b = self.var_enc[i](x)
                    slots.append(len(b))
                    tail.append(b)
            except struct.error:
                raise InvalidArgumentError(
                    f"{self.what}: field {name!r}: {x!r:.40} is out of range for {t}"
                ) from None
            except (TypeError, ValueError, OverflowError) as exc:
                err = InvalidTypeError if isinstance(exc, TypeError) else InvalidArgumentError
                raise err(f"{self.what}: field {name!r} {exc}") from None
        return bytes(bitmap) + self.struct.pack(*slots) + b"".join(tail)


#: Compiled row codecs of this process, by (schema, variable): a task builds its variables'
#: codecs once per micro-batch, compiling each costs about 0.1 ms.
_COMPILED: dict[tuple[Schema, str], TupleCodec] = {}


def tuple_codec(fields: Schema, what: str) -> TupleCodec:
    """The (cached) :class:`TupleCodec` of ``fields``; ``what`` names the variable in errors."""
    key = (fields, what)
    codec = _COMPILED.get(key)
    if codec is None:
        if len(_COMPILED) >= 1024:
            _COMPILED.clear()
        codec = _COMPILED[key] = TupleCodec(fields, what)
    return codec


def _converter(old: Schema, new: Schema) -> Callable[[tuple], tuple]:
    """Maps a row of ``old`` onto ``new`` by field name (added: None; removed: dropped;
    integral widened to float/double: ``float``)."""
    index = {f[0]: (i, f[1]) for i, f in enumerate(old)}
    parts = []
    for name, t, _ in new:
        if name not in index:
            parts.append("None")
            continue
        i, t0 = index[name]
        if t0 in INTEGRAL and t in ("float", "double"):
            parts.append(f"(None if r[{i}] is None else float(r[{i}]))")
        else:
            parts.append(f"r[{i}]")
    env: dict[str, Any] = {}
    exec(f"def conv(r):\n    return ({', '.join(parts)},)", env)
    return env["conv"]


class VarCodec:
    """Values of one state variable: encodes with its latest schema, decodes any version
    (older ones converted to the latest) and untagged values (written without a schema).

    Built from a registry entry (plain data), so it works in any process.
    """

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        self.what = f"state {name!r}"
        self.kind = entry.get("kind")
        self.base = int(entry.get("base", 0))
        self.versions = [as_schema(v) for v in entry["versions"]]
        self.key = as_schema(entry.get("key"))
        self.key_codec = tuple_codec(self.key, f"{self.what} map key") if self.key else None
        sid = len(self.versions) - 1
        #: Whether the variable has a schema now (not after deleteIfExists without one).
        self.typed = sid >= self.base
        if self.typed:
            self.latest = tuple_codec(self.versions[sid], self.what)
        self.value_header = bytes([TYPED_VALUE]) + _ID.pack(sid)
        self.list_header = bytes([TYPED_LIST]) + _ID.pack(sid)
        self.sid = sid
        self._readers: dict[int, Callable[[bytes, int], tuple[tuple, int]] | None] = {}
        #: Untagged values (written before the variable had a schema) as rows of this schema
        #: converted to the latest one, when they have its arity.
        untagged = entry.get("untagged")
        self._untagged: Callable[[tuple], tuple] | None = None
        self._untagged_arity = -1
        if self.typed and untagged is not None and int(untagged) >= self.base:
            old = self.versions[int(untagged)]
            self._untagged_arity = len(old)
            if int(untagged) != sid:
                self._untagged = _converter(old, self.versions[sid])

    def _from_untagged(self, row: Any) -> Any:
        if (self._untagged is not None and isinstance(row, tuple)
                and len(row) == self._untagged_arity):
            return self._untagged(row)
        return row

    def _reader(self, sid: int) -> Callable[[bytes, int], tuple[Any, int]] | None:
        """The decoder of schema ``sid`` converting to the latest, or ``None`` (a deleted
        generation: the value reads as absent)."""
        try:
            return self._readers[sid]
        except KeyError:
            pass
        if sid < self.base:
            fn = None  # a deleted generation
        elif sid == self.sid:
            fn = self.latest.unpack
        elif sid > self.sid:
            raise StateSchemaError(
                f"{self.what}: a stored value has schema id {sid}, newer than the query's "
                f"latest ({self.sid}): the state was written by a newer version of the query"
            )
        else:
            old = tuple_codec(self.versions[sid], self.what)
            conv = _converter(self.versions[sid], self.versions[-1])

            def fn(buf: bytes, pos: int, _u: Any = old.unpack, _c: Any = conv) -> Any:
                row, pos = _u(buf, pos)
                return _c(row), pos
        self._readers[sid] = fn
        return fn

    def encode(self, value: Any) -> bytes:
        """A value's bytes, or a TypeError/ValueError naming the variable and the field."""
        if not self.typed:
            return _codec.encode(tuple(value))
        return self.value_header + self.latest.pack(value)

    def decode(self, raw: bytes) -> tuple | None:
        """A stored value (any schema version, or untagged) as a tuple of the latest schema;
        ``None`` for a value of a deleted generation."""
        tag = raw[0]
        if tag != TYPED_VALUE:
            if tag == TYPED_LIST:
                return self._other_kind(raw)
            return self._from_untagged(_codec.decode(raw))
        fn = self._reader((raw[1] << 8) | raw[2])
        if fn is None:
            return None
        row, pos = fn(raw, 3)
        if pos != len(raw):
            raise ValueError(f"{self.what}: {len(raw) - pos} trailing bytes after a value")
        return row

    def _other_kind(self, raw: bytes) -> None:
        """A list where a value belongs or the reverse: only a deleted generation's values
        (the variable was started over as another kind) may be; they read as absent."""
        if (raw[1] << 8) | raw[2] < self.base:
            return None
        raise StateSchemaError(
            f"{self.what}: a stored {'list' if raw[0] == TYPED_LIST else 'value'} does not "
            f"match the variable's kind ({self.kind})"
        )

    def encode_list(self, values: list[Any]) -> bytes:
        if not self.typed:
            return _codec.encode([tuple(v) for v in values])
        pack = self.latest.pack
        return b"".join([self.list_header, _U32.pack(len(values)), *map(pack, values)])

    def decode_list(self, raw: bytes) -> list[tuple] | None:
        tag = raw[0]
        if tag != TYPED_LIST:
            if tag == TYPED_VALUE:
                return self._other_kind(raw)
            items = _codec.decode(raw)
            if self._untagged is not None and isinstance(items, list):
                items = [self._from_untagged(x) for x in items]
            return items
        fn = self._reader((raw[1] << 8) | raw[2])
        if fn is None:
            return None
        (n,) = _U32.unpack_from(raw, 3)
        pos = 7
        out = []
        for _ in range(n):
            row, pos = fn(raw, pos)
            out.append(row)
        return out

    def check_key(self, key: Any) -> tuple:
        """A map key checked against the key schema (as a tuple; ints given for float
        fields become floats, so equal keys are equal bytes)."""
        if self.key_codec is None:
            return tuple(key)
        self.key_codec.pack(key)  # raises naming the field
        if isinstance(key, dict):
            key = tuple(key.get(f[0]) for f in self.key)
        key = tuple(key)
        if any(t in ("float", "double") and isinstance(x, int) and not isinstance(x, bool)
               for (_, t, _), x in zip(self.key, key)):
            key = tuple(float(x) if t in ("float", "double") and isinstance(x, int)
                        and not isinstance(x, bool) else x for (_, t, _), x in zip(self.key, key))
        return key
