"""How long work reports how far it got: a callback, for a command line or an application.

A function that may take long on a large root (:func:`silt.verify`,
:func:`silt.gc.collect_garbage`, :func:`silt.compaction.compactor.run_compaction`) takes an
optional ``progress`` callback and calls it as ``progress(unit, done, total)``:

- ``unit`` names what is counted (``"DBs"``, ``"SSTs"``, ``"objects"``); one function may count
  several units, nested (each DB of a root, then each SST of that DB);
- ``done`` is how many of them are finished so far, from 0; a unit that starts again (the next
  DB's SSTs) starts again from 0;
- ``total`` is how many there are, or ``None`` when that is not known in advance.

The callback only observes: it is called on the caller's thread between steps, what it returns
is ignored, and an exception it raises propagates (so it can cancel the work). ``silt``'s
command line draws it as progress bars on a terminal.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``progress(unit, done, total)``: see the module docstring.
Progress = Callable[[str, int, "int | None"], None]

__all__ = ["Progress"]
