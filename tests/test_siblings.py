"""References to sibling DBs' SSTs (silt.siblings, DB.reference): rescaling without copying.

A new DB takes key ranges of its siblings' committed versions by reference; every read path
(get, multi_get, scan, compaction) must see exactly the referenced range, nested references
(a rescale of a rescale) must resolve to the objects' owners, and GC must never delete an SST
a sibling still references.
"""

from __future__ import annotations

import itertools
import random
import time

import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import paths
from silt.errors import FencedError, InvalidArgumentError, ReferenceConflict

SETTINGS = silt.Settings(
    memtable_bytes=16 * 1024, block_bytes=512, block_cache_bytes=64 * 1024,
    compaction="none",
)


def _gc_later(store_or_url, retain_versions: int = 1):
    """GC as if run once everything written so far is older than the writers' grace period
    (GC refuses a shorter grace than the one writers record in their manifests)."""
    from silt.gc import collect_garbage

    grace = silt.Settings().gc_grace_seconds
    later = silt.ManualClock(int(time.time() * 1000) + int(grace * 1000) + 1000)
    store = silt.open_store(store_or_url) if isinstance(store_or_url, str) else store_or_url
    try:
        return collect_garbage(store, retain_versions=retain_versions, grace_seconds=grace,
                               clock=later)
    finally:
        if isinstance(store_or_url, str):
            store.close()


def _key(i: int) -> bytes:
    return b"k%06d" % i


def _fill(url: str, rounds: int = 6, keys: int = 3000, seed: int = 1,
          inline: bool = True) -> dict[bytes, bytes]:
    """A source DB with L0 SSTs, levels, overwrites, deletes and a TTL'd key; returns its
    model (the live state). ``inline=False``: every commit uploads its delta."""
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    s = SETTINGS.replace(compaction="leveled", target_sst_bytes=8 * 1024, l0_compaction_trigger=3)
    if not inline:
        s = s.replace(inline_delta_bytes=0)
    with silt.open(url, settings=s) as db:
        for r in range(rounds):
            for _ in range(keys // rounds * 2):
                k = _key(rng.randrange(keys))
                if rng.random() < 0.15:
                    db.delete(k)
                    model.pop(k, None)
                else:
                    v = b"v%d-%d-" % (r, rng.randrange(10**6)) * rng.randrange(1, 4)
                    db.put(k, v)
                    model[k] = v
            db.commit()
            db.wait_for_compaction()
        db.put(b"k-ttl", b"lives", ttl=3600)
        model[b"k-ttl"] = b"lives"
        db.commit()
        db.wait_for_compaction()
        db.commit()
        stats = db.stats()
    if rounds >= 3:  # both shapes are exercised
        assert stats["l0_ssts"] >= 1 and any(stats["levels"]), stats
    return model


def _in(model: dict[bytes, bytes], start: bytes | None, end: bytes | None) -> dict[bytes, bytes]:
    return {k: v for k, v in model.items()
            if (start is None or k >= start) and (end is None or k < end)}


def _check(db: silt.DB, expected: dict[bytes, bytes], probe: list[bytes]) -> None:
    assert dict(db.scan()) == expected
    assert [db.get(k) for k in probe] == [expected.get(k) for k in probe]
    assert db.multi_get(probe) == [expected.get(k) for k in probe]


def _own_ssts(url: str) -> list[str]:
    store = silt.open_store(url)
    try:
        return [i.key for i in store.list(paths.SST_PREFIX)]
    finally:
        store.close()


def _probe_keys(n: int = 3000) -> list[bytes]:
    return [_key(i) for i in range(0, n, 7)] + [b"k-ttl", b"a", b"z", b"k"]


def test_reference_takes_a_range_without_writing_data(url):
    model = _fill(url + "/a")
    lo, hi = _key(700), _key(2100)
    with silt.open(url + "/a") as a, silt.open(url + "/b", settings=SETTINGS) as b:
        n = b.reference(a, lo, hi)
        assert n >= 2
        _check(b, _in(model, lo, hi), _probe_keys())  # visible before the commit
        assert b.commit() == 1
    assert _own_ssts(url + "/b") == []  # nothing copied
    with silt.open(url + "/b", settings=SETTINGS) as b:
        _check(b, _in(model, lo, hi), _probe_keys())
        ssts = list(b.manifest.all_ssts())
        assert ssts and all(s.db == "a" and s.clipped for s in ssts)
        assert all(lo <= s.smallest <= s.largest < hi for s in ssts)
        assert dict(b.scan(prefix=b"k001")) == _in(model, b"k001", b"k002")
        records = dict(b.committed_records())
        assert all(lo <= k < hi for k in records)  # tombstones too, but nothing outside
        assert {k: v for k, v in records.items() if v is not None} == _in(model, lo, hi)
        # writes on top of the referenced state are newer than it
        b.put(_key(800), b"new")
        b.delete(_key(801))
        b.commit()
    expected = _in(model, lo, hi)
    expected[_key(800)] = b"new"
    expected.pop(_key(801), None)
    with silt.open(url + "/b", settings=SETTINGS) as b:
        _check(b, expected, _probe_keys())


def test_open_ranges_and_ttl_survive(url):
    model = _fill(url + "/a", seed=2)
    with silt.open(url + "/a") as a, silt.open(url + "/lo", settings=SETTINGS) as low, \
            silt.open(url + "/hi", settings=SETTINGS) as high:
        low.reference(a, None, _key(1500))
        high.reference(a, _key(1500), None)
        low.commit()
        high.commit()
    with silt.open(url + "/lo") as low, silt.open(url + "/hi") as high:
        _check(low, _in(model, None, _key(1500)), _probe_keys())
        _check(high, _in(model, _key(1500), None), _probe_keys())
        assert low.get(b"k-ttl") == b"lives"  # b"k-" sorts before b"k0"


def test_compaction_rewrites_references_into_own_ssts(url):
    model = _fill(url + "/a", seed=3)
    lo, hi = _key(300), _key(2600)
    s = SETTINGS.replace(compaction="leveled", target_sst_bytes=8 * 1024, l0_compaction_trigger=2,
                         level1_bytes=8 * 1024)
    with silt.open(url + "/a") as a, silt.open(url + "/b", settings=s) as b:
        b.reference(a, lo, hi)
        b.commit()
        for i in range(30):
            b.put(_key(300 + i), b"x%d" % i)
            b.commit()
            b.wait_for_compaction()
        b.commit()
        kinds = {bool(x.db) for x in b.manifest.all_ssts()}
        expected = _in(model, lo, hi)
        expected.update({_key(300 + i): b"x%d" % i for i in range(30)})
        _check(b, expected, _probe_keys())
        assert False in kinds  # compaction wrote SSTs of b's own from referenced inputs
    assert _own_ssts(url + "/b")


def test_nested_references_resolve_to_the_owner(url):
    """4 -> 7 -> 2 in miniature: b1/b2 split a; c references both halves again."""
    model = _fill(url + "/a", seed=4)
    mid = _key(1234)
    with silt.open(url + "/a") as a:
        for name, rng in (("b1", (None, mid)), ("b2", (mid, None))):
            with silt.open(f"{url}/{name}", settings=SETTINGS) as b:
                b.reference(a, *rng)
                b.commit()
    with silt.open(url + "/b1") as b1, silt.open(url + "/b2") as b2, \
            silt.open(url + "/c", settings=SETTINGS) as c:
        c.reference(b1, _key(500), mid)
        c.reference(b2, mid, _key(2500))
        # before the commit too (the two references to a shared SST are unified in place)
        _check(c, _in(model, _key(500), _key(2500)), _probe_keys())
        c.commit()
        _check(c, _in(model, _key(500), _key(2500)), _probe_keys())
    with silt.open(url + "/c") as c:
        _check(c, _in(model, _key(500), _key(2500)), _probe_keys())
        ssts = list(c.manifest.all_ssts())
        assert {s.db for s in ssts} == {"a"}  # the owner, not the intermediate DBs
        assert len({s.id for s in ssts}) == len(ssts)  # a shared SST is listed once
    for name in ("b1", "b2", "c"):
        assert _own_ssts(f"{url}/{name}") == []


def test_bad_references_are_refused(url, tmp_path):
    _fill(url + "/a", rounds=2, keys=500)
    with silt.open(url + "/a") as a:
        with silt.open(url + "/b", settings=SETTINGS) as b:
            b.put(b"x", b"y")
            with pytest.raises(InvalidArgumentError, match="already has state"):
                b.reference(a)
        with silt.open(url + "/c", settings=SETTINGS) as c:
            c.reference(a, None, _key(100))
            with pytest.raises(ReferenceConflict, match="overlaps"):
                c.reference(a, _key(50), _key(200))
            with pytest.raises(InvalidArgumentError, match="empty range"):
                c.reference(a, _key(300), _key(200))
            with pytest.raises(TypeError, match=r"open silt\.DB"):
                c.reference("not a db")  # type: ignore[arg-type]
        other = (tmp_path / "elsewhere" / "d").as_uri()
        with silt.open(other, settings=SETTINGS) as d:
            with pytest.raises(InvalidArgumentError, match="not a sibling"):
                d.reference(a)
        with pytest.raises(InvalidArgumentError, match="itself"):
            a2 = silt.open(url + "/empty")
            try:
                a2.reference(silt.open(url + "/empty"))
            finally:
                a2.close()


def test_gc_of_the_parent_keeps_referenced_ssts_and_gc_of_the_source_keeps_all(url):
    model = _fill(url + "/a", seed=5)
    lo, hi = _key(100), _key(2900)
    with silt.open(url + "/a") as a, silt.open(url + "/b", settings=SETTINGS) as b:
        b.reference(a, lo, hi)
        b.commit()
        referenced = {paths.sst_key(s.id) for s in b.manifest.all_ssts()}
    # The source moves on: everything rewritten, older versions become collectable.
    s = SETTINGS.replace(compaction="leveled", target_sst_bytes=8 * 1024, l0_compaction_trigger=1,
                         level1_bytes=4 * 1024)
    with silt.open(url + "/a", settings=s) as a:
        for i in range(3000):
            a.put(_key(i), b"later")
        a.commit()
        a.wait_for_compaction()
        a.commit()
        # GC of the source alone cannot see b's manifests: it deletes no SST at all.
        report = _gc_later(a.store)
        assert report.deleted_manifests and not report.deleted_ssts
    assert referenced <= set(_own_ssts(url + "/a"))
    # GC of the parent sees b's references: it deletes a's old SSTs but not those.
    report = _gc_later(url)
    assert report.deleted_ssts
    left = set(_own_ssts(url + "/a"))
    assert referenced <= left
    assert not {k.split("/", 1)[1] for k in report.deleted_ssts} & referenced
    with silt.open(url + "/b") as b:
        _check(b, _in(model, lo, hi), _probe_keys())


def test_commit_is_withdrawn_when_gc_passed_the_source_version(url):
    _fill(url + "/a", rounds=2, keys=500, seed=6)
    with silt.open(url + "/a") as a, silt.open(url + "/b", settings=SETTINGS) as b:
        b.reference(a)
        with silt.open(url + "/a") as writer:
            for _ in range(3):
                writer.put(b"k000001", b"newer")
                writer.commit()
            _gc_later(writer.store)
        with pytest.raises(FencedError, match="garbage collection has passed"):
            b.commit()
    with silt.open(url + "/b") as b:
        assert b.version is None  # withdrawn


def test_manifest_with_references_is_format_2(url):
    _fill(url + "/a", rounds=1, keys=200, seed=7, inline=False)  # (inline deltas: format 5)
    with silt.open(url + "/a") as a, silt.open(url + "/b", settings=SETTINGS) as b:
        assert silt.open_store(url + "/a").get(paths.manifest_key(a.version))[12:16] == \
            b"\x01\x00\x00\x00"
        b.reference(a)
        b.commit()
    data = silt.open_store(url + "/b").get(paths.manifest_key(1))
    assert data[12:16] == b"\x02\x00\x00\x00"


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10**6),
    cuts1=st.lists(st.integers(1, 2999), min_size=1, max_size=5, unique=True),
    cuts2=st.lists(st.integers(1, 2999), min_size=1, max_size=4, unique=True),
)
def test_rescale_twice_keeps_every_key(tmp_path_factory, seed, cuts1, cuts2):
    """Split a source at random points, then regroup at other random points (each new DB
    references the previous generation's DBs overlapping its range): the union equals the
    source, whatever the shapes. A range that cannot be referenced must say so."""
    root = tmp_path_factory.mktemp("rescale").as_uri()
    model = _fill(root + "/g0", rounds=3, keys=3000, seed=seed)

    def ranges(cuts: list[int]) -> list[tuple[bytes | None, bytes | None]]:
        bounds = [None, *[_key(c) for c in sorted(cuts)], None]
        return list(itertools.pairwise(bounds))

    def overlap(a, b) -> tuple[bytes | None, bytes | None] | None:
        lo = a[0] if b[0] is None else b[0] if a[0] is None else max(a[0], b[0])
        hi = a[1] if b[1] is None else b[1] if a[1] is None else min(a[1], b[1])
        return None if lo is not None and hi is not None and lo >= hi else (lo, hi)

    previous = [("g0", (None, None))]
    for gen, cuts in ((1, cuts1), (2, cuts2)):
        current = []
        for j, rng in enumerate(ranges(cuts)):
            name = f"g{gen}-{j}"
            with silt.open(f"{root}/{name}", settings=SETTINGS) as db:
                for src_name, src_rng in previous:
                    part = overlap(rng, src_rng)
                    if part is None:
                        continue
                    with silt.open(f"{root}/{src_name}") as src:
                        db.reference(src, *part)
                assert dict(db.scan()) == _in(model, *rng)
                probe = [_key(i) for i in range(0, 3000, 37)]
                assert db.multi_get(probe) == [_in(model, *rng).get(k) for k in probe]
                db.commit()
            current.append((name, rng))
        previous = current
    union: dict[bytes, bytes] = {}
    for name, rng in previous:
        with silt.open(f"{root}/{name}") as db:
            got = dict(db.scan())
            assert got == _in(model, *rng)
            # Uploaded SSTs stay g0's, referenced; inline deltas were copied (silt.inline).
            assert all(s.db == "g0" or s.inline for s in db.manifest.all_ssts())
        union.update(got)
    assert union == model


def test_lost_response_of_a_referencing_commit_is_checked_against_the_source():
    """A first commit whose response was lost is resolved at the next commit; if GC of the
    source passed the referenced version meanwhile, the resolved version is withdrawn too."""
    import uuid

    from silt.errors import StoreError
    from silt.testing import FaultyStore
    from silt.tiers.memory import MemoryStore

    ns = f"lost-ref-{uuid.uuid4().hex}"
    try:
        with silt.open(f"memory://{ns}/a", settings=SETTINGS) as a:
            for i in range(200):
                a.put(_key(i), b"v")
            a.commit()
            faulty = FaultyStore(MemoryStore(f"{ns}/b"))
            b = silt.open(f"memory://{ns}/b", settings=SETTINGS, store=faulty)
            try:
                b.reference(a)
                faulty.lose_response_next(
                    "put_if_absent", predicate=lambda key: key.startswith("manifest/"),
                    error=StoreError,
                )
                with pytest.raises(StoreError):
                    b.commit()
                assert silt._list_versions(faulty) == [1]  # it landed
                for _ in range(3):
                    a.put(_key(1), b"newer")
                    a.commit()
                _gc_later(a.store)
                b.put(_key(5), b"x")
                with pytest.raises(FencedError, match="garbage collection has passed"):
                    b.commit()
                assert silt._list_versions(faulty) == []  # withdrawn
            finally:
                b.close()
    finally:
        MemoryStore.drop(ns)
