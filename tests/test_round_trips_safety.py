"""The commit's concurrent rounds keep the GC protocol: a GC marker written at *any* point of a
writer's open and first two commits on a remote store (each request of them in turn: the open's
LISTs of the versions and of the GC epoch at once, then the manifest, its fate record and the
LIST of ``gc/`` at once; each commit's SST upload, manifest PUT and GET of the next GC epoch) is
seen by one of the commits.

The marker is written, with the epoch bump GC makes after it, just before the k-th request of
the open and the two commits reaches the store (:class:`silt.testing.FaultyStore`'s
``on_call``), for every k up to the last request of the second commit: a horizon above both
versions must fence one of them (:class:`~silt.errors.FencedError`), a running GC pass whose
cutoff is past their SSTs must withdraw one of them (:class:`~silt.errors.WithdrawnError`). The
open reads the markers (the epoch, then ``gc/``); each commit GETs the epoch after the one it
knows after its PUT, so a marker written after the open's listing of ``gc/`` is found by the
next commit's GET, and one written before it is in the listing or bumps an epoch after it. On
an empty root the open lists only the epoch, and the first commit lists ``gc/`` after its PUT.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import pytest
import silt
from silt import paths
from silt.errors import FencedError, WithdrawnError
from silt.markers import bump_epoch
from silt.plugins import open_store
from silt.testing import FaultyStore, LatencyStore

#: Every delta is an uploaded SST, so a GC pass's cutoff can reach it.
SETTINGS = silt.Settings(inline_delta_bytes=0, compaction="none")

#: Requests of the open (LIST manifest/ and LIST epoch/; the manifest, its fate record, LIST
#: gc/) and of the two commits (each: the SST, the PUT, the epoch GET; one LIST more when the
#: epoch moved). Before the open read the markers: the commits' 8 (the grace marker and the
#: SST, PUT + LIST epoch, LIST gc/; then the SST, the PUT, the epoch GET), the open not covered.
REQUESTS = 11

#: On an empty root: the open's LIST manifest/ and LIST epoch/; the first commit's grace marker,
#: SST, PUT, then LIST gc/ and LIST manifest/ (the epoch the open listed); the second's SST, PUT
#: and epoch GET.
EMPTY_ROOT_REQUESTS = 10


def _horizon(raw: silt.ObjectStore) -> None:
    raw.put_if_absent(paths.horizon_key(100), b"{}")


def _running_pass(raw: silt.ObjectStore) -> None:
    raw.put_if_absent(paths.pass_key(int(time.time() * 1000) + 3_600_000), b"")


#: A handle resumed from a handoff record (silt.handoff, its writer grace carried: no grace
#: marker before its first upload): each commit's SST, PUT and epoch GET.
HANDED_REQUESTS = 6


def _two_commits(k: int, marker, error: type[Exception], empty: bool,
                 handed: bool = False) -> int:
    """A cold handle's open and two commits, the marker written before the k-th request of them;
    returns which commit ``error`` stopped (checked against a fresh open). ``empty``: the root
    has no version before (the open lists the GC epoch but no markers). ``handed``: the handle
    is resumed from the record of the handle that committed version 1 (no request to open)."""
    url = f"memory://rt-safety-{uuid.uuid4().hex}"
    record = None
    if not empty:
        with silt.open(url, settings=SETTINGS) as first:
            first.put(b"a", b"0")
            assert first.commit() == 1
            record = first.handoff("q")
    raw = open_store(url)
    faulty = FaultyStore(raw)
    seen = itertools.count()
    fired = threading.Event()
    lock = threading.Lock()

    def hook(_op: str, _key: str) -> None:
        with lock:
            if next(seen) == k and not fired.is_set():
                marker(raw)
                bump_epoch(raw)
                fired.set()

    faulty.on_call("*", hook)
    if handed:
        db = silt.resume(url, record, 1, scope="q", store=LatencyStore(faulty, 0.02),
                         settings=SETTINGS)
    else:
        db = silt.open(url, store=LatencyStore(faulty, 0.02), settings=SETTINGS)
    stopped = None
    for n in (1, 2):
        db.put(b"a", b"%d" % n)
        try:
            db.commit()
        except error:
            stopped = n
            break
    db.close()
    assert fired.is_set(), k
    if handed:  # its grace came with the record: never announced again
        assert not any(call.key.startswith(paths.GRACE_PREFIX) for call in faulty.log), k
    assert stopped in (1, 2), (k, faulty.log)
    with silt.open(url) as fresh:  # the stopped commit never stands
        assert fresh.version == ((stopped - 1 or None) if empty else stopped), (k, fresh.version)
    return stopped


@pytest.mark.parametrize("empty", [False, True], ids=["root with a version", "empty root"])
@pytest.mark.parametrize(("marker", "error"), [(_horizon, FencedError),
                                              (_running_pass, WithdrawnError)])
def test_a_gc_marker_written_at_any_point_of_two_commits_stops_one_of_them(
        marker, error, empty: bool) -> None:
    requests = EMPTY_ROOT_REQUESTS if empty else REQUESTS
    outcomes = [_two_commits(k, marker, error, empty) for k in range(requests)]
    # both commits were reached: the marker landed before and after the first one's checks
    assert set(outcomes) == {1, 2}, outcomes


@pytest.mark.parametrize(("marker", "error"), [(_horizon, FencedError),
                                              (_running_pass, WithdrawnError)])
def test_a_gc_marker_written_at_any_point_of_a_handed_over_handles_commits_stops_one(
        marker, error) -> None:
    """The record carried the markers and the writer grace, so the resumed handle sends no
    request before its first upload: a marker written before any of its requests is still
    found by one of its commits' checks after the PUT (nothing carried lets it skip one)."""
    outcomes = [_two_commits(k, marker, error, False, handed=True)
                for k in range(HANDED_REQUESTS)]
    assert set(outcomes) == {1, 2}, outcomes
