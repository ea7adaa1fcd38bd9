"""Tier options: parsing URL query values, refusing unknown ones, and :class:`TierOptions`.

A tier's options come as strings from its URL's query (``s3://b/p?read_timeout=5``) or from
``silt.open(..., options=...)``. The parsers here turn them into values with messages that name
the option and the expected shape; :func:`check_options` refuses an option the tier does not
know, listing the ones it does (never a value: a value may be a secret).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from ..errors import InvalidArgumentError
from .urls import public_url

Opts = TypeVar("Opts", bound="TierOptions")
N = TypeVar("N", int, float)

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _UNITS[_p] = _UNITS[_p + "ib"] = _UNITS[_p + "i"] = 1024**_i
    _UNITS[_p + "b"] = 1000**_i

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def check_options(
    url: str, options: Mapping[str, str], accepted: Iterable[str], scheme: str
) -> None:
    """Raise ``InvalidArgumentError`` naming unknown options and listing the accepted ones
    (never their values, nor the URL's query: :func:`public_url`)."""
    accepted = sorted(accepted)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {public_url(url)!r}; the "
            f"{scheme}:// tier accepts: {', '.join(accepted) or 'none'}"
        )


def parse_size(name: str, value: str, *, minimum: int = 0) -> int:
    """Parse a byte size: ``"1048576"``, ``"64MiB"``, ``"64M"`` (binary), ``"64MB"`` (decimal)."""
    match = _SIZE.match(str(value))
    if not match:
        raise InvalidArgumentError(
            f"option {name}={value!r} is not a size; write bytes or a unit, as in '64MiB'"
        )
    size = int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if size < minimum:
        raise InvalidArgumentError(f"option {name}={value!r} must be at least {minimum} bytes")
    return size


def parse_int(name: str, value: str, *, minimum: int = 0) -> int:
    """Parse an integer option of at least ``minimum``."""
    return _parse_number(name, value, int, minimum, "an integer")


def parse_float(name: str, value: str, *, minimum: float = 0.0) -> float:
    """Parse a number of seconds (or any float option) of at least ``minimum``."""
    return _parse_number(name, value, float, minimum, "a number")


def _parse_number(name: str, value: str, kind: type[N], minimum: float, shape: str) -> N:
    try:
        number = kind(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}={value!r} must be {shape}") from None
    if not number >= minimum:  # also rejects NaN
        raise InvalidArgumentError(f"option {name}={value!r} must be >= {minimum}")
    return number


def parse_bool(name: str, value: str) -> bool:
    """Parse ``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case)."""
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgumentError(f"option {name}={value!r} must be true or false")


def parse_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Parse one of ``choices`` (case-insensitive; returned lower case)."""
    text = str(value).strip().lower()
    allowed = tuple(choices)
    if text not in allowed:
        raise InvalidArgumentError(
            f"option {name}={value!r} must be one of {', '.join(allowed)}"
        )
    return text


class TierOptions:
    """What every tier's options dataclass shares: the accepted names, parsing a URL query,
    and writing the non-default values back as one.

    Subclass it with a ``@dataclass(frozen=True)`` whose fields are the options (a frozen,
    picklable value: a store shipped to another process travels as its options). Class
    attributes say how each string is parsed: a field whose default is an ``int`` is a count
    (at least 1) unless it is in ``SIZES`` (a byte size, name -> minimum); a ``float`` a number
    of seconds (> 0); a ``bool`` (or ``bool | None``) a boolean; a name in ``CHOICES`` one of
    its values; anything else non-empty text. Override :meth:`parse_option` for the rest.
    Options named in ``CREDENTIAL_OPTIONS`` are refused with ``CREDENTIAL_HINT``: credentials
    never go in a URL. Fields named in ``SECRET_OPTIONS`` (declare them with
    ``field(default=None, repr=False)``) are accepted only as storage options given in code
    (``silt.open(url, storage_options=...)``), never from a URL; :meth:`to_query` leaves them
    out and :meth:`secrets` lists their values, for redaction.
    """

    SCHEME: ClassVar[str] = ""
    SIZES: ClassVar[Mapping[str, int]] = {}
    CHOICES: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    CREDENTIAL_OPTIONS: ClassVar[frozenset[str]] = frozenset()
    CREDENTIAL_HINT: ClassVar[str] = ""
    SECRET_OPTIONS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def names(cls) -> frozenset[str]:
        """Option names accepted in a URL query (the dataclass fields but the secret ones)."""
        return cls.storage_names() - cls.SECRET_OPTIONS

    @classmethod
    def storage_names(cls) -> frozenset[str]:
        """Option names accepted as storage options (every dataclass field)."""
        return frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_query(
        cls: type[Opts], url: str, options: Mapping[str, str],
        storage_options: Mapping[str, str] | None = None,
    ) -> Opts:
        """Parse URL query options and storage options (strings; a name given both ways takes
        the storage option); unknown options are an error that lists the accepted ones."""
        url = url.split("?", 1)[0]  # never echo query values: they might hold secrets
        secret_like = sorted(set(options) & (cls.CREDENTIAL_OPTIONS | cls.SECRET_OPTIONS))
        if secret_like:
            extra = (" or pass them in code as storage_options" if cls.SECRET_OPTIONS else "")
            raise InvalidArgumentError(
                f"option(s) {', '.join(secret_like)} look like credentials; silt never takes "
                f"credentials from a URL (URLs end up in logs). {cls.CREDENTIAL_HINT}{extra}"
            )
        check_options(url, options, cls.names(), cls.SCHEME)
        storage = dict(storage_options or {})
        unknown = sorted(set(storage) - cls.storage_names())
        if unknown:
            raise InvalidArgumentError(
                f"unknown storage option(s) {', '.join(map(repr, unknown))} for "
                f"{public_url(url)!r}; the {cls.SCHEME}:// tier accepts: "
                f"{', '.join(sorted(cls.storage_names()))}"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs = {
            name: cls.parse_option(name, raw, fields[name], url)
            for name, raw in {**options, **storage}.items()
        }
        return cls(**kwargs)

    def secrets(self) -> tuple[str, ...]:
        """The values of the secret options that are set (for redaction of messages)."""
        values = (getattr(self, name) for name in sorted(self.SECRET_OPTIONS))
        return tuple(str(v) for v in values if v)

    @classmethod
    def parse_option(cls, name: str, raw: str, field: dataclasses.Field[Any], url: str) -> Any:
        """The value of option ``name`` given as ``raw`` (see the class docstring)."""
        if name in cls.SIZES:
            return parse_size(name, raw, minimum=cls.SIZES[name])
        if name in cls.CHOICES:
            return parse_choice(name, raw, cls.CHOICES[name])
        default = field.default
        if isinstance(default, bool) or "bool" in str(field.type):
            return parse_bool(name, raw)
        if isinstance(default, int):
            return parse_int(name, raw, minimum=1)
        if isinstance(default, float):
            # a float option whose default is 0 is off at 0 (hedging); the others are times
            return parse_float(name, raw, minimum=0.0 if default == 0 else 0.001)
        if not raw.strip():
            raise InvalidArgumentError(f"option {name}= is empty in {url!r}")
        return raw.strip()

    def to_query(self) -> dict[str, str]:
        """The options that differ from the defaults, as URL query strings (secret options
        left out; other values may still be sensitive: do not log the result)."""
        default = type(self)()
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in self.SECRET_OPTIONS:
                continue
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                out[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


@dataclasses.dataclass(frozen=True)
class NetworkOptions(TierOptions):
    """The options every tier on a network SDK has, with the defaults of the retry policy
    (:mod:`silt.tierkit.retry`): subclass it instead of :class:`TierOptions` (and call
    ``super().__post_init__()`` from your own ``__post_init__``).

    ``connect_timeout`` and ``read_timeout`` are seconds (a connection, a gap between bytes);
    ``max_attempts`` is how often the SDK's retry policy sends one request at most (configure
    the SDK with it); ``read_attempts`` how often a whole read whose body broke is read again.
    ``hedge_after_ms`` and ``hedge_quantile`` make slow reads send a second request
    (:mod:`silt.tierkit.hedge`; both 0, the default: never).
    """

    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 5
    read_attempts: int = 4
    hedge_after_ms: float = 0.0
    hedge_quantile: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_attempts", "read_attempts"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1")
        for name in ("connect_timeout", "read_timeout"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(f"{name} must be > 0 seconds")
        from .hedge import check

        check(self.hedge_after_ms, self.hedge_quantile)


__all__ = [
    "NetworkOptions",
    "TierOptions",
    "check_options",
    "parse_bool",
    "parse_choice",
    "parse_float",
    "parse_int",
    "parse_size",
]
