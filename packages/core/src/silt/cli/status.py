"""The ``silt`` command's exit statuses.

0 success; 1 an error (bad URL, no such version, no tier for the scheme) or, for ``get``, an
absent key; 2 damaged data (``verify`` found corruption or a missing SST, or any command met a
checksum failure) or a command-line usage error (argparse's convention).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CORRUPT = 2

__all__ = ["EXIT_CORRUPT", "EXIT_ERROR", "EXIT_OK"]
