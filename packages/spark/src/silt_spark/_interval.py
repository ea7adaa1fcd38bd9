"""Durations as Spark reads them: one parser for every duration argument of silt_spark.

Accepted, as by ``withWatermark`` and ``window()`` (checked against Spark 4's parser):

* an ``int`` (milliseconds) or a ``datetime.timedelta``;
* Spark's interval strings: ``"10 minutes"``, ``"1 hour 30 minutes"``, ``"interval 2 weeks"``,
  ``"1.5 seconds"``, ``"-10 minutes"`` inside a sum (``"1 hour -10 minutes"``), any case and
  spacing. Units: ``week``, ``day``, ``hour``, ``minute``, ``second``, ``millisecond``,
  ``microsecond`` (singular or plural) and ``month``/``year``; only seconds take a fraction;
* the ANSI form ``"interval '10' minute"``.

Spark refuses abbreviations (``"10 mins"``, ``"10 s"``, ``"2 hrs"``) and so does this parser, so
an argument that works here also works in PySpark, and the other way round. Months and years
have no fixed length: Spark counts a month as 31 days in a watermark delay and refuses them in a
window; silt does the same (``months_ok``). silt works in milliseconds: a window or TTL must be
a whole number of them; a delay is truncated to them, as Spark's watermark does.
"""

from __future__ import annotations

import datetime
import numbers
import re
from typing import Any

from .errors import IntervalError

_MS_PER_DAY = 86_400_000
#: Spark's month in a watermark delay (``CalendarInterval``'s 31 days).
_MS_PER_MONTH = 31 * _MS_PER_DAY
_US = {
    "week": 7 * _MS_PER_DAY * 1000, "day": _MS_PER_DAY * 1000, "hour": 3_600_000_000,
    "minute": 60_000_000, "second": 1_000_000, "millisecond": 1000, "microsecond": 1,
}
_MONTHS = {"month": 1, "year": 12}
_PAIR = re.compile(r"([+-]?)(\d+)(?:\.(\d{1,9}))?\s+([a-z]+)")
_ANSI = re.compile(r"interval\s+'([+-]?\d+(?:\.\d{1,9})?)'\s+([a-z]+)")


def _unit(word: str) -> str | None:
    base = word[:-1] if word.endswith("s") else word
    return base if base in _US or base in _MONTHS else None


def parse_interval(text: str) -> tuple[int, int]:
    """``(months, microseconds)`` of a Spark interval string; ``ValueError`` if it is not one."""
    s = " ".join(text.strip().lower().split())
    ansi = _ANSI.fullmatch(s)
    if ansi:
        s = f"{ansi.group(1)} {ansi.group(2)}"
    elif s.startswith("interval "):
        s = s[len("interval "):]
    if not s:
        raise ValueError("no number and unit")
    months = micros = 0
    pos = 0
    while pos < len(s):
        m = _PAIR.match(s, pos)
        if m is None:
            raise ValueError(f"expected '<number> <unit>' at {s[pos:]!r}")
        sign, whole, frac, word = m.groups()
        unit = _unit(word)
        if unit is None:
            raise ValueError(
                f"unknown unit {word!r} (Spark's units: weeks, days, hours, minutes, seconds, "
                "milliseconds, microseconds, months, years; no abbreviations)"
            )
        if frac is not None and unit != "second":
            raise ValueError(f"only seconds take a fraction, got {m.group(0)!r}")
        k = -1 if sign == "-" else 1
        if unit in _MONTHS:
            months += k * int(whole) * _MONTHS[unit]
        else:
            us = int(whole) * _US[unit]
            if frac is not None:
                us += int(frac.ljust(6, "0")[:6])
            micros += k * us
        pos = m.end()
        if pos < len(s):
            if s[pos] != " ":
                raise ValueError(f"unexpected {s[pos:]!r}")
            pos += 1
    return months, micros


def duration_ms(
    value: Any, name: str, *, positive: bool = True, months_ok: bool = False
) -> int:
    """A duration argument in ms: ``int`` ms, ``timedelta`` or a Spark interval string.

    ``positive``: it must be > 0 (windows, slides, TTLs), else >= 0 (delays). ``months_ok``:
    months count as 31 days (Spark's watermark delay); else they are refused (Spark's windows).
    Raises :class:`silt_spark.errors.IntervalError` naming ``name``.
    """
    whole = True
    if isinstance(value, datetime.timedelta):
        us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        ms, whole = divmod(us, 1000)[0], us % 1000 == 0
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        ms = int(value)
    elif isinstance(value, str):
        try:
            months, us = parse_interval(value)
        except ValueError as e:
            raise IntervalError(
                f"{name}: cannot parse {value!r} as an interval ({e}); use e.g. '10 minutes', "
                "'1 hour 30 minutes', 'interval 2 weeks', ms or a datetime.timedelta"
            ) from None
        if months and not months_ok:
            raise IntervalError(
                f"{name}: {value!r} has months or years, which have no fixed length (Spark "
                "refuses them here too); use days or weeks"
            )
        total = months * _MS_PER_MONTH * 1000 + us
        ms = total // 1000 if total >= 0 else -(-total // 1000)  # toward zero, as Spark
        whole = total % 1000 == 0
    else:
        raise IntervalError(
            f"{name} must be ms (int), a datetime.timedelta or an interval string such as "
            f"'10 minutes', got {type(value).__name__} {value!r}"
        )
    if positive and ms <= 0:
        raise IntervalError(f"{name} must be positive, got {value!r}")
    if ms < 0:
        raise IntervalError(f"{name} must not be negative, got {value!r}")
    if positive and not whole:
        raise IntervalError(f"{name} must be a whole number of milliseconds, got {value!r}")
    return ms
