"""Corruption is detected and reported with the object and offset, never returned as data.

Invariant 6 (docs/architecture.md). Every byte of a real SST in a ``file://`` root is damaged in
turn (data blocks, bloom filter, properties, index, footer); every read must either return the
correct value or raise ``CorruptionError`` naming the SST and the damaged region's offset. The
same for every byte of a manifest (on ``silt.open``), and for truncated objects.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
import silt
import sstparts
from silt import paths
from silt.errors import CorruptionError
from silt.sst.builder import SstInfo
from silt.sst.format import FOOTER, FOOTER_SIZE
from silt.sst.reader import SstReader, read_ranges
from silt.testing import FaultyStore
from silt.tiers.file import FileStore
from silt.tiers.memory import MemoryStore

# Damage to SST objects is the subject: commits upload their SSTs (no inline deltas).
SETTINGS = silt.Settings(memtable_bytes=1024 * 1024, block_bytes=200, block_cache_bytes=1 << 20,
                         inline_delta_bytes=0)


def make_root(root: Path, n: int = 40) -> dict[bytes, bytes]:
    """A root with one version holding one SST of ``n`` keys (several blocks), returns data."""
    rng = random.Random(n)
    data = {b"key-%03d" % i: rng.randbytes(rng.randint(0, 24)) + b"v%d" % i for i in range(n)}
    with silt.open(root.as_uri(), settings=SETTINGS) as db:
        for k, v in data.items():
            db.put(k, v)
        db.delete(b"key-gone")
        db.put(b"key-ttl", b"later", ttl=3600)
        assert db.commit() == 1
    data[b"key-ttl"] = b"later"
    return data


class Layout:
    """Where each region of the root's only SST lies."""

    def __init__(self, root: Path) -> None:
        store = FileStore(root)
        self.store = store
        self.manifest = silt.read_manifest(store, 1)
        (self.info,) = self.manifest.l0
        self.name = paths.sst_key(self.info.id)
        self.path = root / self.name
        self.size = self.path.stat().st_size
        assert self.size == self.info.size
        tail = SstReader(store, self.name, self.info, None).tail
        self.block_offsets = list(tail.block_offsets)
        self.block_sizes = list(tail.block_sizes)
        raw = self.path.read_bytes()
        (self.filter_off, _, self.props_off, _, self.index_off, _, _, _, _) = FOOTER.unpack_from(
            raw, self.size - FOOTER_SIZE
        )
        self.footer_off = self.size - FOOTER_SIZE
        assert self.info.tail_offset == self.filter_off
        assert len(self.block_offsets) >= 4, "the test needs an SST with several data blocks"
        assert self.filter_off < self.props_off < self.index_off < self.footer_off

    def region(self, offset: int) -> tuple[str, int | None]:
        """(region name, data block index or None) of a byte offset."""
        for i, (start, length) in enumerate(zip(self.block_offsets, self.block_sizes)):
            if start <= offset < start + length:
                return "data", i
        if offset < self.props_off:
            return "filter", None
        if offset < self.index_off:
            return "properties", None
        if offset < self.footer_off:
            return "index", None
        return "footer", None

    def expected_offsets(self, offset: int) -> set[int]:
        kind, block = self.region(offset)
        if kind == "data":
            return {self.block_offsets[block]}  # type: ignore[index]
        if kind == "filter":
            return {self.filter_off}
        if kind == "properties":
            return {self.props_off}
        if kind == "index":
            return {self.index_off}
        return {self.footer_off, self.size - 8}  # footer checksum, or the magic number

    def block_keys(self, block: int) -> set[bytes]:
        reader = SstReader(self.store, self.name, self.info, None)
        return set(reader.block(block, fill_cache=False).keys)


def check_error(exc: CorruptionError, name: str, size: int, offsets: set[int] | None) -> None:
    assert isinstance(exc, silt.SiltError)
    assert exc.object_name == name
    assert exc.offset is not None
    assert 0 <= exc.offset < max(size, 1)
    if offsets is not None:
        assert exc.offset in offsets, (exc.offset, offsets, str(exc))
    assert name in str(exc)


def flip(path: Path, offset: int, mask: int) -> bytes:
    raw = path.read_bytes()
    damaged = bytearray(raw)
    damaged[offset] ^= mask
    path.write_bytes(bytes(damaged))
    return raw


@pytest.fixture
def sst_root(tmp_path: Path) -> tuple[Path, dict[bytes, bytes], Layout]:
    root = tmp_path / "root"
    data = make_root(root)
    return root, data, Layout(root)


def test_every_damaged_sst_byte_is_detected(sst_root) -> None:
    root, data, layout = sst_root
    url = root.as_uri()
    keys = sorted(data)
    seen_regions: set[str] = set()
    block_keys = {i: layout.block_keys(i) for i in range(len(layout.block_offsets))}
    for offset in range(layout.size):
        kind, block = layout.region(offset)
        seen_regions.add(kind)
        expected_offsets = layout.expected_offsets(offset)
        mask = 1 << (offset % 8) if offset % 3 else 0xFF
        original = flip(layout.path, offset, mask)
        try:
            with silt.open(url, settings=SETTINGS) as db:
                failed = 0
                for key in keys:
                    try:
                        value = db.get(key)
                    except CorruptionError as exc:
                        check_error(exc, layout.name, layout.size, expected_offsets)
                        failed += 1
                        if kind == "data":
                            assert key in block_keys[block]  # type: ignore[index]
                    else:
                        assert value == data[key], f"wrong value for {key!r}, flip at {offset}"
                        if kind == "data":
                            assert key not in block_keys[block]  # type: ignore[index]
                assert failed, f"a flip at {offset} ({kind}) went unnoticed by get"
                try:
                    got = db.multi_get([*keys, b"key-gone"])
                except CorruptionError as exc:
                    check_error(exc, layout.name, layout.size, expected_offsets)
                else:
                    raise AssertionError(f"multi_get read every block despite a flip at {offset}")
                with pytest.raises(CorruptionError) as info:
                    list(db.scan())
                check_error(info.value, layout.name, layout.size, expected_offsets)
                with pytest.raises(CorruptionError) as info:
                    SstReader(FileStore(root), layout.name, layout.info, None).verify()
                check_error(info.value, layout.name, layout.size, expected_offsets)
                # A scan that ends inside the blocks before a damaged one still works (the index
                # tells the reader it need not look further).
                if kind == "data" and block:
                    end = max(block_keys[block - 1])  # type: ignore[operator]
                    got = list(db.scan(None, end))
                    assert got == [(k, data[k]) for k in keys if k < end]
        finally:
            layout.path.write_bytes(original)
    assert seen_regions == {"data", "filter", "properties", "index", "footer"}
    with silt.open(url, settings=SETTINGS) as db:  # restored: everything reads again
        assert dict(db.scan()) == data


def test_verify_without_manifest_info_detects_damage(sst_root) -> None:
    """``SstReader`` built from a listing (no SstInfo), as ``silt verify`` of stray files does."""
    root, _data, layout = sst_root
    store = FileStore(root)
    assert SstReader(store, layout.name, None, None, size=layout.size).verify() == 42
    for offset in range(0, layout.size, 7):
        original = flip(layout.path, offset, 0x10)
        try:
            with pytest.raises(CorruptionError) as info:
                SstReader(store, layout.name, None, None, size=layout.size).verify()
            check_error(info.value, layout.name, layout.size, layout.expected_offsets(offset))
        finally:
            layout.path.write_bytes(original)


def test_truncated_sst_is_detected(sst_root) -> None:
    root, data, layout = sst_root
    original = layout.path.read_bytes()
    size = layout.size
    lengths = sorted({0, 1, 8, FOOTER_SIZE - 1, FOOTER_SIZE, layout.block_offsets[1],
                      layout.filter_off, layout.filter_off + 1, layout.index_off, size // 2,
                      size - FOOTER_SIZE, size - 9, size - 8, size - 1})
    try:
        for length in lengths:
            layout.path.write_bytes(original[:length])
            with silt.open(root.as_uri(), settings=SETTINGS) as db:
                with pytest.raises(CorruptionError) as info:
                    db.get(b"key-000")
                check_error(info.value, layout.name, size, None)
                with pytest.raises(CorruptionError) as info:
                    db.multi_get(sorted(data))
                check_error(info.value, layout.name, size, None)
                with pytest.raises(CorruptionError) as info:
                    list(db.scan())
                check_error(info.value, layout.name, size, None)
            with pytest.raises(CorruptionError) as info:
                SstReader(FileStore(root), layout.name, layout.info, None).verify()
            check_error(info.value, layout.name, size, None)
            with pytest.raises(CorruptionError) as info:
                SstReader(FileStore(root), layout.name, None, None, size=length).verify()
            check_error(info.value, layout.name, length, None)
    finally:
        layout.path.write_bytes(original)


def manifest_path(root: Path, version: int) -> Path:
    return root / paths.manifest_key(version)


def test_every_damaged_manifest_byte_is_detected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    url = root.as_uri()
    make_root(root)
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"second", b"2")
        db.commit(meta={"query": "q-1"})
    name = paths.manifest_key(2)
    path = manifest_path(root, 2)
    raw = path.read_bytes()
    for offset in range(len(raw)):
        flip(path, offset, 1 << (offset % 8))
        try:
            for version in (None, 2):
                with pytest.raises(CorruptionError) as info:
                    silt.open(url, version=version)
                check_error(info.value, name, len(raw), None)
            # An older version does not depend on the damaged manifest.
            with silt.open(url, version=1) as db:
                assert db.get(b"key-000") is not None
                assert db.get(b"second") is None
        finally:
            path.write_bytes(raw)
    with silt.open(url) as db:
        assert db.get(b"second") == b"2"
        assert db.meta == {"query": "q-1"}


def test_truncated_manifest_is_detected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    url = root.as_uri()
    make_root(root)
    name = paths.manifest_key(1)
    path = manifest_path(root, 1)
    raw = path.read_bytes()
    for length in sorted({0, 1, 7, 8, 11, 12, 13, 16, len(raw) // 2, len(raw) - 1}):
        path.write_bytes(raw[:length])
        with pytest.raises(CorruptionError) as info:
            silt.open(url)
        check_error(info.value, name, max(length, 1), None)
        with pytest.raises(CorruptionError):
            silt.read_manifest(FileStore(root), 1)
    path.write_bytes(raw)
    with silt.open(url) as db:
        assert db.get(b"key-000") is not None


def test_corrupted_reads_on_memory_tier(small: silt.Settings) -> None:
    """Damage in transit (not at rest) is caught the same way, on any tier."""
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        for i in range(3000):
            db.put(b"k%05d" % i, b"v%d" % i)
        db.commit()
    faulty.corrupt_reads(lambda k: k.startswith(paths.SST_PREFIX))
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        for key in (b"k00000", b"k01500", b"k02999"):
            with pytest.raises(CorruptionError) as info:
                db.get(key)
            assert info.value.object_name.startswith(paths.SST_PREFIX)
            assert info.value.offset is not None
        with pytest.raises(CorruptionError):
            db.multi_get([b"k00001", b"k02000"])
        with pytest.raises(CorruptionError):
            list(db.scan())
    faulty.clear_faults()
    faulty.corrupt_reads(lambda k: k.startswith(paths.MANIFEST_PREFIX), times=1)
    with pytest.raises(CorruptionError) as info:
        silt.open("memory://unused", store=faulty)
    assert info.value.object_name == paths.manifest_key(1)
    with silt.open("memory://unused", store=faulty) as db:  # the stored bytes were fine
        assert db.get(b"k01234") == b"v1234"


# --- crafted metadata: valid checksums around impossible values ---------------------------------


@pytest.mark.parametrize("size", [2**40, 2**62, 2**63 - 1, 2**63, 2**64 + 1])
def test_crafted_sst_sizes_in_a_manifest_are_corruption(url: str, size: int) -> None:
    """An SST size of 2^40 or 2^63 in a (re-checksummed) manifest used to give MemoryError or
    OverflowError in get, scan and multi_get on file://; now every read is a CorruptionError
    after reading no more than the tail's usual size, and a size beyond what any object can
    have is refused when the manifest is decoded."""
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(50):
            db.put(b"key-%03d" % i, b"v%d" % i)
        db.commit()
    store = silt.open_store(url)
    try:
        m = silt.read_manifest(store, 1)
        crafted = replace(m, version=2, parent=1,
                          l0=tuple(replace(s, size=size, tail_offset=s.tail_offset)
                                   for s in m.l0))
        store.put(paths.manifest_key(2), crafted.encode())
        if size > 2**63 - 1:
            with pytest.raises(CorruptionError, match=r"'size' is \d+, outside 52\.\.\d+"):
                silt.open(url)
            with pytest.raises(CorruptionError):
                silt.read_manifest(store, 2)
            return
        with silt.open(url) as db:
            for read in (lambda: db.get(b"key-007"), lambda: list(db.scan()),
                         lambda: db.multi_get([b"key-001", b"key-040"]),
                         lambda: list(db.scan(prefix=b"key-01"))):
                with pytest.raises(CorruptionError) as info:
                    read()
                assert info.value.object_name.startswith(paths.SST_PREFIX)
                assert f"object is shorter than its {size} bytes" in str(info.value)
        with silt.open(url, version=1) as db:  # the honest version still reads
            assert db.get(b"key-007") == b"v7"
    finally:
        store.close()


def test_crafted_sst_tails_and_blocks_are_corruption(sst_root) -> None:
    """Offsets beyond the object, counts that would allocate gigabytes, a bloom filter, index
    or properties block that cannot be what the writer wrote, a decompressed size no lz4 stream
    can have: every read of such an SST is a CorruptionError naming it (behind valid checksums,
    the structural checks are what catches them), through the file:// tier."""
    _, _, layout = sst_root
    store = layout.store
    raw = layout.path.read_bytes()
    for case, (data, tail_is_bad) in sstparts.crafted_variants(raw).items():
        name = "sst/crafted.sst"
        store.put(name, data)
        filter_off = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)[0]
        infos: list[SstInfo | None] = [None]
        if 0 <= filter_off <= len(data) - FOOTER_SIZE:
            infos.append(replace(layout.info, id="crafted", size=len(data),
                                 tail_offset=filter_off))
        for info in infos:
            reader = SstReader(store, name, info, None, size=len(data))
            with pytest.raises(CorruptionError) as exc_info:
                reader.verify()
            assert exc_info.value.object_name == name, case
            reader = SstReader(store, name, info, None, size=len(data))
            with pytest.raises(CorruptionError):
                list(reader.iter_range(None, None))
            if tail_is_bad:
                reader = SstReader(store, name, info, None, size=len(data))
                with pytest.raises(CorruptionError):
                    reader.get(b"key-001")
        if tail_is_bad:
            with pytest.raises(CorruptionError):
                read_ranges(data, name)
        store.delete_many([name])
    # The untouched SST still reads: the helpers themselves change nothing.
    assert sstparts.join(sstparts.split(raw)) == raw
