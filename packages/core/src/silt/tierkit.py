"""Helpers for tier plugins: option parsing, secret redaction, retrying whole reads, key checks.

Nothing here knows about any one cloud: the first-party S3, GCS and Azure tiers (and third-party
tiers) share it, so their options parse alike and their errors never leak secrets. Free of SDK
imports. ``validate_key``, ``check_data`` and ``check_range`` are the argument checks every tier
applies the same way (defined beside the file tier, re-exported here).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from .errors import InvalidArgumentError
from .tiers.file import check_data, check_range, validate_key

T = TypeVar("T")

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
    """Raise ``InvalidArgumentError`` naming unknown options and listing the accepted ones."""
    accepted = sorted(accepted)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {url!r}; the {scheme}:// "
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


# Patterns of secrets that SDK exception texts can carry: AWS access key ids, presigned-URL and
# SAS query parameters, Authorization headers, account keys in connection strings.
_SECRETS = [
    re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{16}\b"),
    re.compile(
        r"(?i)((?<![A-Za-z0-9_-])(?:x-amz-(?:credential|signature|security-token)|sig|"
        r"signature|se|sv|skoid|"
        r"sktid|accountkey|sharedaccesssignature|access_token|token)=)[^&;\s\"']+"
    ),
    re.compile(r"(?i)(authorization:\s*)[^\r\n]+"),
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
    "check_data",
    "check_options",
    "check_range",
    "parse_bool",
    "parse_choice",
    "parse_float",
    "parse_int",
    "parse_size",
    "redact",
    "retry_on",
    "validate_key",
]
