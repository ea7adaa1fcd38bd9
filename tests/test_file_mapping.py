"""The ``file://`` tier's memory maps (:mod:`silt.tiers.mapping`): block reads are copies out
of one read-only map of the SST, made once its size is checked (a file shrunk by damage is read
with ``pread``, never through the map: tests/test_mapped_damage.py); the map holds no
descriptor, is unmapped once the descriptor cache dropped it and no read uses it, nothing a
read returns keeps it, and maps can be turned off."""

from __future__ import annotations

import gc
import os
import pathlib

import pytest
import silt
from silt.errors import NotFoundError
from silt.tiers import fdcache, mapping
from silt.tiers.fdcache import FdCache
from silt.tiers.file import FileStore

pytestmark = pytest.mark.skipif(not mapping.ENABLED or mapping._LIBC is None
                                or not os.path.isdir("/proc/self/fd"),
                                reason="memory maps of files (Linux /proc to observe them)")


def mapped(path: pathlib.Path) -> int:
    """How many maps of ``path`` this process has (Linux /proc/self/maps)."""
    target = str(path.resolve())
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(target))


def descriptors(path: pathlib.Path) -> int:
    target = str(path.resolve())
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{name}") == target
        except OSError:
            pass
    return n


def test_direct_reads_are_copies_out_of_one_map(fds: FdCache, tmp_path: pathlib.Path) -> None:
    store = FileStore(tmp_path)
    data = os.urandom(50_000)
    store.put("sst/a", data)
    read = store.direct_reader("sst/a")
    assert read is not None
    first = read(0, 10)  # opens the descriptor (a pread: the first read of a file)
    assert first == data[:10]
    views = [read(start, length) for start, length in [(5, 100), (40_000, 9_000), (49_990, 100)]]
    assert all(type(v) is bytes for v in views)  # copies: nothing kept refers to the map
    assert [bytes(v) for v in views] == [data[5:105], data[40_000:49_000], data[49_990:]]
    assert read(60_000, 10) == b""  # past the end: empty, like get_range
    assert mapped(tmp_path / "sst" / "a") == 1


def test_a_map_holds_no_descriptor_and_goes_with_it(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path)
    data = os.urandom(20_000)
    store.put("sst/a", data)
    path = tmp_path / "sst" / "a"
    read = store.direct_reader("sst/a")
    assert read is not None
    read(0, 1)
    got = read(100, 8_000)
    assert mapped(path) == 1 and descriptors(path) == 1
    store.close()  # drops the descriptor and its map; what was read stays readable
    gc.collect()
    assert descriptors(path) == 0 and mapped(path) == 0
    assert got == data[100:8_100]


def test_a_map_of_a_file_deleted_in_this_process_is_not_read(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path)
    store.put("sst/a", b"x" * 10_000)
    read = store.direct_reader("sst/a")
    assert read is not None
    read(0, 1)
    assert bytes(read(0, 4)) == b"xxxx"
    store.delete_many(["sst/a"])
    with pytest.raises(NotFoundError):
        read(0, 4)


def test_maps_can_be_turned_off(fds: FdCache, tmp_path: pathlib.Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapping, "_LIBC", None)  # what SILT_FILE_MMAP=0 leaves
    store = FileStore(tmp_path)
    store.put("sst/a", b"abcdef" * 1000)
    read = store.direct_reader("sst/a")
    assert read is not None
    read(0, 1)
    got = read(6, 6)
    assert got == b"abcdef" and isinstance(got, bytes)
    assert mapped(tmp_path / "sst" / "a") == 0


@pytest.mark.parametrize(("value", "enabled"), [("0", False), ("off", False), ("False", False),
                                              ("1", True), ("yes", True)])
def test_the_environment_switch_is_read_at_import(value: str, enabled: bool) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "from silt.tiers import mapping; "
                          "print(mapping.ENABLED, mapping._LIBC is None)"],
                         env={**os.environ, "SILT_FILE_MMAP": value}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == [str(enabled), str(not enabled)]


def test_a_switch_value_it_cannot_read_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"SILT_FILE_MMAP='maybe'.*SILT_FILE_MMAP=0"):
        mapping._switch("maybe")


def test_a_db_reads_cached_blocks_from_the_map(tmp_path: pathlib.Path) -> None:
    url = (tmp_path / "db").as_uri()
    settings = silt.Settings(inline_delta_bytes=0)
    with silt.open(url, settings=settings) as db:
        for i in range(5_000):
            db.put(b"k%06d" % i, b"v" * 50)
        db.commit()
    with silt.open(url, settings=settings) as db:
        assert [db.get(b"k%06d" % i) for i in range(0, 5_000, 97)] == [b"v" * 50] * 52
        (sst,) = (tmp_path / "db" / "sst").iterdir()
        assert mapped(sst) == 1
    fdcache.FDS.clear()


def test_a_block_read_through_a_map_does_not_keep_it(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    from silt.sst import block as blk_mod

    keys = [b"key-%04d" % i for i in range(50)]
    framed = blk_mod.frame(blk_mod.encode_block_py(keys, keys), blk_mod.COMPRESSION_NONE)
    store = FileStore(tmp_path)
    store.put("sst/a", b"head" + framed)
    path = tmp_path / "sst" / "a"
    read = store.direct_reader("sst/a")
    assert read is not None
    read(0, 1)
    blk = blk_mod.decode_block(read(4, len(framed)), "sst/a", 4)
    store.close()
    gc.collect()
    # Under either twin: a cached block that read the map in place would touch it at every
    # later get, after any check, and a file shrunk meanwhile would kill the process.
    assert mapped(path) == 0
    assert [blk.get(k) for k in keys] == keys
