"""Checking that an error never shows a secret (a password, key or token).

:func:`exception_texts` collects everything a traceback or a log line could show of an
exception: ``str`` and ``repr`` of it and of every exception chained to it (``__cause__`` and
``__context__``, displayed or suppressed). A tier's tests assert a sentinel secret is in none::

    assert not any(SECRET in t for t in exception_texts(exc))
"""

from __future__ import annotations


def exception_texts(exc: BaseException) -> list[str]:
    """``str`` and ``repr`` of ``exc`` and of every exception chained to it."""
    out: list[str] = []
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        out += [str(current), repr(current)]
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return out
