"""Inline deltas (silt.inline): a small commit carries its SST inside the manifest.

One PUT per small commit; a big delta, the byte cap or the entry cap folds every inline delta
with the delta into one uploaded SST; reads, reopen, references, GC, verify and the format
handle them."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import paths
from silt.cost import recorded_requests
from silt.errors import CorruptionError, InvalidArgumentError
from silt.framing import decode_framed, encode_framed
from silt.manifest import MANIFEST_MAGIC, Manifest
from silt.sst.reader import SstReader

SETTINGS = silt.Settings(memtable_bytes=1 << 20, block_bytes=256, compaction="none",
                         inline_delta_bytes=4096, inline_max_bytes=16384,
                         inline_max_entries=8)


def _store(url: str) -> silt.ObjectStore:
    return silt.open_store(url)


def _ssts(url: str) -> set[str]:
    store = _store(url)
    try:
        return {i.key for i in store.list(paths.SST_PREFIX)}
    finally:
        store.close()


def _sst_keys(url: str, name: str) -> set[bytes]:
    store = _store(url)
    try:
        size = next(i.size for i in store.list(name) if i.key == name)
        return {k for k, _ in SstReader(store, name, None, None, size=size).iter_range(None, None)}
    finally:
        store.close()


def test_a_small_commit_is_one_put_and_no_sst(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"a", b"1")
        db.commit()
        for v in range(3):
            db.put(b"k%d" % v, b"v" * 50)
            db.commit()
        m = db.manifest
        assert m is not None
        # Every commit after the first (warm) paid exactly one PUT: its manifest.
        assert recorded_requests(m.meta)["PUT"] == 1
        assert [s.inline for s in m.l0] == [True] * 4
        assert set(m.inline) == {s.id for s in m.l0}
    assert _ssts(url) == set()  # nothing was uploaded but manifests
    raw = _store(url).get(paths.manifest_key(4))
    assert raw[:8] == MANIFEST_MAGIC and raw[12:16] == b"\x05\x00\x00\x00"
    with silt.open(url, settings=SETTINGS) as db:
        assert db.get(b"a") == b"1"
        assert db.multi_get([b"k0", b"k2", b"zz"]) == [b"v" * 50, b"v" * 50, None]
        assert [k for k, _ in db.scan()] == [b"a", b"k0", b"k1", b"k2"]
    with silt.open(url, version=2, settings=SETTINGS) as db:
        assert dict(db.scan()) == {b"a": b"1", b"k0": b"v" * 50}


def test_a_big_delta_folds_the_inline_deltas_into_its_one_sst(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"small", b"1")
        db.commit()
        db.put(b"small", b"2")
        db.put(b"gone", b"x")
        db.commit()
        db.delete(b"gone")
        for i in range(2000):
            db.put(b"big%05d" % i, b"%d" % (i * 7919))
        db.commit()
        m = db.manifest
        assert m is not None and not m.inline and not any(s.inline for s in m.l0)
        assert len(m.l0) == 1
        # one SST, one manifest, and before this handle's first upload its grace (silt.graces)
        assert recorded_requests(m.meta)["PUT"] == 3
    (name,) = _ssts(url)
    # The one SST holds the delta and both inline deltas (newest record of each key).
    assert _sst_keys(url, name) == {b"small", b"gone"} | {b"big%05d" % i for i in range(2000)}
    with silt.open(url, settings=SETTINGS) as db:
        assert db.get(b"small") == b"2" and db.get(b"gone") is None
        assert db.get(b"big01999") == b"%d" % (1999 * 7919)


@pytest.mark.parametrize("changes", [{"inline_max_bytes": 2000}, {"inline_max_entries": 3}])
def test_a_cap_folds_the_inline_deltas(tmp_path, changes) -> None:
    url = (tmp_path / "db").as_uri()
    s = SETTINGS.replace(**changes)
    model = {}
    folds = 0
    with silt.open(url, settings=s) as db:
        for v in range(12):
            for i in range(8):
                key = b"k%02d-%d" % (v, i)
                db.put(key, b"value-%d" % v)
                model[key] = b"value-%d" % v
            before = len(_ssts(url))
            db.commit()
            m = db.manifest
            assert m is not None
            inline = m.inline_entries
            assert sum(x.size for x in inline) <= s.inline_max_bytes
            assert len(inline) <= s.inline_max_entries
            if len(_ssts(url)) > before:
                folds += 1
                # The fold uploaded one SST holding every delta since the previous fold (the
                # handle's first upload announced its GC grace first: silt.graces).
                assert len(inline) == 0
                assert recorded_requests(m.meta)["PUT"] == (3 if folds == 1 else 2)
            else:
                assert recorded_requests(m.meta)["PUT"] == 1
        assert folds >= 2
        assert dict(db.scan()) == model
    with silt.open(url, settings=s) as db:
        assert dict(db.scan()) == model


def test_range_deletes_over_inline_deltas_survive_the_fold(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"old")
        db.commit()  # uploaded? no: inline (small)
        db.delete_range(b"k05", b"k10")
        db.put(b"k07", b"new")
        db.commit()
        expect = {b"k%02d" % i: b"old" for i in range(20) if not 5 <= i < 10}
        expect[b"k07"] = b"new"
        assert dict(db.scan()) == expect
        db.put(b"x", b"y" * 20000)  # not small: folds both inline deltas
        db.commit()
        expect[b"x"] = b"y" * 20000
        assert not db.manifest.inline  # type: ignore[union-attr]
        assert dict(db.scan()) == expect
        assert db.multi_get([b"k06", b"k07", b"k11"]) == [None, b"new", b"old"]
    with silt.open(url, settings=SETTINGS) as db:
        assert dict(db.scan()) == expect


def test_an_uploaded_flush_folds_the_inline_deltas_below_it(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"a", b"1")
        db.commit()
        db.put(b"a", b"2")
        db.flush()  # this delta is uploaded before the commit
        db.put(b"b", b"3")
        db.commit()
        m = db.manifest
        assert m is not None and not m.inline
        assert db.get(b"a") == b"2" and db.get(b"b") == b"3"
    with silt.open(url, settings=SETTINGS) as db:
        assert dict(db.scan()) == {b"a": b"2", b"b": b"3"}


def test_a_failed_commit_keeps_its_inline_delta_for_the_next(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"base", b"1")
        db.commit()
    a = silt.open(url, settings=SETTINGS)
    b = silt.open(url, settings=SETTINGS)
    try:
        a.put(b"a", b"1")
        a.commit()
        b.put(b"b", b"1")
        with pytest.raises(silt.CommitConflict):
            b.commit()
        assert b.get(b"b") == b"1"  # still pending, readable
        with pytest.raises(silt.CommitConflict):
            b.commit()
    finally:
        a.close()
        b.close()
    with silt.open(url, settings=SETTINGS) as db:
        assert dict(db.scan()) == {b"base": b"1", b"a": b"1"}


def test_gc_never_expects_nor_deletes_inline_deltas(tmp_path) -> None:
    clock = silt.ManualClock(1_700_000_000_000)
    url = (tmp_path / "db").as_uri()
    s = SETTINGS.replace(retain_versions=1, gc_grace_seconds=10)
    with silt.open(url, settings=s, clock=clock) as db:
        db.put(b"up", b"x" * 20000)
        db.commit()  # uploaded
        for v in range(3):
            db.put(b"k%d" % v, b"v")
            db.commit()  # inline
        clock.advance(60)
        report = db.gc()
        assert report.deleted_ssts == []  # the uploaded SST is still referenced
        assert report.horizons == {"": db.version}  # the inline-only versions are intact
        assert len(db.manifest.inline_entries) == 3  # type: ignore[union-attr]
    with silt.open(url, settings=s) as db:
        assert dict(db.scan()) == {b"up": b"x" * 20000, b"k0": b"v", b"k1": b"v", b"k2": b"v"}
        assert silt.verify(url).ok


def _corrupt_inline(url: str, version: int) -> None:
    """Rewrite manifest ``version`` with one byte of its first inline SST's first block
    flipped and a valid frame checksum (damage the manifest's CRC cannot see)."""
    store = _store(url)
    name = paths.manifest_key(version)
    m = Manifest.decode(store.get(name), name)
    sst = m.inline_entries[0]
    data = bytearray(m.inline[sst.id])
    data[10] ^= 0x40
    bad = Manifest(**{**m.__dict__, "inline": {**m.inline, sst.id: bytes(data)}})
    store.delete_many([name])
    store.put(name, bad.encode())
    store.close()


def test_verify_checks_inline_bytes_and_names_the_manifest(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(40):
            db.put(b"k%03d" % i, b"value-%d" % i)
        v = db.commit()
    assert silt.verify(url).ok
    assert silt.verify(url).counts["inline_ssts"] == 1
    _corrupt_inline(url, v)
    report = silt.verify(url)
    assert not report.ok
    (problem,) = report.problems
    assert problem.kind == "corruption" and problem.object == paths.manifest_key(v)
    assert "inline SST" in problem.message
    with silt.open(url, settings=SETTINGS) as db, pytest.raises(CorruptionError) as info:
        dict(db.scan())
    assert paths.manifest_key(v) in str(info.value)
    # A damaged byte anywhere in the stored manifest fails its checksum.
    store = _store(url)
    raw = bytearray(store.get(paths.manifest_key(v)))
    raw[-5] ^= 1
    with pytest.raises(CorruptionError, match="checksum"):
        Manifest.decode(bytes(raw), paths.manifest_key(v))
    store.close()


def test_a_reader_of_formats_1_to_4_refuses_format_5() -> None:
    with silt.open(f"memory://inline-fmt-{uuid.uuid4().hex}", settings=SETTINGS) as db:
        db.put(b"k", b"v")
        db.commit()
        m = db.manifest  # type: ignore[assignment]
    data = m.encode()
    with pytest.raises(CorruptionError, match="format 5 is not readable"):
        decode_framed(data, "manifest/x", magic=MANIFEST_MAGIC, formats={1, 2, 3, 4},
                      what="manifest")
    assert Manifest.decode(data, "manifest/x") == m


@pytest.mark.parametrize("damage", ["truncated", "extra", "format4", "not_head"])
def test_crafted_inline_entries_are_corruption(damage: str) -> None:
    with silt.open(f"memory://inline-crafted-{uuid.uuid4().hex}", settings=SETTINGS) as db:
        db.put(b"k", b"v")
        db.commit()
        db.put(b"j", b"w")
        db.commit()
        m = db.manifest
    assert m is not None and len(m.inline_entries) == 2
    first, second = m.l0
    if damage == "truncated":
        cut = m.inline[second.id][:-1]
        bad = Manifest(**{**m.__dict__, "inline": {**m.inline, second.id: cut}})
    elif damage == "extra":
        more = m.inline[second.id] + b"x"
        bad = Manifest(**{**m.__dict__, "inline": {**m.inline, second.id: more}})
    elif damage == "format4":
        bad = None
    else:
        up = replace(first, inline=False)
        bad = Manifest(**{**m.__dict__, "l0": (up, second)})
    if bad is not None:
        data = bad.encode()
    else:
        raw = m.encode()  # format 5: the body's length, the body, then the inline bytes
        body = json.loads(raw[20:20 + int.from_bytes(raw[16:20], "little")])
        data = encode_framed(MANIFEST_MAGIC, 4, body)  # inline entries without their bytes
    with pytest.raises(CorruptionError):
        Manifest.decode(data, "manifest/x")


def test_a_reference_copies_the_sources_inline_deltas(tmp_path) -> None:
    root = (tmp_path / "op").as_uri()
    with silt.open(f"{root}/a", settings=SETTINGS) as a:
        for i in range(30):
            a.put(b"k%02d" % i, b"a-%d" % i)
        a.commit()
        a.put(b"k03", b"newer")
        a.commit()
        assert len(a.manifest.inline_entries) == 2  # type: ignore[union-attr]
        with silt.open(f"{root}/b", settings=SETTINGS) as b:
            b.reference(a, None, b"k10")
            b.commit()
            m = b.manifest
            assert m is not None and all(s.inline and not s.db for s in m.l0)
            assert all(s.clipped for s in m.l0)
    expect = {b"k%02d" % i: b"a-%d" % i for i in range(10)}
    expect[b"k03"] = b"newer"
    # The source's manifests are gone: the copies in b's manifest are all b needs.
    store = _store(f"{root}/a")
    store.delete_many([i.key for i in store.list("")])
    store.close()
    with silt.open(f"{root}/b", settings=SETTINGS) as b:
        assert dict(b.scan()) == expect
        assert b.get(b"k20") is None
    assert silt.verify(f"{root}/b").ok


def test_compaction_policies_never_pick_inline_deltas(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    s = SETTINGS.replace(compaction="leveled", compaction_mode="thread", l0_compaction_trigger=1,
                         inline_max_entries=3)
    model = {}
    with silt.open(url, settings=s) as db:
        for v in range(15):
            for i in range(10):
                key = b"k%03d" % ((v * 7 + i * 13) % 50)
                model[key] = b"%d-%d" % (v, i)
                db.put(key, model[key])
            db.commit()
            db.wait_for_compaction()
            m = db.manifest
            assert m is not None
            assert all(not s.inline for s in m.l0[len(m.inline_entries):])
        db.commit()
        assert db.stats()["compactions_adopted"] > 0
        assert dict(db.scan()) == model


def test_inline_settings_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="inline_delta_bytes"):
        silt.Settings(inline_delta_bytes=-1)
    with pytest.raises(InvalidArgumentError, match="inline_max_entries"):
        silt.Settings(inline_max_entries=0)
    off = silt.Settings(inline_delta_bytes=0)
    with silt.open(f"memory://inline-off-{uuid.uuid4().hex}", settings=off) as db:
        db.put(b"k", b"v")
        db.commit()
        assert not db.manifest.inline  # type: ignore[union-attr]


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 30), st.integers(0, 400)),
    st.tuples(st.just("delete"), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("range"), st.integers(0, 30), st.integers(1, 8)),
    st.tuples(st.just("commit"), st.just(0), st.just(0)),
    st.tuples(st.just("flush"), st.just(0), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
), max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, delta=st.sampled_from([200, 1000, 4096]), cap=st.sampled_from([500, 3000]),
       entries=st.sampled_from([1, 2, 8]))
def test_reads_of_inline_and_uploaded_mixes_match_a_model(ops, delta, cap, entries) -> None:
    s = SETTINGS.replace(inline_delta_bytes=delta, inline_max_bytes=cap,
                         inline_max_entries=entries, compaction="leveled",
                         compaction_mode="thread", l0_compaction_trigger=2)
    url = f"memory://inline-model-{uuid.uuid4().hex}"
    committed: dict[bytes, bytes] = {}
    model: dict[bytes, bytes] = {}
    db = silt.open(url, settings=s)
    try:
        for op, a, b in ops:
            key = b"k%02d" % a
            if op == "put":
                model[key] = b"v" * (b % 97) + b"%d" % b
                db.put(key, model[key])
            elif op == "delete":
                model.pop(key, None)
                db.delete(key)
            elif op == "range":
                end = b"k%02d" % (a + b)
                db.delete_range(key, end)
                for k in [k for k in model if key <= k < end]:
                    del model[k]
            elif op == "commit":
                db.commit()
                committed = dict(model)
            elif op == "flush":
                db.flush()
            else:
                db.close()
                db = silt.open(url, settings=s)
                model = dict(committed)
            keys = [b"k%02d" % i for i in range(40)]
            assert dict(db.scan()) == model
            assert db.multi_get(keys) == [model.get(k) for k in keys]
            assert [db.get(k) for k in keys[::3]] == [model.get(k) for k in keys[::3]]
        db.commit()
    finally:
        db.close()
    with silt.open(url, settings=s) as db:
        assert dict(db.scan()) == model


def test_changed_keys_count_inline_deltas_added_and_folded(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"1")
        db.commit()
        with silt.open(url, settings=SETTINGS) as old:
            db.put(b"c", b"2")
            db.commit()  # inline: only c is new
            assert db.changed_keys([old]) == [b"c"]
            db.put(b"big", b"x" * 20000)
            db.commit()  # folds a, b and c into one SST with big: a superset, as documented
            assert set(db.changed_keys([old])) == {b"a", b"b", b"c", b"big"}
