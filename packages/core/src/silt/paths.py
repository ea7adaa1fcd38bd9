"""Every object name silt writes under a root, in one place.

Layout (see ``docs/format.md``)::

    manifest/<version:020d>   create-only; a version is committed when its manifest exists
    sst/<id>.sst              immutable sorted string tables; ids are ULIDs (time-ordered)
    compaction/<id>           finished compaction results waiting to be adopted
    checkpoint/<name>         a named checkpoint: pins one version against GC
    manifest/<version:020d>.fate  the fate of a version whose writer withdrew it ("withdrawn") or
                              that a checkpoint settled ("settled"); create-only, so the two exclude
                              each other, and a withdrawn version's number is never used again
    gc/horizon/<version:020d> GC's low-water marks: no version below the greatest may be created
    gc/pass/<cutoff_ms:020d>  a GC pass that may delete objects older than cutoff_ms has begun
                              listing manifests for the last time (``.done`` appended: finished)
    gc/pin/<version:020d>.<token>  a checkpoint pinned this version, committed with this commit
                              token (rollback detection)
    epoch/<MAX-n:020d>        epoch n, created after any gc/ marker changes: a writer that
                              listed gc/ at epoch n and finds no epoch n+1 knows nothing changed
    refs/<name>               a sibling DB ``<name>`` may reference this DB's SSTs (silt.siblings)

Zero-padded versions sort lexicographically in the same order as numerically, so "latest version"
is one LIST of ``manifest/``.
"""

from __future__ import annotations

import os
import time

MANIFEST_PREFIX = "manifest/"
SST_PREFIX = "sst/"
COMPACTION_PREFIX = "compaction/"
CHECKPOINT_PREFIX = "checkpoint/"
GC_PREFIX = "gc/"
HORIZON_PREFIX = "gc/horizon/"
PASS_PREFIX = "gc/pass/"
PIN_PREFIX = "gc/pin/"
GRACE_PREFIX = "gc/grace/"
EPOCH_PREFIX = "epoch/"
FATE_SUFFIX = ".fate"
PASS_DONE_SUFFIX = ".done"
REFS_PREFIX = "refs/"
SST_SUFFIX = ".sst"
VERSION_DIGITS = 20
MAX_VERSION = 10**VERSION_DIGITS - 1

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def manifest_key(version: int) -> str:
    """Object name of the manifest of ``version``."""
    return f"{MANIFEST_PREFIX}{version:0{VERSION_DIGITS}d}"


def parse_manifest_key(key: str) -> int | None:
    """The version a manifest object name denotes, or ``None`` if it is not a manifest name."""
    if not key.startswith(MANIFEST_PREFIX):
        return None
    digits = key[len(MANIFEST_PREFIX):]
    if len(digits) != VERSION_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits)


def fate_key(version: int) -> str:
    """Object name of the fate record of ``version`` (withdrawn, or settled by a checkpoint)."""
    return manifest_key(version) + FATE_SUFFIX


def parse_fate_key(key: str) -> int | None:
    """The version a fate record's name denotes, or ``None`` if it is not a fate record name."""
    if not key.endswith(FATE_SUFFIX):
        return None
    return parse_manifest_key(key[:-len(FATE_SUFFIX)])


def sst_key(sst_id: str) -> str:
    """Object name of the SST ``sst_id``."""
    return f"{SST_PREFIX}{sst_id}{SST_SUFFIX}"


def refs_key(referrer: str) -> str:
    """Object name of the marker saying sibling DB ``referrer`` may reference this DB's SSTs."""
    return f"{REFS_PREFIX}{referrer}"


def parse_sst_key(key: str) -> str | None:
    """The SST id in an SST object name, or ``None``."""
    if key.startswith(SST_PREFIX) and key.endswith(SST_SUFFIX):
        return key[len(SST_PREFIX):-len(SST_SUFFIX)]
    return None


def compaction_key(record_id: str) -> str:
    """Object name of a compaction record."""
    return f"{COMPACTION_PREFIX}{record_id}"


def checkpoint_key(name: str) -> str:
    """Object name of the named checkpoint ``name``."""
    return f"{CHECKPOINT_PREFIX}{name}"


def horizon_key(version: int) -> str:
    """Object name of a GC horizon marker at ``version``."""
    return f"{HORIZON_PREFIX}{version:0{VERSION_DIGITS}d}"


def parse_horizon_key(key: str) -> int | None:
    return _parse_number(key, HORIZON_PREFIX)


def pass_key(cutoff_ms: int) -> str:
    """Object name of the marker of a GC pass whose deletion cutoff is ``cutoff_ms``."""
    return f"{PASS_PREFIX}{max(0, cutoff_ms):0{VERSION_DIGITS}d}"


def pass_done_key(cutoff_ms: int) -> str:
    """Object name of the marker saying the GC pass with ``cutoff_ms`` finished deleting."""
    return pass_key(cutoff_ms) + PASS_DONE_SUFFIX


def parse_pass_key(key: str) -> tuple[int, bool] | None:
    """``(cutoff_ms, done)`` for a pass marker's name, or ``None``."""
    done = key.endswith(PASS_DONE_SUFFIX)
    cutoff = _parse_number(key[:-len(PASS_DONE_SUFFIX)] if done else key, PASS_PREFIX)
    return None if cutoff is None else (cutoff, done)


def grace_key(grace_ms: int) -> str:
    """Object name of the marker saying a writer of this DB uses a GC grace of ``grace_ms``."""
    return f"{GRACE_PREFIX}{max(0, grace_ms):0{VERSION_DIGITS}d}"


def parse_grace_key(key: str) -> int | None:
    """The grace (ms) a writer grace marker's name denotes, or ``None``."""
    return _parse_number(key, GRACE_PREFIX)


def epoch_key(epoch: int) -> str:
    """Object name of GC marker epoch ``epoch`` (created after markers change). Numbered down
    from ``MAX_VERSION``, so the newest epoch is the first name a listing returns."""
    return f"{EPOCH_PREFIX}{MAX_VERSION - epoch:0{VERSION_DIGITS}d}"


def parse_epoch_key(key: str) -> int | None:
    n = _parse_number(key, EPOCH_PREFIX)
    return None if n is None else MAX_VERSION - n


def pin_key(version: int, token: str) -> str:
    """Object name of the marker saying a checkpoint pinned ``version`` whose manifest carries
    commit token ``token``."""
    return f"{PIN_PREFIX}{version:0{VERSION_DIGITS}d}.{token}"


def parse_pin_key(key: str) -> tuple[int, str] | None:
    """``(version, token)`` for a pin marker's name, or ``None``."""
    head, dot, token = key.partition(".")
    v = _parse_number(head, PIN_PREFIX)
    return None if v is None or not dot else (v, token)


def _parse_number(key: str, prefix: str) -> int | None:
    if not key.startswith(prefix):
        return None
    digits = key[len(prefix):]
    if len(digits) != VERSION_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits)


def new_id(now_ms: int | None = None, randbytes: bytes | None = None) -> str:
    """A new ULID: 48-bit millisecond time + 80 random bits, 26 Crockford base32 characters.

    Ids sort by creation time; 80 random bits make collisions between writers negligible (and a
    collision could not overwrite anything: SSTs are uploaded create-only by name, see db.py).
    """
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rnd = os.urandom(10) if randbytes is None else randbytes
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(rnd, "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def id_time_ms(ulid: str) -> int:
    """The creation time in milliseconds encoded in a ULID made by :func:`new_id`."""
    value = 0
    for ch in ulid[:10]:
        value = value * 32 + _CROCKFORD.index(ch)
    return value


#: The top-level folders of a DB: a key holding one of them after a ``/`` (or at its start)
#: belongs to the DB whose prefix comes before it.
DB_FOLDERS = (MANIFEST_PREFIX, SST_PREFIX, COMPACTION_PREFIX, CHECKPOINT_PREFIX, GC_PREFIX,
              REFS_PREFIX, EPOCH_PREFIX)


def split_db(key: str) -> tuple[str, str]:
    """``(db_prefix, rest)`` of an object name under a root that may hold several DBs (the
    shards of an operator, ``kg-0-63/manifest/...``): ``rest`` starts with one of a DB's
    folders; ``("", "")`` for a name that is not a DB's object."""
    for folder in DB_FOLDERS:
        if key.startswith(folder):
            return "", key
        i = key.find("/" + folder)
        if i >= 0:
            return key[:i + 1], key[i + 1:]
    return "", ""
