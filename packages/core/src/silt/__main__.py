"""``python -m silt``: the same command line as the ``silt`` console script."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
