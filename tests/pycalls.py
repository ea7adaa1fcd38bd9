"""Counting the Python-level calls a piece of code makes: how the tests check that a hot path
makes no Python call per key, per block or per timer (counts, never wall-clock time)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any


def python_calls(fn: Callable[[], Any], under: str | None = None) -> Counter:
    """The Python-level calls (function frames, generators' resumptions included) made while
    ``fn()`` runs, by ``(file name, function name)``; with ``under``, only those of code whose
    file path contains it (so that, say, a garbage collector callback the test runner
    installed is not counted). Calls into C make no frame and are not counted."""
    calls: Counter = Counter()

    def prof(frame, event, arg) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            if under is None or under in path:
                calls[(Path(path).name, frame.f_code.co_name)] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def python_lines(fn: Callable[[], Any], under: str) -> Counter:
    """The Python lines executed while ``fn()`` runs in code whose file path contains
    ``under``, by ``(file name, line number)``: a loop's every pass counts, a comprehension's
    too (which :func:`python_calls` sees as one call), so a count that grows with the rows
    is a Python step per row. Calls into C (numpy, Arrow, ``map`` over a C function) add
    nothing."""
    lines: Counter = Counter()

    def local(frame, event, arg):
        if event == "line":
            lines[(Path(frame.f_code.co_filename).name, frame.f_lineno)] += 1
        return local

    def trace(frame, event, arg):
        return local if under in frame.f_code.co_filename else None

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return lines
