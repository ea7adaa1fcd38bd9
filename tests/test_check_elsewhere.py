"""The compaction subprocess's check of an SST (silt.compaction.worker.check_elsewhere) says
what silt.sst.check.check_sst says in the writer's process: nothing for an intact SST, the
same CorruptionError (object name, offset, detail) for a damaged block, NotFoundError for a
missing object; the subprocess's reads are counted in the caller's metrics."""

from __future__ import annotations

import pytest
import silt
from silt import paths
from silt.compaction.worker import can_check_elsewhere, check_elsewhere
from silt.errors import CorruptionError, NotFoundError
from silt.metrics import MeteredStore, Metrics
from silt.sst.check import check_sst

SETTINGS = silt.Settings(block_bytes=256, compaction="none", inline_delta_bytes=0)


def an_sst(tmp_path) -> tuple[str, object, str]:
    """A ``file://`` root with one committed SST of 2,000 keys: its URL, its info and key."""
    url = (tmp_path / "root").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(2000):
            db.put(b"k%06d" % i, b"v" * (i % 37))
        db.commit()
        (info,) = db.manifest.l0
    return url, info, paths.sst_key(info.id)


def outcome(fn) -> tuple[str, object]:
    try:
        fn()
    except CorruptionError as exc:
        return "corrupt", (exc.object_name, exc.offset, exc.detail)
    except NotFoundError:
        return "missing", None
    return "ok", None


@pytest.mark.parametrize("damage", ["none", "block", "missing"])
def test_the_subprocess_check_says_what_check_sst_says(damage: str, tmp_path) -> None:
    url, info, key = an_sst(tmp_path)
    path = tmp_path / "root" / key
    if damage == "block":
        data = bytearray(path.read_bytes())
        data[info.tail_offset // 2] ^= 0xFF  # a data block, the tail intact
        path.write_bytes(bytes(data))
    elif damage == "missing":
        path.unlink()
    metrics = Metrics()
    store = MeteredStore(silt.open_store(url), metrics)
    try:
        assert can_check_elsewhere(store, silt.Clock())
        assert not can_check_elsewhere(store, silt.ManualClock(0))
        there = outcome(lambda: check_elsewhere(store, key, info, metrics))
        gets = metrics.requests[("read", "RANGE_GET")][0]
        here = outcome(lambda: check_sst(store, key, info, blocks=True))
    finally:
        store.close()
    assert there == here
    assert there[0] == {"none": "ok", "block": "corrupt", "missing": "missing"}[damage]
    if damage == "none":
        assert gets > 1  # the subprocess's reads (tail, every block), counted here
