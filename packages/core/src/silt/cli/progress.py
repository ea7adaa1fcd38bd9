"""Progress bars for ``silt``'s long work (``verify``, ``compact``, ``gc``), drawn with tqdm.

Bars are drawn on stderr only while stderr is a terminal: piped or redirected output (scripts,
CI logs, tests) never holds one, and stdout never does. They are cleared when the work ends, so
what stays on the screen is the command's report. ``TQDM_DISABLE=1`` in the environment turns
them off on a terminal too (tqdm's own switch); without tqdm installed, nothing is drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..progress import Progress


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or replaced stream is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def bars(what: str, stream: TextIO | None = None) -> Iterator[Progress | None]:
    """A :data:`silt.progress.Progress` callback that draws one bar per unit (nested units
    stacked below one another) on ``stream`` (default stderr), for the work named ``what``;
    ``None`` (draw nothing) when ``stream`` is not a terminal or tqdm is not installed."""
    out = sys.stderr if stream is None else stream
    if not is_terminal(out):
        yield None
        return
    try:
        from tqdm import tqdm
    except ImportError:  # installed without its dependencies: the work runs, undrawn
        yield None
        return
    drawn: dict[str, Any] = {}

    def progress(unit: str, done: int, total: int | None) -> None:
        bar = drawn.get(unit)
        if bar is None:
            bar = drawn[unit] = tqdm(total=total, desc=f"silt {what}", unit=f" {unit}",
                                     file=out, position=len(drawn), leave=False,
                                     dynamic_ncols=True)
        elif done < bar.n or total != bar.total:  # the unit starts again (the next DB's SSTs)
            bar.reset(total=total)
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        for bar in reversed(drawn.values()):
            bar.close()


__all__ = ["bars", "is_terminal"]
