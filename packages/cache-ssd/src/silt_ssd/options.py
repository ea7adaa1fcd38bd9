"""The cache's options: parsing and validating ``cache_*`` URL options into :class:`CacheOptions`.

URL form (``open_store`` hands every ``cache_*`` option to the cache factory)::

    file:///data/state?cache=ssd&cache_dir=/mnt/nvme/silt&cache_size=20GB&cache_reserve=5GB

=====================  ========================================================================
option                 meaning
=====================  ========================================================================
``cache_dir``          required; a directory on local disk (created if missing). Several
                       processes may share it.
``cache_size``         the most bytes the cache's entries may hold. Default ``10GiB``.
``cache_reserve``      free disk space the cache always leaves, as bytes or a percentage of the
                       file system (``5GB``, ``10%``). Default ``5%``.
``cache_write_through``  ``true``/``false``: also cache the block and tail ranges of every SST this
                       process uploads, so a later reader on this machine starts warm.
                       Default: ``true`` in front of a remote tier (S3, GCS, Azure, any store
                       not ``local``), where a restart would otherwise fetch every block
                       again; ``false`` in front of a local one (``file://``), whose blocks
                       the page cache already holds.
=====================  ========================================================================

Sizes are an integer or decimal number with an optional unit, case-insensitive: ``B``; SI units
``kB``, ``MB``, ``GB``, ``TB`` (powers of 1000); binary units ``KiB``, ``MiB``, ``GiB``, ``TiB``
and the short forms ``K``, ``M``, ``G``, ``T`` (powers of 1024). ``20GB`` is 20,000,000,000
bytes; ``20GiB`` is 21,474,836,480.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from silt.errors import InvalidArgumentError

DEFAULT_SIZE = "10GiB"
DEFAULT_RESERVE = "5%"

ACCEPTED_OPTIONS: tuple[str, ...] = (
    "cache_dir",
    "cache_size",
    "cache_reserve",
    "cache_write_through",
)

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def parse_size(text: str, *, option: str = "size") -> int:
    """Bytes in ``text`` (``"512MiB"``, ``"20GB"``, ``"1.5G"``, ``"4096"``).

    Raises :class:`~silt.errors.InvalidArgumentError` naming ``option`` for anything else.
    """
    match = _SIZE_RE.match(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise InvalidArgumentError(
            f"{option}={text!r} is not a size; write a number of bytes with an optional unit, "
            "e.g. '20GB' (10^9), '512MiB' (2^20), '1.5G' or '1048576'"
        )
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class Reserve:
    """Free disk space to leave: ``bytes`` or a ``fraction`` of the file system (one is 0)."""

    bytes: int = 0
    fraction: float = 0.0

    def resolve(self, total: int) -> int:
        """The reserve in bytes on a file system of ``total`` bytes."""
        return self.bytes if not self.fraction else int(total * self.fraction)

    @classmethod
    def parse(cls, text: str) -> Reserve:
        if isinstance(text, str) and text.strip().endswith("%"):
            number = text.strip()[:-1].strip()
            try:
                pct = float(number)
            except ValueError:
                pct = -1.0
            if not 0 <= pct < 100:
                raise InvalidArgumentError(
                    f"cache_reserve={text!r} is not a percentage between 0% and 100% (exclusive)"
                )
            return cls(fraction=pct / 100)
        return cls(bytes=parse_size(text, option="cache_reserve"))


def parse_bool(text: str, *, option: str) -> bool:
    value = text.strip().lower() if isinstance(text, str) else None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgumentError(f"{option}={text!r} is not a boolean; use true or false")


@dataclass(frozen=True)
class CacheOptions:
    """Validated cache settings (plain values only, so they can travel to Spark executors)."""

    cache_dir: str
    size_limit: int
    reserve: Reserve = Reserve()
    #: ``None``: decided by the tier (on in front of a remote store, off in front of a local one).
    write_through: bool | None = None

    @classmethod
    def from_options(cls, options: dict[str, str]) -> CacheOptions:
        """Validate the ``cache_*`` URL options; raises ``InvalidArgumentError`` on any problem."""
        unknown = sorted(set(options) - set(ACCEPTED_OPTIONS))
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) {unknown} for cache=ssd; it accepts {list(ACCEPTED_OPTIONS)}"
            )
        cache_dir = options.get("cache_dir", "")
        if not cache_dir.strip():
            raise InvalidArgumentError(
                "cache=ssd needs cache_dir=<directory on local disk>, e.g. "
                "'?cache=ssd&cache_dir=/mnt/nvme/silt-cache&cache_size=20GB'"
            )
        size = parse_size(options.get("cache_size", DEFAULT_SIZE), option="cache_size")
        if size <= 0:
            raise InvalidArgumentError(
                f"cache_size must be positive, got {options.get('cache_size')!r}; leave out "
                "cache=ssd to run without a cache"
            )
        return cls(
            cache_dir=os.path.abspath(os.path.expanduser(cache_dir)),
            size_limit=size,
            reserve=Reserve.parse(options.get("cache_reserve", DEFAULT_RESERVE)),
            write_through=None if "cache_write_through" not in options else parse_bool(
                options["cache_write_through"], option="cache_write_through"
            ),
        )


__all__ = ["ACCEPTED_OPTIONS", "CacheOptions", "Reserve", "parse_bool", "parse_size"]
