"""A read view's point gets through its SSTs' kept handles (the compiled ``KeyBounds``).

``key_bounds`` (compiled) keeps, per SST of the view, what a get reads of it once its tail is
loaded (key range, filter, index, block cache keys), so that ``get_levels`` reads no Python
attribute of a reader per get. The answers are the pure twin's whatever the order in which
tails load, and a view whose levels are not the ones the bounds were made for is read as
before. The DB-level check runs under both twins.
"""

from __future__ import annotations

import os
import random

import pytest
import silt
from silt.record import MISSING
from silt.sst import builder as builder_mod
from silt.sst import reader as reader_mod


class _CountingReader:
    """An SstReader that counts the attributes read of it."""

    reads = 0

    def __init__(self, reader: object) -> None:
        object.__setattr__(self, "_reader", reader)

    def __getattr__(self, name: str) -> object:
        _CountingReader.reads += 1
        return getattr(self._reader, name)


def _view(rnd: random.Random, counting: bool) -> tuple[list, list, dict]:
    """Two overlapping L0 SSTs and two levels of three SSTs each, over random 4-byte keys, and
    the model of what a get answers (L0 newest first, then the levels in order)."""
    from silt.cache import BlockCache
    from silt.tiers.memory import MemoryStore
    from silt.view import Level

    store = MemoryStore()
    cache = BlockCache(1 << 22)
    s = silt.Settings(block_bytes=128, bloom_bits_per_key=10)
    names = iter(range(10**6))

    def reader(d: dict) -> object:
        name = f"sst{next(names)}"
        keys = sorted(d)
        data, info = builder_mod.build_sst(name, keys, [d[k] for k in keys], s)
        store.put(name, data)
        r = reader_mod.SstReader(store, name, info, cache)
        return _CountingReader(r) if counting else r

    def records(n: int, tag: bytes) -> dict:
        return {rnd.randbytes(4): rnd.choice([tag + rnd.randbytes(3), None]) for _ in range(n)}

    l0_dicts = [records(60, b"a"), records(60, b"b")]
    model: dict = {}
    levels = []
    for tag in (b"c", b"d"):
        union = records(300, tag)
        keys = sorted(union)
        pieces = [keys[i:i + 100] for i in range(0, len(keys), 100)]
        levels.append(Level([reader({k: union[k] for k in p}) for p in pieces]))
        for k, v in union.items():
            model.setdefault(k, v)
    for d in reversed(l0_dicts):
        model.update(d)
    return [reader(d) for d in l0_dicts], levels, model


def _compiled():
    """The compiled twin, when this run reads through it (its tails decoded by it too)."""
    from silt import _ext

    compiled = _ext.load()
    if compiled is None:
        pytest.skip("the pure-Python twin's run: its tails have no compiled filter or index")
    return compiled


def test_compiled_gets_read_no_reader_attribute_once_tails_are_loaded() -> None:
    C = _compiled()
    rnd = random.Random(3)
    l0, levels, model = _view(rnd, counting=True)
    bounds = C.key_bounds(l0, levels)
    probes = list(model) + [rnd.randbytes(4) for _ in range(300)]
    for key in probes:  # the first gets load the tails they reach
        assert C.get_levels(l0, levels, key, -1, bounds) == model.get(key, MISSING)
    for r in l0 + [r for level in levels for r in level.readers]:
        r.tail  # noqa: B018 - every tail loaded: no reader is left to its slow path
    _CountingReader.reads = 0
    cached = [key for key in probes if key in model]  # their blocks are all in the cache now
    for key in cached:
        assert C.get_levels(l0, levels, key, -1, bounds) == model[key]
    assert _CountingReader.reads == 0


def test_compiled_gets_through_kept_handles_answer_as_the_pure_twin() -> None:
    C = _compiled()
    rnd = random.Random(5)
    l0, levels, model = _view(rnd, counting=False)
    bounds = C.key_bounds(l0, levels)
    pure_bounds = reader_mod.key_bounds_py(l0, levels)
    probes = list(model) + [rnd.randbytes(4) for _ in range(300)]
    probes += [k[:3] for k in model] + [k + b"\x00" for k in model] + [b"", b"\xff" * 5]
    rnd.shuffle(probes)  # tails load in a random order, between gets through the handles
    for key in probes:
        want = reader_mod.get_levels_py(l0, levels, key, -1, pure_bounds)
        assert want == model.get(key, MISSING)
        assert C.get_levels(l0, levels, key, -1, bounds) == want
        assert C.get_levels(l0, list(levels), key, -1, bounds) == want  # not its levels
        assert C.get_levels(list(l0), levels, key, -1, bounds) == want  # not its L0


def test_compiled_misses_through_kept_handles_ask_for_the_direct_reader_once(tmp_path) -> None:
    """A block-cache miss through a kept handle reads with the reader's direct reader (the
    ``file://`` tier's), asked of the reader once per handle, not once per miss."""
    from silt.cache import BlockCache
    from silt.tiers.file import FileStore
    from silt.view import Level

    C = _compiled()
    rnd = random.Random(9)
    store = FileStore(str(tmp_path))
    cache = BlockCache(1 << 10)  # one block at most: nearly every get misses
    s = silt.Settings(block_bytes=128, bloom_bits_per_key=10)
    asked = []

    class Asking(_CountingReader):
        def __getattr__(self, name: str) -> object:
            if name == "direct_read":
                asked.append(name)
            return getattr(self._reader, name)

    model = {rnd.randbytes(4): rnd.randbytes(20) for _ in range(400)}
    keys = sorted(model)
    readers = []
    for n, part in enumerate((keys[:200], keys[200:])):
        data, info = builder_mod.build_sst(f"sst{n}", part, [model[k] for k in part], s)
        store.put(f"sst{n}", data)
        readers.append(Asking(reader_mod.SstReader(store, f"sst{n}", info, cache)))
    l0: list = []
    levels = [Level(readers)]
    bounds = C.key_bounds(l0, levels)
    for key in keys:  # loads both tails, makes both handles
        assert C.get_levels(l0, levels, key, -1, bounds) == model[key]
    misses, before = cache.misses, len(asked)
    for key in rnd.sample(keys, 200):
        assert C.get_levels(l0, levels, key, -1, bounds) == model[key]
    assert cache.misses - misses > 150
    assert len(asked) == before <= 2 * len(readers)


def test_db_gets_over_levels_and_l0_answer_the_model(tmp_path) -> None:
    """Both twins (the file runs under each): a DB's gets over L0 and levels, through views
    that change as compactions land, answer what was written."""
    rnd = random.Random(11)
    s = silt.Settings(block_bytes=256, memtable_bytes=16 << 10, bloom_bits_per_key=10)
    db = silt.open(f"file://{tmp_path}/db", settings=s)
    model: dict[bytes, bytes | None] = {}
    try:
        for round_ in range(6):
            for _ in range(800):
                k = rnd.randbytes(3)
                if rnd.random() < 0.1:
                    db.delete(k)
                    model[k] = None
                else:
                    v = rnd.randbytes(20) + bytes([round_])
                    db.put(k, v)
                    model[k] = v
            db.commit()
            for k in rnd.sample(sorted(model), 300) + [rnd.randbytes(3) for _ in range(100)]:
                assert db.get(k) == model.get(k)
        db.wait_for_compaction(60)
        db.commit()
        for k in model:
            assert db.get(k) == model[k]
            assert db.get(k) == model[k]  # again: through the view's kept handles
    finally:
        db.close()
    if os.environ.get("SILT_NO_EXTENSIONS"):
        from silt import db as db_mod
        assert db_mod.get_levels is reader_mod.get_levels_py
