"""The engine's behaviours on every object-store tier, against real protocol servers.

Each test runs once per tier (``s3``: moto's S3 server, ``gs``: fake-gcs-server, ``az``: Azurite;
the session fixtures of tests/conftest.py start each server only when a test of that tier runs),
on a fresh bucket or container:

* a short hypothesis run of the model machine of tests/test_model.py (puts, deletes, TTLs, write
  batches, commits, reopens at older versions, every read compared with a dict);
* two writers race for one version: exactly one wins, the loser gets ``CommitConflict``;
* a damaged SST object (overwritten through the emulator's own SDK client) is reported as
  ``CorruptionError`` naming the object and the damaged block's offset; a damaged manifest too;
* leveled compaction and GC once the grace period has passed: old versions and every SST no kept
  version references are deleted, the kept versions read back whole;
* through the TCP fault proxy (tests/faultproxy.py): resets before a request and lost responses
  to create-only writes are retried and the commit lands exactly once; reads survive resets and
  bodies cut mid-transfer; a black hole ends in a clear ``TransientStoreError`` within a deadline
  set by the tier's timeout options, and nothing committed is lost (reopened and compared).

Examples are small on purpose: every request goes to an emulator on 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
import silt
from faultproxy import FaultProxy
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from silt import paths, plugins
from silt.errors import (
    CommitConflict,
    CorruptionError,
    RetriesExhaustedError,
    TransientStoreError,
)
from silt.sst.reader import SstReader
from silt.store import retrying
from test_model import MODEL_SETTINGS, SiltModel

#: The tiers to run: all by default; ``SILT_TEST_TIERS=s3`` (comma-separated schemes) narrows
#: the run to the tiers whose packages are installed (the noxfile's ``tier`` sessions).
TIERS = [t.strip() for t in os.environ.get("SILT_TEST_TIERS", "s3,gs,az").split(",") if t.strip()]

#: Small sizes: a few hundred puts make several SSTs of many blocks.
SMALL = silt.Settings(memtable_bytes=16 * 1024, block_bytes=512, block_cache_bytes=256 * 1024)

#: SMALL with every delta uploaded as an SST (no inline deltas): for tests whose subject is
#: the SST objects and their requests.
UPLOADED = SMALL.replace(inline_delta_bytes=0)

#: Leveled compaction that starts at two L0 SSTs and fills tiny levels.
COMPACTING = SMALL.replace(
    memtable_bytes=3000, compaction="leveled", l0_compaction_trigger=2, l0_stall_trigger=4,
    target_sst_bytes=8 * 1024, level1_bytes=16 * 1024, level_size_ratio=4,
)

#: The model machine's run per tier: a few short examples (each step may be several requests).
MODEL_RUN = settings(
    max_examples=4,
    stateful_step_count=14,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


# --- one tier: URLs, admin access to the emulator, request shapes ----------------------------


@dataclass
class Tier:
    """A fresh bucket (container) on one emulator, and an admin client to tamper with it."""

    scheme: str
    bucket: str
    server: str
    admin: Any

    def url(self, prefix: str = "state", *, endpoint: str | None = None, **options: Any) -> str:
        """``scheme://bucket/prefix?...`` on the server, or on ``endpoint`` (a fault proxy)."""
        endpoint = endpoint or self.server
        query = dict(options)
        if self.scheme == "s3":
            query = {"endpoint_url": endpoint, **query}
        elif self.scheme == "gs":
            query = {"endpoint": endpoint, **query}
        else:
            from servers import azurite_connection_string

            query = {"connection_string": azurite_connection_string(endpoint), **query}
        text = "&".join(f"{k}={quote(str(v), safe=':/')}" for k, v in query.items())
        return f"{self.scheme}://{self.bucket}/{prefix}?{text}"

    def fast_fail_options(self) -> dict[str, Any]:
        """Timeouts and retries that give up on a silent server within a few seconds."""
        short = {"connect_timeout": 0.3, "read_timeout": 0.3}
        if self.scheme == "gs":
            return {**short, "retry_deadline": 0.5}
        return {**short, "max_attempts": 1, "read_attempts": 1}

    def read(self, key: str) -> bytes:
        """The stored bytes of ``key`` (the full object name), read by the admin client."""
        if self.scheme == "s3":
            return self.admin.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        if self.scheme == "gs":
            return self.admin.bucket(self.bucket).blob(key).download_as_bytes()
        return self.admin.get_blob_client(self.bucket, key).download_blob().readall()

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace the object ``key`` with ``data`` behind silt's back."""
        if self.scheme == "s3":
            self.admin.put_object(Bucket=self.bucket, Key=key, Body=data)
        elif self.scheme == "gs":
            self.admin.bucket(self.bucket).blob(key).upload_from_string(data)
        else:
            self.admin.get_blob_client(self.bucket, key).upload_blob(data, overwrite=True)

    def is_create_only_write(self, head: bytes) -> bool:
        """Whether a request (its first bytes, as the fault proxy sees them) is a create-only
        upload: ``If-None-Match: *`` (S3, Azure) or ``ifGenerationMatch=0`` (GCS)."""
        if self.scheme == "gs":
            return head.startswith(b"POST /upload/") and b"ifGenerationMatch=0" in head
        return head.startswith(b"PUT ") and b"if-none-match: *" in head.lower()


#: Each tier's scheme and the module its entry point names.
PLUGIN_MODULES = {"s3": "silt_s3.plugin", "gs": "silt_gcs.plugin", "az": "silt_azure.plugin"}
if not set(TIERS) <= set(PLUGIN_MODULES):
    raise ValueError(f"SILT_TEST_TIERS={','.join(TIERS)!r}: expected schemes among s3, gs, az")


def _gc_later(url: str, retain_versions: int):
    """GC of ``url`` as if run once everything written so far is older than the writers' grace
    period (GC refuses a shorter grace than the one writers record in their manifests)."""
    from silt.gc import collect_garbage

    grace = silt.Settings().gc_grace_seconds
    later = silt.ManualClock(int(time.time() * 1000) + int(grace * 1000) + 1000)
    store = silt.open_store(url)
    try:
        return collect_garbage(store, retain_versions=retain_versions, grace_seconds=grace,
                               clock=later)
    finally:
        store.close()


def register_plugin(monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    """Register one tier package through pluggy, as its entry point would (the suite runs with
    plugin autoloading off); only that package needs to be installed."""
    monkeypatch.setattr(
        plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, (scheme, PLUGIN_MODULES[scheme]))
    )
    plugins.reset_registry()


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tier]:
    """A fresh bucket on the tier's emulator (only that emulator is started), with the tier
    registered."""
    if request.param == "s3":
        tier = Tier("s3", request.getfixturevalue("s3_bucket"),
                    request.getfixturevalue("moto_server"), request.getfixturevalue("moto_admin"))
    elif request.param == "gs":
        tier = Tier("gs", request.getfixturevalue("gcs_bucket"),
                    request.getfixturevalue("gcs_server"), request.getfixturevalue("gcs_admin"))
    else:
        tier = Tier("az", request.getfixturevalue("az_container"),
                    request.getfixturevalue("azurite_server"),
                    request.getfixturevalue("azurite_admin"))
    register_plugin(monkeypatch, tier.scheme)
    yield tier
    plugins.reset_registry()


@pytest.fixture
def proxy(tier: Tier) -> Iterator[FaultProxy]:
    """A fault proxy in front of the tier's server."""
    with FaultProxy(tier.server) as p:
        yield p


def fill(db: silt.DB, n: int, tag: bytes = b"v", start: int = 0) -> dict[bytes, bytes]:
    """Put ``n`` keys; return what was written."""
    out = {b"key:%05d" % i: tag + b"-%d-" % i + b"x" * (i % 40) for i in range(start, start + n)}
    for k, v in out.items():
        db.put(k, v)
    return out


# --- 1. the model machine (tests/test_model.py) on each tier ---------------------------------


def test_model(tier: Tier) -> None:
    """The stateful model of tests/test_model.py, each example on a fresh root of the tier."""

    class TierModel(SiltModel):
        def __init__(self) -> None:  # SiltModel.__init__ knows file:// and memory:// only
            RuleBasedStateMachine.__init__(self)
            self.tmpdir = None
            self.mem_name = None
            self.url = tier.url(f"model-{uuid.uuid4().hex[:12]}")
            self.clock = silt.ManualClock()
            self.db = silt.open(self.url, settings=MODEL_SETTINGS, clock=self.clock)
            self.start_model()

    run_state_machine_as_test(TierModel, settings=MODEL_RUN)


def test_round_trip(tier: Tier) -> None:
    """Puts, a delete, two commits with meta; reopen latest and version 1; get, multi_get, scan
    over several SSTs read by ranged requests."""
    url = tier.url()
    values = {b"key:%05d" % i: b"%d-" % i + b"p" * (40 + i % 60) for i in range(3000)}
    with silt.open(url, settings=SMALL) as db:
        assert db.version is None
        for key, value in values.items():
            db.put(key, value)
        db.delete(b"key:00007")
        assert db.commit(meta={"query": "q1"}) == 1
        db.put(b"key:00001", b"changed")
        assert db.commit() == 2
    assert silt.versions(url) == [1, 2]
    expected = {**values, b"key:00001": b"changed"}
    expected.pop(b"key:00007")
    with silt.open(url, settings=SMALL) as db:
        assert db.version == 2 and db.meta == {"query": "q1"}
        assert db.get(b"key:00001") == b"changed"
        assert db.get(b"key:00007") is None
        assert db.get(b"key:02999") == values[b"key:02999"]
        probe = [b"key:%05d" % i for i in range(0, 3000, 7)] + [b"absent"]
        assert db.multi_get(probe) == [expected.get(k) for k in probe]
        scanned = list(db.scan(b"key:00100", b"key:00200"))
        assert [k for k, _ in scanned] == [b"key:%05d" % i for i in range(100, 200)]
        assert all(v == expected[k] for k, v in scanned)
        assert len(list(db.manifest.all_ssts())) >= 2  # type: ignore[union-attr]
    with silt.open(url, settings=SMALL, version=1) as db:
        assert db.get(b"key:00001") == values[b"key:00001"]
        assert db.get(b"key:00007") is None  # deleted before version 1


# --- 2. commit races ----------------------------------------------------------------------------


def test_two_writers_race_for_one_version(tier: Tier) -> None:
    url = tier.url()
    with silt.open(url, settings=SMALL) as db:
        db.put(b"base", b"0")
        assert db.commit() == 1
    writers = [silt.open(url, settings=SMALL) for _ in range(2)]
    for i, db in enumerate(writers):
        for n in range(400):  # each writer uploads SSTs of its own
            db.put(b"w%d:%04d" % (i, n), b"y" * 60)
        db.put(b"shared", b"%d" % i)
    barrier = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def commit(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            outcomes[i] = writers[i].commit()
        except CommitConflict as exc:
            outcomes[i] = exc
        except Exception as exc:  # reported by the assertion below
            outcomes[i] = exc

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [i for i, o in enumerate(outcomes) if o == 2]
    losers = [o for o in outcomes if isinstance(o, CommitConflict)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert losers[0].version == 2
    loser = writers[1 - winners[0]]
    assert loser.version == 1 and loser.get(b"shared") == b"%d" % (1 - winners[0])
    for db in writers:
        db.close()
    assert silt.versions(url) == [1, 2]
    w = winners[0]
    with silt.open(url, settings=SMALL) as db:
        assert db.version == 2
        assert db.get(b"shared") == b"%d" % w
        assert db.get(b"base") == b"0"
        assert dict(db.scan(prefix=b"w%d:" % w)) == {b"w%d:%04d" % (w, n): b"y" * 60
                                                       for n in range(400)}
        assert list(db.scan(prefix=b"w%d:" % (1 - w))) == []


def test_a_handle_another_writer_passed_catches_up_with_gets_at_once(tier: Tier) -> None:
    """DB.catch_up on a remote store: the GETs of one round go out at once from the read pool
    (through the tier's client from several threads), counted under ``open``; the handle lands
    where a fresh open does and knows nothing is newer, without a LIST."""
    url = tier.url()
    with silt.open(url, settings=SMALL) as a:
        assert not a.store.local
        for n in (1, 2):
            a.put(b"k%d" % n, b"a")
            a.commit()  # the second knows the GC markers
        with silt.open(url, settings=SMALL) as other:
            other.put(b"k3", b"other")
            assert other.commit() == 3
        before = a.stats()["requests_by_kind"]
        assert a.catch_up(3) == (3, [])
        after = a.stats()["requests_by_kind"]
        delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        assert delta == {"GET": 3, "RANGE_GET": 1}, delta
        assert a.get(b"k3") == b"other" and a.get(b"k1") == b"a"
        assert a.catch_up(3) == (3, [])  # nothing newer now: 2 GETs
        a.put(b"k4", b"a")
        assert a.commit() == 4


# --- 3. corruption ------------------------------------------------------------------------------


def test_damaged_sst_object_is_detected(tier: Tier) -> None:
    url = tier.url()
    settings_ = UPLOADED.replace(memtable_bytes=1 << 20, block_bytes=256)
    with silt.open(url, settings=settings_) as db:
        data = fill(db, 120)
        assert db.commit() == 1
    store = silt.open_store(url)
    try:
        manifest = silt.read_manifest(store, 1)
        (info,) = manifest.l0
        name = paths.sst_key(info.id)
        reader = SstReader(store, name, info, None)
        tail = reader.tail
        assert len(tail.block_offsets) >= 4
        block = 2
        damaged_keys = set(reader.block(block, fill_cache=False).keys)
    finally:
        store.close()
    key = f"state/{name}"
    original = tier.read(key)
    assert len(original) == info.size
    damaged = bytearray(original)
    damaged[tail.block_offsets[block] + tail.block_sizes[block] // 2] ^= 0x5A
    tier.overwrite(key, bytes(damaged))

    def check(exc: CorruptionError) -> None:
        assert exc.object_name == name
        assert exc.offset == tail.block_offsets[block]
        assert name in str(exc) and f"offset {exc.offset}" in str(exc)

    with silt.open(url, settings=settings_) as db:
        for k in sorted(data):
            if k in damaged_keys:
                with pytest.raises(CorruptionError) as caught:
                    db.get(k)
                check(caught.value)
            else:
                assert db.get(k) == data[k]
        with pytest.raises(CorruptionError) as caught:
            db.multi_get(sorted(data))
        check(caught.value)
        with pytest.raises(CorruptionError) as caught:
            list(db.scan())
        check(caught.value)

    # A damaged manifest: the open fails naming it; restored, everything reads again.
    tier.overwrite(key, original)
    manifest_key = f"state/{paths.manifest_key(1)}"
    raw = tier.read(manifest_key)
    tier.overwrite(manifest_key, raw[:-3] + bytes(b ^ 0xFF for b in raw[-3:]))
    with pytest.raises(CorruptionError) as caught:
        silt.open(url, settings=settings_)
    assert caught.value.object_name == paths.manifest_key(1)
    tier.overwrite(manifest_key, raw)
    with silt.open(url, settings=settings_) as db:
        assert dict(db.scan()) == data


# --- 4. compaction and garbage collection --------------------------------------------------------


def wait_for_compaction(db: silt.DB, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while db.stats()["compaction_running"] and time.monotonic() < deadline:
        time.sleep(0.01)


def test_compaction_and_gc(tier: Tier) -> None:
    url = tier.url()
    rng = random.Random(f"gc-{tier.scheme}")
    expected: dict[bytes, bytes] = {}
    models: dict[int, dict[bytes, bytes]] = {}
    with silt.open(url, settings=COMPACTING) as db:
        for round_ in range(8):
            for _ in range(60):
                k = b"k%03d" % rng.randrange(150)
                if rng.random() < 0.15:
                    db.delete(k)
                    expected.pop(k, None)
                else:
                    expected[k] = b"r%d-" % round_ + bytes(rng.randrange(256) for _ in range(40))
                    db.put(k, expected[k])
            models[db.commit()] = dict(expected)
            wait_for_compaction(db)  # its result is adopted by the next commit
        models[db.commit()] = dict(expected)
        stats = db.stats()
        assert stats["compactions_adopted"] > 0, stats
        assert any(stats["levels"]), stats
        assert dict(db.scan()) == expected
        wait_for_compaction(db)
    last = max(models)

    # GC as if the writers' grace period had passed: every object is older than its cutoff.
    report = _gc_later(url, retain_versions=2)
    assert silt.versions(url) == [last - 1, last]
    assert report.deleted_ssts, "versions 1..7 referenced SSTs that compaction replaced"
    store = silt.open_store(url)
    try:
        referenced = {paths.sst_key(s.id) for v in (last - 1, last)
                      for s in silt.read_manifest(store, v).objects()}
        listed = {i.key for i in store.list(paths.SST_PREFIX)}
        assert listed == referenced
        assert list(store.list(paths.COMPACTION_PREFIX)) == []
    finally:
        store.close()
    for v in (last - 1, last):
        with silt.open(url, version=v, settings=SMALL) as db:
            assert dict(db.scan()) == models[v], f"version {v}"
            probe = [b"k%03d" % i for i in range(150)]
            assert db.multi_get(probe) == [models[v].get(k) for k in probe]
    with silt.open(url, settings=COMPACTING) as db:  # the writer goes on after GC
        db.put(b"after-gc", b"1")
        assert db.commit() == last + 1
    with silt.open(url, settings=SMALL) as db:
        assert dict(db.scan()) == {**models[last], b"after-gc": b"1"}


# --- 5. faults on the wire -----------------------------------------------------------------------


def nth_create_only_write(tier: Tier, n: int) -> Callable[[bytes], bool]:
    """A proxy rule matcher: true for the ``n``-th create-only upload this rule gets to see
    (requests an earlier rule took are not seen)."""
    seen = [0]

    def match(head: bytes) -> bool:
        if not tier.is_create_only_write(head):
            return False
        seen[0] += 1
        return seen[0] == n

    return match


def test_reference_between_siblings(tier: Tier) -> None:
    """A DB takes a key range of a sibling by reference (silt.siblings) on the tier: nothing is
    copied, reads are clipped, and GC of the common parent keeps what the reference needs."""
    rng = random.Random(f"ref-{tier.scheme}")
    expected: dict[bytes, bytes] = {}
    with silt.open(tier.url("op/a"), settings=COMPACTING) as a:
        for round_ in range(4):
            for _ in range(80):
                k = b"k%03d" % rng.randrange(200)
                expected[k] = b"r%d-" % round_ + bytes(rng.randrange(256) for _ in range(30))
                a.put(k, expected[k])
            a.commit()
            wait_for_compaction(a)
        a.commit()
    want = {k: v for k, v in expected.items() if b"k050" <= k < b"k150"}
    with silt.open(tier.url("op/a")) as a, silt.open(tier.url("op/b"), settings=SMALL) as b:
        assert b.reference(a, b"k050", b"k150") > 0
        b.commit()
    store = silt.open_store(tier.url("op/b"))
    try:
        assert list(store.list(paths.SST_PREFIX)) == []  # nothing copied
    finally:
        store.close()
    with silt.open(tier.url("op/a"), settings=COMPACTING) as a:  # the source moves on
        for k in list(expected):
            a.put(k, b"later")
        a.commit()
        wait_for_compaction(a)
        a.commit()
    report = _gc_later(tier.url("op"), retain_versions=1)
    assert report.deleted_ssts  # a's old SSTs that only b does not need
    with silt.open(tier.url("op/b"), settings=SMALL) as b:
        assert dict(b.scan()) == want
        assert b.multi_get(sorted(want)) == [want[k] for k in sorted(want)]



@pytest.mark.parametrize(
    "name", ["%2e%2e%2fother%2fvictim", "%252e%252e%252fother%252fvictim",
             "\uff0e\uff0e\uff0fother\uff0fvictim", "../other/victim"], ids=repr,
)
def test_crafted_sibling_reference_never_leaves_the_root(
    tier: Tier, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest (with a valid checksum) whose entry names a crafted sibling ``db`` is damaged
    metadata on every tier: opening it, reading it and ``silt verify`` report it, and nothing of
    the other DB is served (tests/test_crafted_names.py attacks the whole class on file://)."""
    import dataclasses

    from silt.cli import main
    from silt.manifest import Manifest

    with silt.open(tier.url("other/victim"), settings=UPLOADED) as v:
        v.put(b"secret", b"victim-data")
        v.commit()
    with silt.open(tier.url("mine/db"), settings=UPLOADED) as m:
        m.put(b"mine", b"1")
        m.commit()
    victim, mine = silt.open_store(tier.url("other/victim")), silt.open_store(tier.url("mine/db"))
    try:
        theirs = Manifest.decode(victim.get(paths.manifest_key(1)), "victim")
        own = Manifest.decode(mine.get(paths.manifest_key(1)), "mine")
        crafted = dataclasses.replace(
            own, version=2, parent=1, token="crafted",
            l0=(*(dataclasses.replace(s, db=name) for s in theirs.l0), *own.l0),
        )
        assert mine.put_if_absent(paths.manifest_key(2), crafted.encode())
    finally:
        victim.close()
        mine.close()
    with pytest.raises(CorruptionError, match="not a plain name"):
        silt.open(tier.url("mine/db"))
    capsys.readouterr()
    assert main(["verify", tier.url("mine/db")]) == 2
    out, err = capsys.readouterr()
    assert "not a plain name" in err and ": OK" not in out

def test_resets_and_lost_responses_commit_exactly_once(tier: Tier, proxy: FaultProxy) -> None:
    """A commit uploads its SST, then its manifest, both create-only. Commit 1: the SST upload
    is reset before it reaches the server (the SDK retries it), the manifest is created but its
    answer lost (the SDK's retry finds it: "exists"; the engine reads it back and recognises its
    token). Commit 2: the SST upload's answer is lost (the engine checks the stored footer is
    its own). Each commit lands exactly once, nothing is lost."""
    url = tier.url(endpoint=proxy.url)
    with silt.open(url, settings=UPLOADED) as db:
        committed = fill(db, 150)  # ~10 KB: one SST, uploaded by the commit
        proxy.fault("reset", match=tier.is_create_only_write)
        proxy.fault("lose_response", match=nth_create_only_write(tier, 2))  # the manifest
        assert db.commit() == 1
        assert proxy.counts["reset"] == 1 and proxy.counts["lose_response"] == 1, proxy.counts
        assert silt.versions(url) == [1]
        committed |= fill(db, 50, tag=b"second", start=100)
        proxy.fault("lose_response", match=nth_create_only_write(tier, 1))  # the SST
        assert db.commit() == 2
        assert proxy.counts["lose_response"] == 2, proxy.counts
        db.put(b"third", b"3")
        committed[b"third"] = b"3"
        assert db.commit() == 3
    assert silt.versions(url) == [1, 2, 3]
    store = silt.open_store(tier.url())
    try:
        manifests = [silt.read_manifest(store, v) for v in (1, 2, 3)]
        assert len({m.token for m in manifests}) == 3
        assert [m.parent for m in manifests] == [None, 1, 2]
        assert [len(m.l0) for m in manifests] == [1, 2, 3]  # one SST per commit, no strays used
    finally:
        store.close()
    with silt.open(tier.url(), settings=SMALL) as db:
        assert dict(db.scan()) == committed


def test_an_inline_commit_is_one_write_and_lands_once(tier: Tier, proxy: FaultProxy) -> None:
    """A small commit carries its delta in its manifest (silt.inline): the manifest is its only
    write. Its answer lost (the SDK's retry finds it: "exists"), the engine reads it back and
    recognises its token; the version reads back whole, with no SST object anywhere."""
    url = tier.url(endpoint=proxy.url)
    with silt.open(url, settings=SMALL) as db:
        committed = fill(db, 20)
        proxy.fault("lose_response", match=nth_create_only_write(tier, 1))  # the manifest
        assert db.commit() == 1
        assert proxy.counts["lose_response"] == 1, proxy.counts
        committed |= fill(db, 10, tag=b"second", start=15)
        assert db.commit() == 2
        m = db.manifest
        assert m is not None and [s.inline for s in m.l0] == [True, True]
    store = silt.open_store(tier.url())
    try:
        assert list(store.list(paths.SST_PREFIX)) == []
    finally:
        store.close()
    with silt.open(tier.url(), settings=SMALL) as db:
        assert dict(db.scan()) == committed
    assert silt.verify(tier.url()).ok


def test_reads_survive_resets_and_cut_bodies(tier: Tier, proxy: FaultProxy) -> None:
    url = tier.url(endpoint=proxy.url)
    with silt.open(url, settings=UPLOADED.replace(memtable_bytes=1 << 20)) as db:
        committed = fill(db, 600)
        assert db.commit() == 1
    keys = sorted(committed)
    proxy.fault("reset", match=b"GET ")
    proxy.fault("truncate", match=b"GET ", keep=600)
    with silt.open(url, settings=SMALL) as db:  # the open's reads and the SST's tail
        assert db.multi_get(keys) == [committed[k] for k in keys]
    with silt.open(url, settings=SMALL) as db:  # cold again: blocks cut mid-body
        proxy.fault("truncate", match=b"GET ", keep=300, rst=True)
        assert dict(db.scan()) == committed
    assert proxy.counts["reset"] == 1 and proxy.counts["truncate"] == 2, proxy.counts


def test_black_hole_fails_within_the_deadline_and_loses_nothing(
    tier: Tier, proxy: FaultProxy
) -> None:
    """The server stops answering just before a commit's manifest is written: the commit fails
    with a clear ``TransientStoreError`` naming the manifest, within a deadline set by the
    tier's timeouts; the outcome is unknown to the writer, so its next commit (the network
    back) reads the manifest back first, finds it absent and commits. Nothing is lost."""
    url = tier.url(endpoint=proxy.url, **tier.fast_fail_options())
    # (uploaded deltas: with an inline version 1, the commit after the flush would fold it
    # into an SST first, and that upload would meet the black hole)
    with silt.open(url, settings=UPLOADED) as db:
        committed = fill(db, 300)
        assert db.commit() == 1
        pending = fill(db, 100, tag=b"pending", start=250)
        db.flush()  # the SSTs are up: only the manifest write meets the black hole
        proxy.fault("blackhole", times=None)
        started = time.monotonic()
        with pytest.raises(TransientStoreError) as caught:
            db.commit()
        elapsed = time.monotonic() - started
        # silt.store.retrying tries the write 6 times, each bounded by the tier's timeouts
        # (0.3 s, one SDK attempt; botocore adds 1 s waiting for "100 Continue" on a PUT).
        assert elapsed < 15, f"a black hole took {elapsed:.1f}s to fail"
        message = str(caught.value)
        assert paths.manifest_key(2) in message, message
        assert "AccountKey" not in message and "Eby8vdM02" not in message
        assert db.version == 1
        proxy.clear()
        assert db.get(b"key:00299") == pending[b"key:00299"]  # still pending in the writer
        assert db.commit() == 2
        committed |= pending
    assert silt.versions(url) == [1, 2]
    with silt.open(tier.url(), settings=SMALL) as db:
        assert dict(db.scan()) == committed
    with silt.open(tier.url(), version=1, settings=SMALL) as db:
        assert db.get(b"key:00299") == b"v-299-" + b"x" * (299 % 40)


# --- 6. the retry policy: one layer of retries, a known number of requests ---------------------


def test_a_failing_request_is_sent_at_most_max_attempts_times(
    tier: Tier, proxy: FaultProxy
) -> None:
    """The retry policy (docs/plugins.md, "Retries"): the SDK's own retries are the only
    retries of a request. Through the engine's loop (``silt.store.retrying``), a request that
    keeps failing is sent ``max_attempts`` times, not ``max_attempts`` times the engine's
    attempts; a whole read whose body keeps breaking at most ``max_attempts * read_attempts``
    times. The error says the tier gave up (``RetriesExhaustedError``)."""
    attempts, reads = 3, 2
    url = tier.url(endpoint=proxy.url, max_attempts=attempts, read_attempts=reads)
    store = silt.open_store(url)
    try:
        store.put("big", os.urandom(100_000))
        for op in (lambda: store.put("k", b"v"), lambda: store.put_if_absent("k", b"v"),
                   lambda: store.get("big"), lambda: list(store.list("")),
                   lambda: store.delete_many(["big"])):
            proxy.fault("reset", times=None)  # every request from now on
            before = proxy.counts["requests"]
            with pytest.raises(RetriesExhaustedError):
                retrying(op, sleep=lambda _s: None)
            assert proxy.counts["requests"] - before == attempts, proxy.counts
            proxy.clear()
        proxy.fault("truncate", match=b"GET ", keep=3000, times=None)  # headers, then cut
        before = proxy.counts["requests"]
        with pytest.raises(RetriesExhaustedError):
            retrying(lambda: store.get("big"), sleep=lambda _s: None)
        sent = proxy.counts["requests"] - before
        assert 2 <= sent <= attempts * reads, proxy.counts
        proxy.clear()
        assert len(store.get("big")) == 100_000
    finally:
        store.close()
