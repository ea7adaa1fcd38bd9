"""Helpers for tier plugins: names and keys, option parsing, secret redaction, retrying reads.

Nothing here knows about any one cloud: the built-in ``file://`` and ``memory://`` tiers, the
first-party S3, GCS and Azure tiers (and third-party tiers) share it, so their names and options
parse alike and their errors never leak secrets. Free of SDK imports.

**The name rule** (:func:`check_name`, :func:`check_path`, :func:`decode_path`) is the one place
that decides whether a name taken from a URL path or from stored metadata (a sibling DB's folder
name in a manifest, an SST id, a referrer marker) may become part of an object's location. It is
applied to the *decoded* text, and it refuses what a further decoding step could still turn into
a separator or a ``..`` (a percent-escape left after decoding, Unicode look-alikes of ``/``,
``\\`` and ``.``), so no number of decodings lets a name leave the root (DESIGN.md invariant 9).
``validate_key``, ``check_data`` and ``check_range`` are the argument checks every tier applies
to the keys and bytes the engine passes.
"""

from __future__ import annotations

import random
import re
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar
from urllib.parse import unquote, urlsplit

from .errors import InvalidArgumentError, InvalidTypeError

T = TypeVar("T")

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _UNITS[_p] = _UNITS[_p + "ib"] = _UNITS[_p + "i"] = 1024**_i
    _UNITS[_p + "b"] = 1000**_i

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


# --- names: one rule for every tier ------------------------------------------------------------

#: The longest name (one path segment), in UTF-8 bytes: the usual file-system limit.
MAX_NAME_BYTES = 255

#: Names made only of these need no further check (silt's own names: ULIDs, ``kg-0-63``).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._~-]+")
#: A percent-escape: left in a decoded name, it means the name was encoded twice.
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
#: Characters that look like or act as a path separator somewhere (file systems, SDKs that
#: normalize Unicode, terminals); NFKC folds the full-width and small forms onto ``/``, ``\\``
#: and ``.``, these it does not.
_LOOKALIKES = frozenset("\u2044\u2215\u2216\u29f5\u29f8\u29f9\u2571\u2572")
#: Unicode categories a name must not contain: controls (NUL included), invisible format
#: characters (bidirectional overrides, zero-width), lone surrogates, line/paragraph separators.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid name, or ``None`` when it is (see :func:`check_name`)."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a str"
    if not name:
        return "it is empty"
    if len(name) <= MAX_NAME_BYTES and _PLAIN_NAME.fullmatch(name) and name not in (".", ".."):
        return None  # the common case, decided without looking at Unicode
    if name in (".", ".."):
        return f"{name!r} names a folder relatively"
    for ch in name:
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            return f"it contains the control or invisible character U+{ord(ch):04X}"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    folded = unicodedata.normalize("NFKC", name)
    if "/" in folded or "\\" in folded or any(ch in _LOOKALIKES for ch in name):
        return "it contains a path separator ('/', '\\' or a look-alike)"
    if folded.strip() in ("", ".", ".."):
        return f"it reads as {folded.strip()!r} (blank, or a relative folder)"
    if _ESCAPE.search(name):
        return ("it holds a percent-escape, which one more decoding step could turn into a "
                "separator (names are checked decoded: an escape here was encoded twice)")
    return None


def check_name(name: object, *, what: str = "name") -> str:
    """Return ``name`` if it is a plain name for one path segment; raise otherwise.

    A name is a non-empty ``str`` of at most :data:`MAX_NAME_BYTES` UTF-8 bytes that is not
    blank, ``.`` or ``..`` (also after NFKC folding and trimming spaces) and holds no ``/``, no
    ``\\``, no character that Unicode compatibility folding (NFKC) turns into one of those or
    that looks like one, no control or invisible character, and no percent-escape (the name is
    already decoded; an escape left in it could be decoded again). Apply it after every decoding
    step. Raises :class:`~silt.errors.InvalidArgumentError` (``what`` names the thing in the
    message); callers that read the name from stored metadata report it as a
    :class:`~silt.errors.CorruptionError` instead.
    """
    problem = name_problem(name)
    if problem is not None:
        if not isinstance(name, str):
            raise InvalidTypeError(f"{what} must be a str, got {type(name).__name__}")
        raise InvalidArgumentError(f"{what} {name!r} is not a plain name: {problem}")
    return name  # type: ignore[return-value]


def check_path(path: object, *, what: str = "path") -> str:
    """Return ``path`` if it is ``/``-separated names that each pass :func:`check_name`.

    Leading and trailing ``/`` are allowed (``""`` and ``"/"`` are valid, empty paths); an empty
    segment inside (``a//b``) is not. Raises like :func:`check_name`, naming the whole path.
    """
    if not isinstance(path, str):
        raise InvalidTypeError(f"{what} must be a str, got {type(path).__name__}")
    inner = path.strip("/")
    if inner:
        for segment in inner.split("/"):
            problem = name_problem(segment)
            if problem is not None:
                raise InvalidArgumentError(
                    f"{what} {path!r} is not a plain '/'-separated path: segment {segment!r} "
                    f"is refused ({problem})"
                )
    return path


def decode_path(text: str, *, what: str = "path") -> str:
    """Percent-decode the path part of a URL (UTF-8) and check the result with
    :func:`check_path`. Every tier decodes its URL's path with this, and only this."""
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"{what} {text!r} holds percent-escapes that are not UTF-8"
        ) from None
    return check_path(decoded, what=what)


def validate_key(key: object) -> str:
    """Return ``key`` if it is a valid object key, else raise.

    A key is a non-empty ``str`` of ``/``-separated segments; no segment is empty, ``.`` or
    ``..``; it contains no backslash and no NUL. Raises :class:`~silt.errors.InvalidTypeError`
    for a non-``str`` and :class:`~silt.errors.InvalidArgumentError` (naming the rule) otherwise.
    Keys come from the engine (:mod:`silt.paths`), whose variable parts (SST ids, sibling names)
    passed :func:`check_name` when they were read.
    """
    if not isinstance(key, str):
        raise InvalidTypeError(f"an object key must be a str, got {type(key).__name__}")
    if not key:
        raise InvalidArgumentError("an object key must not be empty")
    if "\\" in key or "\x00" in key:
        raise InvalidArgumentError(
            f"object key {key!r} contains a backslash or NUL; keys use '/' as the only separator"
        )
    if key.startswith("/"):
        raise InvalidArgumentError(
            f"object key {key!r} starts with '/'; keys are relative to the store root"
        )
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgumentError(
                f"object key {key!r} has an empty, '.' or '..' segment; keys name objects under "
                "the root with plain '/'-separated names such as 'sst/01J0000000.sst'"
            )
    return key


def check_data(data: object) -> bytes:
    """Return ``data`` as ``bytes`` (copying a ``bytearray`` or ``memoryview``), else raise
    :class:`~silt.errors.InvalidTypeError`."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidTypeError(
        f"object data must be bytes, got {type(data).__name__}; encode text first"
    )


def check_range(start: object, length: object) -> tuple[int, int]:
    """Validate the ``start``/``length`` of a ranged read: non-negative ``int`` values."""
    for name, value in (("start", start), ("length", length)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidTypeError(f"get_range {name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise InvalidArgumentError(f"get_range {name} must be >= 0, got {value}")
    return start, length  # type: ignore[return-value]


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
            f"{scheme}:// "
            f"tier accepts: {', '.join(accepted) or 'none'}"
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
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}={value!r} must be an integer") from None
    if number < minimum:
        raise InvalidArgumentError(f"option {name}={value!r} must be >= {minimum}")
    return number


def parse_float(name: str, value: str, *, minimum: float = 0.0) -> float:
    """Parse a number of seconds (or any float option) of at least ``minimum``."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}={value!r} must be a number") from None
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


# --- endpoints and URLs in messages ------------------------------------------------------------


def check_endpoint(value: object, *, what: str, hint: str = "", allow_path: bool = True) -> str:
    """Return ``value`` (stripped) if it is an ``http://`` or ``https://`` URL with a host and
    without user, password, query or fragment; raise :class:`~silt.errors.InvalidArgumentError`
    otherwise.

    Endpoints end up in messages and logs, so they must not carry a secret: a password in
    ``http://user:password@host`` or a token in a query. The messages name ``what`` (the option
    or variable) and never echo the value. ``allow_path=False`` also refuses a path (a base URL).
    """
    text = str(value).strip()
    sentence = f"; {hint}" if hint else ""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise InvalidArgumentError(
            f"{what} is not a valid URL (not shown: it may hold a secret){sentence}"
        ) from None
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise InvalidArgumentError(
            f"{what} must not contain credentials ('user@' or 'user:password@'; the URL is not "
            f"shown): credentials never go in a URL, URLs end up in logs{sentence}"
        )
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise InvalidArgumentError(
            f"{what} must not carry a SAS, token or other query, nor a fragment (the URL is not "
            f"shown: URLs end up in logs){sentence}"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(
            f"{what} must be an http:// or https:// URL with a host, like "
            "'http://127.0.0.1:9000'"
        )
    if any(ch.isspace() or unicodedata.category(ch) in _BAD_CATEGORIES for ch in text):
        raise InvalidArgumentError(f"{what} contains spaces or control characters")
    if not allow_path and parts.path.strip("/"):
        raise InvalidArgumentError(
            f"{what} must be a base URL such as 'http://127.0.0.1:4443' (no path, query or "
            "fragment)"
        )
    return text


def public_url(url: object) -> str:
    """``url`` as messages, reprs and logs may show it: without its query (tier options may hold
    a secret, such as an Azure connection string) and without any ``user:password@``."""
    text = str(url)
    base = text.split("?", 1)[0].split("#", 1)[0]
    scheme, sep, rest = base.partition("://")
    if sep:
        host, slash, path = rest.partition("/")
        if "@" in host:
            host = "<redacted>@" + host.rsplit("@", 1)[1]
        base = f"{scheme}{sep}{host}{slash}{path}"
    return base + ("?..." if "?" in text else "")


def chain_leaks(exc: BaseException, secrets: Iterable[str | None] = ()) -> bool:
    """Whether the text of ``exc`` or of any exception chained to it (``__cause__``,
    ``__context__``, an SDK's ``inner_exception``) holds a secret: a known secret shape
    (:func:`redact`) or one of ``secrets``. Tiers chain an SDK exception to their own error
    only when it does not (``raise error from safe_cause(exc, secrets)``)."""
    secrets = tuple(secrets)
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for text in (str(current), repr(current)):
            if redact(text, secrets) != text:
                return True
        for inner in (current.__cause__, current.__context__,
                      getattr(current, "inner_exception", None)):
            if isinstance(inner, BaseException):
                pending.append(inner)
    return False


def safe_cause(exc: BaseException, secrets: Iterable[str | None] = ()) -> BaseException | None:
    """``exc`` if nothing in its chain holds a secret (:func:`chain_leaks`), else ``None``: the
    cause to raise a tier's error ``from``."""
    return None if chain_leaks(exc, secrets) else exc


# Patterns of secrets that SDK exception texts can carry: AWS access key ids, presigned-URL and
# SAS query parameters, Authorization headers, account keys in connection strings, Google tokens.
_SECRETS = [
    re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{16}\b"),
    re.compile(
        r"(?i)((?<![A-Za-z0-9_-])(?:x-amz-(?:credential|signature|security-token)|sig|"
        r"signature|se|sv|skoid|"
        r"sktid|accountkey|sharedaccesssignature|access_token|token)=)[^&;\s\"']+"
    ),
    re.compile(r"(?i)(authorization:\s*)[^\r\n]+"),
    # Google's: OAuth access tokens, bearer headers, signed-URL parameters, private keys and
    # refresh tokens from service-account and user credential files.
    re.compile(r"\bya29\.[\w.-]+"),
    re.compile(r"(?i)(bearer\s+)[\w.~+/=-]+"),
    re.compile(r"(?i)(x-goog-(?:credential|signature)=)[^&\s\"']+"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
               re.DOTALL),
    re.compile(r"(?i)(\"?(?:refresh_token|client_secret|private_key)\"?\s*[:=]\s*\"?)[^\"',\s}]+"),
]


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Remove known secret shapes, and the exact ``secrets`` given, from ``text``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    for pattern in _SECRETS:
        text = pattern.sub(
            lambda m: (m.group(1) if m.groups() else "") + "<redacted>", text
        )
    return text


def retry_on(
    error: type[BaseException],
    call: Callable[[], T],
    *,
    attempts: int,
    deadline: float,
    base_delay: float = 0.05,
    max_delay: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``, retrying only ``error`` with capped exponential backoff and full jitter.

    Unlike :func:`silt.store.retrying` this retries one narrow failure (a body that broke
    mid-read, a conditional-write conflict), so it does not multiply the SDK's own retries of
    whole requests. After ``attempts`` tries or ``deadline`` seconds the last error propagates.
    """
    start = time.monotonic()
    for attempt in range(attempts):
        try:
            return call()
        except error:
            elapsed = time.monotonic() - start
            if attempt == attempts - 1 or elapsed >= deadline:
                raise
            delay = min(max_delay, base_delay * (2**attempt))
            sleep(min(random.uniform(0, delay), max(0.0, deadline - elapsed)))
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = [
    "MAX_NAME_BYTES",
    "chain_leaks",
    "check_data",
    "check_endpoint",
    "check_name",
    "check_options",
    "check_path",
    "check_range",
    "decode_path",
    "name_problem",
    "parse_bool",
    "parse_choice",
    "parse_float",
    "parse_int",
    "parse_size",
    "public_url",
    "redact",
    "retry_on",
    "safe_cause",
    "validate_key",
]
