"""The per-call floor of ``DB.get``: below the memtable, a get makes no Python call of its own
when all below it is in SSTs (compiled: the one call into the compiled lookup), and a key
outside every SST's key range is answered by one range check, without looking at any SST.
Runs in both twins (the session's)."""

from __future__ import annotations

import random
from pathlib import Path

import silt
from pycalls import python_calls
from silt.sst import reader as reader_mod


def _db(tmp_path: Path, l0: int) -> tuple[silt.DB, list[bytes]]:
    s = silt.Settings(block_bytes=256, compaction="none")
    db = silt.open(tmp_path.as_uri(), settings=s)
    rnd = random.Random(3)
    keys = sorted({b"m" + rnd.randbytes(8) for _ in range(3000)})
    for i in range(l0):  # overlapping L0 SSTs, as a load leaves them
        part = keys[i::l0]
        db.put_many(part, [k[::-1] for k in part])
        db.flush()
    db.commit()
    return db, keys


class _Spy:
    """An SST's info whose every read is recorded."""

    def __init__(self, info: object, seen: list[str]) -> None:
        self._info, self._seen = info, seen

    def __getattr__(self, name: str) -> object:
        self._seen.append(name)
        return getattr(self._info, name)


def test_a_get_outside_every_sst_reads_none_of_them(tmp_path) -> None:
    """A key outside the SSTs' key range is answered by the view's bounds: no SST's key
    range, filter or index is looked at (six overlapping L0 SSTs were six range checks, and
    from four on their filters' lines were prefetched first)."""
    db, keys = _db(tmp_path, 6)
    try:
        assert db.stats()["l0_ssts"] == 6
        assert db.get(keys[0]) == keys[0][::-1]
        view = db._state.view
        assert view.bounds == (keys[0], keys[-1]) and view.plain
        seen: list[str] = []
        infos = [r.info for r in view.l0]
        for r in view.l0:
            r.info = _Spy(r.info, seen)
        try:
            for key in (b"", b"a", b"l\xff", b"m", b"n", b"\xff" * 10, keys[-1] + b"\x00"):
                assert db.get(key) is None
            assert seen == []
            assert db.get(keys[5]) == keys[5][::-1]  # inside: the SSTs are read
            assert seen
        finally:
            for r, info in zip(view.l0, infos):
                r.info = info
    finally:
        db.close()


def test_a_get_below_the_memtable_makes_no_python_call_of_its_own(tmp_path) -> None:
    """Compiled, ``DB.get`` is the only Python frame of a warm hit and of an absent key, inside
    the SSTs' range or outside it (the range-tombstone check was a Python ``__bool__`` per get);
    pure, the lookup's own functions, and none of the SSTs' for a key outside their range."""
    db, keys = _db(tmp_path, 3)
    try:
        for k in keys[:200]:
            db.get(k)  # warm
        compiled = reader_mod.COMPILED
        for key, want in ((keys[7], keys[7][::-1]), (b"m" + b"\x00" * 9, None),
                          (b"a", None), (b"z", None)):
            calls = python_calls(lambda key=key: db.get(key))
            assert db.get(key) == want
            ours = set(calls) - {("db.py", "get"), ("test_get_floor.py", "<lambda>")}
            if compiled:
                assert ours == set(), calls
            else:
                assert ("rangedel.py", "__bool__") not in calls
                if key in (b"a", b"z"):
                    assert ours == {("reader.py", "get_levels")}, calls
    finally:
        db.close()
