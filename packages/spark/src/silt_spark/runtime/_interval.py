"""Durations as Spark reads them: one parser for every duration argument of silt_spark.

Accepted, as by ``withWatermark`` and ``window()`` (checked against Spark 4's parser in
tests/test_spark_interval.py):

* an ``int`` (milliseconds) or a ``datetime.timedelta``;
* Spark's interval strings: ``"10 minutes"``, ``"1 hour 30 minutes"``, ``"interval 2 weeks"``,
  ``"1.5 seconds"``, ``"1 hour -10 minutes"``, any case and spacing. Units: ``week``, ``day``,
  ``hour``, ``minute``, ``second``, ``millisecond``, ``microsecond`` (singular or plural) and
  ``month``/``year``;
* the ANSI form ``"interval '10' minute"``.

silt also keeps accepting what it accepted before: the abbreviations ``ms``, ``s``/``sec(s)``,
``m``/``min(s)``, ``h``/``hr(s)``, ``d``, and fractions of any unit (``"1.5 hours"``). Spark
refuses those, so code meant to move between silt and ``withWatermark`` should spell units out.

Months and years have no fixed length: Spark counts a month as 31 days in a watermark delay and
refuses them in a window; so does this parser (``months_ok``). silt works in milliseconds: a
window, slide or TTL must be a whole number of them; a delay is truncated to them, as Spark's
watermark does. Every duration is at most :data:`MAX_DURATION_MS` (Spark timestamps are 64-bit
microseconds). Errors are silt's :class:`~silt.errors.InvalidArgumentError` and
:class:`~silt.errors.InvalidTypeError`, and name the argument.
"""

from __future__ import annotations

import datetime
import math
import numbers
import re
from fractions import Fraction
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

#: The longest duration an option may give: Spark timestamps are 64-bit microseconds.
MAX_DURATION_MS = (2**63 - 1) // 1000

_US_PER_DAY = 86_400_000_000
#: Spark's month in a watermark delay (``CalendarInterval``'s 31 days).
_US_PER_MONTH = 31 * _US_PER_DAY
_US = {
    "week": 7 * _US_PER_DAY, "day": _US_PER_DAY, "hour": 3_600_000_000, "minute": 60_000_000,
    "second": 1_000_000, "millisecond": 1000, "microsecond": 1,
}
_MONTHS = {"month": 1, "year": 12}
#: silt's own abbreviations (accepted before Spark's syntax was; Spark refuses them).
_ABBREVIATIONS = {
    "ms": "millisecond", "s": "second", "sec": "second", "secs": "second", "m": "minute",
    "min": "minute", "mins": "minute", "h": "hour", "hr": "hour", "hrs": "hour", "d": "day",
}
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|[+-]?inf(?:inity)?|[+-]?nan"
_PAIR = re.compile(rf"({_NUMBER})\s+([a-z]+)")
_ANSI = re.compile(r"interval\s+'([+-]?\d+(?:\.\d+)?)'\s+([a-z]+)")


class _NotFinite(ValueError):
    pass


def _unit(word: str) -> str | None:
    if word in _ABBREVIATIONS:
        return _ABBREVIATIONS[word]
    base = word[:-1] if word.endswith("s") else word
    return base if base in _US or base in _MONTHS else None


def parse_interval(text: str) -> tuple[int, int]:
    """``(months, microseconds)`` of an interval string (``ValueError`` if it is not one).

    Exact: fractions are kept as fractions until the microseconds are rounded toward zero.
    """
    s = " ".join(text.strip().lower().split())
    ansi = _ANSI.fullmatch(s)
    if ansi:
        s = f"{ansi.group(1)} {ansi.group(2)}"
    elif s.startswith("interval "):
        s = s[len("interval "):]
    if not s:
        raise ValueError("no number and unit")
    months = Fraction(0)
    micros = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _PAIR.match(s, pos)
        if m is None:
            raise ValueError(f"expected '<number> <unit>' at {s[pos:]!r}")
        number, word = m.groups()
        unit = _unit(word)
        if unit is None:
            raise ValueError(
                f"unknown unit {word!r} (units: weeks, days, hours, minutes, seconds, "
                "milliseconds, microseconds, months, years)"
            )
        if not math.isfinite(float(number)):
            raise _NotFinite(number)
        amount = Fraction(number)
        if unit in _MONTHS:
            months += amount * _MONTHS[unit]
        else:
            micros += amount * _US[unit]
        pos = m.end()
        if pos < len(s):
            if s[pos] != " ":
                raise ValueError(f"unexpected {s[pos:]!r}")
            pos += 1
    if months.denominator != 1:
        raise ValueError("months and years must be whole")
    return int(months), math.trunc(micros)


def duration_ms(value: Any, name: str, *, positive: bool, months_ok: bool) -> int:
    """A duration argument in ms: ``int`` ms, a ``timedelta`` or an interval string.

    ``positive``: a window, slide or TTL (> 0, whole ms, no months); else a delay (>= 0,
    truncated to ms; months of 31 days when ``months_ok``, as Spark's watermark counts them).
    """
    shown = f"{value!r:.80}"
    if isinstance(value, datetime.timedelta):
        us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        us = int(value) * 1000
    elif isinstance(value, str):
        try:
            months, us = parse_interval(value)
        except _NotFinite:
            raise InvalidArgumentError(f"{name} must be a finite interval, got {shown}") from None
        except ValueError as e:
            raise InvalidArgumentError(
                f"{name}: cannot parse interval {shown} ({e}); use e.g. '10 minutes', "
                "'1 hour 30 minutes', 'interval 2 weeks', ms or a datetime.timedelta"
            ) from None
        if months and not months_ok:
            raise InvalidArgumentError(
                f"{name}: {shown} has months or years, which have no fixed length (Spark "
                "refuses them here too); use days or weeks"
            )
        us += months * _US_PER_MONTH
    elif positive:
        raise InvalidTypeError(
            f"{name} must be ms, a timedelta or an interval string, got {shown}"
        )
    else:
        raise InvalidTypeError(
            f"{name} must be ms or an interval string, got {shown} (a datetime.timedelta "
            "works too)"
        )
    ms = us // 1000 if us >= 0 else -(-us // 1000)  # toward zero, as Spark
    whole = us % 1000 == 0
    if ms > MAX_DURATION_MS:
        raise InvalidArgumentError(
            f"{name} must be at most {MAX_DURATION_MS} ms (Spark timestamps are 64-bit "
            f"microseconds), got {shown}"
        )
    if positive:
        if us <= 0:
            raise InvalidArgumentError(f"{name} must be positive, got {shown}")
        if not whole:
            raise InvalidArgumentError(
                f"{name} must be a whole number of milliseconds, got {shown}"
            )
    elif us < 0:
        raise InvalidArgumentError(f"{name} must not be negative, got {shown}")
    return ms
