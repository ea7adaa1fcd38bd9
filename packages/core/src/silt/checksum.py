"""CRC-32, zlib's polynomial: every checksum silt writes and checks.

:func:`crc32` is zlib-ng's when the ``zlib-ng`` package is installed (a dependency of silt-core):
it folds with carry-less multiplication where the CPU has it, about ten times zlib's speed on an
8 KiB block (0.16 against 1.6 us on the benchmark machine), which is most of what checking a
block read from a local file costs. Without it (a platform with no wheel), the standard
library's :func:`zlib.crc32`. Both compute the same function: the stored values, and so the
formats, do not depend on which one runs.

``crc32(data, value=0)`` takes any contiguous buffer (bytes, memoryview) and a running value.
"""

from __future__ import annotations

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; a platform may lack a wheel
    from zlib import crc32

#: Which implementation :func:`crc32` is: ``"zlib-ng"`` or ``"zlib"``.
IMPLEMENTATION = "zlib-ng" if crc32.__module__.startswith("zlib_ng") else "zlib"

__all__ = ["IMPLEMENTATION", "crc32"]
