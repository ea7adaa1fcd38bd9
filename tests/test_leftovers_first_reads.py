"""A fresh handle's first reads wait, boundedly, for its search for leftover compactions
(silt.compaction.leftovers, "The first reads").

A writer loads four L0 SSTs, its compaction of them into L1 finishes, and it closes without a
commit (tests/test_leftovers.py's setup). The search of the handle opened afterwards is held up
here (it sleeps before it lists ``compaction/``), so that a read made right after open comes
before the search is done:

* the first ``get``, ``multi_get``, ``scan`` or ``multi_scan`` waits for it and reads the
  leftover's L1 run: none of the four L0 SSTs' tails is ever loaded (before, the first reads
  probed the four L0 SSTs, loading their tails and testing their filters);
* a search slower than the bound does not hold reads up longer than the bound: they read the
  opened tree, answer the same, and the search still shows the leftover afterwards;
* a key in the memtable is answered without waiting.

Run under both twins (``SILT_NO_EXTENSIONS=1`` for pure Python): the get path below the
memtable is the compiled one or the pure one.
"""

from __future__ import annotations

import threading
import time

import pytest
import silt
from silt.compaction import leftovers as leftovers_mod
from test_early_install import check_reads
from test_leftovers import SETTINGS, leave_a_compaction, root


def hold_up_the_search(m: pytest.MonkeyPatch, seconds: float) -> threading.Event:
    """Make the search sleep ``seconds`` (or until the DB closes) before it looks; the event
    is set once it starts looking."""
    real = leftovers_mod.find
    looking = threading.Event()

    def slow_find(store, known, now_ms, own_limit_ms, stop, make_reader):  # type: ignore[no-untyped-def]
        stop.wait(seconds)
        looking.set()
        return real(store, known, now_ms, own_limit_ms, stop, make_reader)

    m.setattr(leftovers_mod, "find", slow_find)
    return looking


def first_read(db: silt.DB, how: str, model: dict[bytes, bytes]) -> None:
    """One read of ``how`` kind, checked against ``model``."""
    keys = sorted(model)
    a, b = len(keys) // 4, len(keys) // 2
    if how == "get":
        assert db.get(keys[7]) == model[keys[7]]
    elif how == "multi_get":
        assert db.multi_get(keys[:50]) == [model[k] for k in keys[:50]]
    elif how == "scan":
        assert list(db.scan(keys[a], keys[b])) == [(k, model[k]) for k in keys[a:b]]
    else:
        got = db.multi_scan([(keys[3], keys[9]), (keys[20], keys[30])])
        assert got == [(k, model[k]) for k in keys[3:9] + keys[20:30]]


@pytest.mark.parametrize("how", ["get", "multi_get", "scan", "multi_scan"])
@pytest.mark.parametrize("tier", ["memory", "file"])
def test_the_first_read_waits_for_the_search_and_reads_the_leftover(
        tier: str, how: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = root(tier, tmp_path)
    model, _ = leave_a_compaction(url, 11)
    hold_up_the_search(monkeypatch, 0.3)
    with silt.open(url, settings=SETTINGS) as db:
        inputs = list(db.manifest.l0)
        readers = [db._state.reader(info) for info in inputs]
        assert len(readers) == 4 and all(r.loaded_tail is None for r in readers)
        first_read(db, how, model)
        # The read waited for the search: the view shows the leftover's run, and no L0 SST of
        # the opened version was probed (their tails were never loaded).
        assert [r.info.id for r in db._view.l0] == []
        assert all(r.loaded_tail is None for r in readers), [
            r.info.id for r in readers if r.loaded_tail is not None]
        stats = db.stats()
        assert stats["compactions_found"] == 1 and stats["read_amplification"] == 1
        check_reads(db, model)
        assert all(r.loaded_tail is None for r in readers)


@pytest.mark.parametrize("tier", ["memory", "file"])
def test_the_wait_is_bounded(tier: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = root(tier, tmp_path)
    model, _ = leave_a_compaction(url, 12)
    monkeypatch.setattr(leftovers_mod, "FIRST_READS_WAIT_SECONDS", 0.2)
    looking = hold_up_the_search(monkeypatch, 2.0)
    with silt.open(url, settings=SETTINGS) as db:
        t0 = time.monotonic()
        first_read(db, "get", model)
        first_read(db, "multi_get", model)
        waited = time.monotonic() - t0
        assert 0.15 <= waited < 1.5, waited  # the bound, once for all the reads
        assert not looking.is_set()
        assert len(db._view.l0) == 4  # the opened tree, read as before
        finder = db._rooms.leftovers
        assert finder.view_for_reads() is finder.view_for_reads()  # one copy, not one a read
        assert finder.view_for_reads().waits is None
        t0 = time.monotonic()
        check_reads(db, model)
        assert time.monotonic() - t0 < 1.5  # no wait past the bound
        assert db.wait_for_compaction(60)
        assert [r.info.id for r in db._view.l0] == []  # the search showed it after all
        check_reads(db, model)


def test_a_key_in_the_memtable_does_not_wait(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = root("file", tmp_path)
    leave_a_compaction(url, 13)
    hold_up_the_search(monkeypatch, 2.0)
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"fresh", b"1")
        t0 = time.monotonic()
        assert db.get(b"fresh") == b"1"
        assert time.monotonic() - t0 < 0.15
        assert len(db._view.l0) == 4

