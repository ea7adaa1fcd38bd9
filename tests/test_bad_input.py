"""Bad input gets clear errors: the right class (a SiltError and the fitting builtin) and a
message that says what was wrong and what to do."""

from __future__ import annotations

import datetime as dt
import math

import pytest
import silt
from silt.errors import (
    ClosedError,
    InvalidArgumentError,
    InvalidTypeError,
    NoTierError,
    VersionNotFoundError,
)
from silt_spark.operators.processor import _handle as _processor
from silt_spark.operators.processor import _state
from silt_spark.runtime import _api


@pytest.fixture
def db(url: str, small: silt.Settings):
    with silt.open(url, settings=small) as db:
        yield db


def raises(cls: type[BaseException], match: str | None = None):
    """``pytest.raises`` that also checks the error is a ``SiltError``."""
    assert issubclass(cls, silt.SiltError)
    return pytest.raises(cls, match=match)


# --- keys and values ----------------------------------------------------------------------------


def test_str_key_and_value_say_encode(db: silt.DB) -> None:
    with raises(InvalidTypeError, match=r"keys must be bytes, got str.*encode") as info:
        db.put("k", b"v")
    assert isinstance(info.value, TypeError)
    with raises(InvalidTypeError, match=r"values must be bytes, got str.*encode"):
        db.put(b"k", "v")
    with raises(InvalidTypeError, match="encode"):
        db.get("k")
    with raises(InvalidTypeError, match="encode"):
        db.delete("k")
    with raises(InvalidTypeError, match="encode"):
        db.multi_get([b"a", "b"])
    with raises(InvalidTypeError, match="encode"):
        list(db.scan(start="a"))
    with raises(InvalidTypeError, match="encode"):
        db.scan(prefix="a")
    assert list(db.scan()) == []


def test_none_value_points_to_delete(db: silt.DB) -> None:
    with raises(InvalidTypeError, match=r"got NoneType.*DB\.delete"):
        db.put(b"k", None)
    assert db.get(b"k") is None


@pytest.mark.parametrize("key", [1, 1.5, None, ["k"], object()])
def test_non_bytes_keys(db: silt.DB, key: object) -> None:
    with raises(InvalidTypeError, match=f"keys must be bytes, got {type(key).__name__}"):
        db.put(key, b"v")
    with raises(InvalidTypeError, match="keys must be bytes"):
        db.get(key)
    with raises(InvalidTypeError, match="keys must be bytes"):
        db.delete(key)


def test_bytes_like_keys_and_values_are_accepted(db: silt.DB) -> None:
    db.put(bytearray(b"k"), memoryview(b"v"))
    assert db.get(b"k") == b"v"
    assert db.get(bytearray(b"k")) == b"v"


def test_oversized_key_and_value(url: str) -> None:
    settings = silt.Settings(max_key_bytes=16, max_value_bytes=100)
    with silt.open(url, settings=settings) as db:
        db.put(b"k" * 16, b"v" * 100)  # exactly at the limits is fine
        too_long = r"key of 17 bytes exceeds Settings\.max_key_bytes=16"
        with raises(InvalidArgumentError, match=too_long) as info:
            db.put(b"k" * 17, b"v")
        assert isinstance(info.value, ValueError)
        assert "hash" in str(info.value)  # what to do about it
        with raises(InvalidArgumentError, match=r"value of 101 bytes exceeds .*_bytes=100"):
            db.put(b"k", b"v" * 101)
        with raises(InvalidArgumentError, match="max_key_bytes"):
            db.delete(b"k" * 17)
        with raises(InvalidArgumentError, match="max_key_bytes"):
            db.write(silt.WriteBatch().put(b"k" * 17, b"v"))
        # Reads reject it the same way: a key that long can never have been written.
        with raises(InvalidArgumentError, match="max_key_bytes"):
            db.get(b"k" * 17)
        with raises(InvalidArgumentError, match="max_key_bytes"):
            db.multi_get([b"k" * 17, b"k" * 16])
        assert db.multi_get([b"k" * 16]) == [b"v" * 100]
        assert db.get(b"k") is None
        assert list(db.scan()) == [(b"k" * 16, b"v" * 100)]


@pytest.mark.parametrize("ttl", [0, -1, -0.5, math.nan, math.inf, -math.inf])
def test_bad_ttl_values(db: silt.DB, ttl: float) -> None:
    with raises(InvalidArgumentError, match="ttl must be a positive, finite number of seconds"):
        db.put(b"k", b"v", ttl=ttl)
    assert db.get(b"k") is None


def test_ttl_beyond_the_record_format_is_refused_and_the_db_still_commits(url: str) -> None:
    """A ttl whose expiry does not fit the u64 expiry field used to be accepted, and then every
    commit raised OverflowError forever. The largest ttl that fits is accepted and round-trips."""
    clock = silt.ManualClock(1_700_000_000_000)
    max_ttl = (2**64 - 1 - clock.now_ms()) // 1000
    with silt.open(url, clock=clock) as db:
        for ttl in (1e17, max_ttl + 1, 2**64, float(2**64)):
            with raises(InvalidArgumentError, match=rf"at most {max_ttl} .*u64 milliseconds"):
                db.put(b"k", b"v", ttl=ttl)
            with raises(InvalidArgumentError, match=rf"at most {max_ttl}"):
                db.write(silt.WriteBatch().put(b"b", b"v").put(b"k", b"v", ttl=ttl))
        db.put(b"far", b"v", ttl=max_ttl)
        db.put(b"near", b"v", ttl=float(max_ttl) * 0.999)
        assert db.commit() == 1
        assert db.get(b"k") is None and db.get(b"b") is None
    with silt.open(url, clock=clock) as db:
        assert dict(db.scan()) == {b"far": b"v", b"near": b"v"}
        clock.advance(max_ttl * 1000)
        assert db.get(b"far") is None and db.get(b"near") is None


@pytest.mark.parametrize("ttl", ["5", b"5", True, [5]])
def test_bad_ttl_types(db: silt.DB, ttl: object) -> None:
    with raises(InvalidTypeError, match="ttl must be a number of seconds"):
        db.put(b"k", b"v", ttl=ttl)
    assert db.get(b"k") is None


def test_multi_get_given_a_single_key(db: silt.DB) -> None:
    with raises(InvalidTypeError, match="sequence of keys, not a single key"):
        db.multi_get(b"abc")
    with raises(InvalidTypeError, match="sequence of keys, not a single key"):
        db.multi_get("abc")
    assert db.multi_get([]) == []


# --- write batches ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        lambda b: b.put("str-key", b"v"),
        lambda b: b.put(b"k", "str-value"),
        lambda b: b.put(b"k", b"v", ttl=-1),
        lambda b: b.put(b"k", b"v", ttl="1"),
        lambda b: b.delete(5),
        lambda b: b.delete_many([b"ok", 5]),
        lambda b: b.put(b"x" * 70_000, b"v"),
    ],
)
def test_write_batch_with_a_bad_entry_is_rejected_whole(db: silt.DB, bad) -> None:
    db.put(b"before", b"1")
    batch = silt.WriteBatch().put(b"a", b"1").delete(b"before").put(b"b", b"2", ttl=10)
    bad(batch)
    batch.put(b"c", b"3")
    with pytest.raises(silt.SiltError):
        db.write(batch)
    assert db.multi_get([b"a", b"b", b"c", b"before"]) == [None, None, None, b"1"]
    db.commit()
    assert list(db.scan()) == [(b"before", b"1")]


def test_write_batch_put_of_none_is_not_a_delete(db: silt.DB) -> None:
    """``batch.put(k, None)`` is a mistake like ``db.put(k, None)``, not a silent delete."""
    db.put(b"k", b"v")
    batch = silt.WriteBatch().put(b"a", b"1")
    with raises(InvalidTypeError, match=r"got NoneType.*WriteBatch\.delete"):
        batch.put(b"k", None)
    assert len(batch) == 1
    db.write(batch)
    assert db.multi_get([b"k", b"a"]) == [b"v", b"1"]


def test_write_takes_a_write_batch(db: silt.DB) -> None:
    with raises(InvalidTypeError, match="silt.WriteBatch, got list"):
        db.write([(b"k", b"v", None)])


# --- URLs and tiers -----------------------------------------------------------------------------


def test_unknown_scheme() -> None:
    with raises(NoTierError, match=r"no tier installed for 'foo://'") as info:
        silt.open("foo://x")
    assert isinstance(info.value, ValueError)
    assert "'file://'" in str(info.value) and "'memory://'" in str(info.value)
    assert "typo" in str(info.value)
    with raises(NoTierError, match="foo://"):
        silt.versions("foo://x")


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("s3://b/p", "no tier installed for 's3://' - pip install silt-tier-s3 (before it is on "
         "PyPI: pip install ./packages/tier-s3 from a silt checkout, or dist/silt_tier_s3-*.whl "
         "after nox -s build)"),
        ("gs://b/p", "no tier installed for 'gs://' - pip install silt-tier-gcs (before it is on "
         "PyPI: pip install ./packages/tier-gcs from a silt checkout, or dist/silt_tier_gcs-*.whl "
         "after nox -s build)"),
        ("az://c/p", "no tier installed for 'az://' - pip install silt-tier-azure (before it is "
         "on PyPI: pip install ./packages/tier-azure from a silt checkout, or "
         "dist/silt_tier_azure-*.whl after nox -s build)"),
    ],
)
def test_known_but_missing_tiers_give_an_install_hint(url: str, hint: str) -> None:
    with raises(NoTierError) as info:
        silt.open(url)
    assert str(info.value) == hint


def test_install_hints_name_folders_that_hold_the_distribution() -> None:
    """Each first-party hint's checkout path is the folder whose pyproject builds that name."""
    from pathlib import Path

    from silt.plugins import KNOWN_CACHES, KNOWN_TIERS, install_hint

    repo = Path(__file__).resolve().parents[1]
    for dist in {*KNOWN_TIERS.values(), *KNOWN_CACHES.values()}:
        folder = install_hint(dist).split("pip install ./", 1)[1].split()[0]
        project = (repo / folder / "pyproject.toml").read_text()
        assert f'name = "{dist}"' in project, (dist, folder)


@pytest.mark.parametrize("url", ["relative/path", "/abs/path", "", "file:/one-slash"])
def test_not_a_url(url: str) -> None:
    with raises(InvalidArgumentError, match="is not a store URL") as info:
        silt.open(url)
    assert "file:///" in str(info.value)


def test_url_of_wrong_type(tmp_path) -> None:
    with raises(InvalidTypeError, match="must be a str such as 'file:///"):
        silt.open(tmp_path)
    with raises(InvalidTypeError):
        silt.open(b"memory://x")


def test_file_url_with_a_host_or_relative_path() -> None:
    with raises(InvalidArgumentError, match="three slashes"):
        silt.open("file://relative/path")


def test_unknown_url_option(url: str) -> None:
    with raises(InvalidArgumentError, match="unknown option"):
        silt.open(url + "?colour=blue")


# --- versions -----------------------------------------------------------------------------------


def test_missing_version_mentions_the_committed_range(url: str) -> None:
    with raises(VersionNotFoundError, match="the root has no committed versions") as info:
        silt.open(url, version=1)
    assert isinstance(info.value, LookupError)
    with silt.open(url) as db:
        for _ in range(3):
            db.put(b"k", b"v")
            db.commit()
    in_all = r"version 7 .*committed versions are 1\.\.3 \(3 in all\)"
    with raises(VersionNotFoundError, match=in_all) as info:
        silt.open(url, version=7)
    assert "open without version=" in str(info.value)
    with raises(VersionNotFoundError, match=r"1\.\.3"):
        silt.open(url, version=0)


@pytest.mark.parametrize("version", ["1", 1.0, True, b"1"])
def test_version_of_wrong_type(url: str, version: object) -> None:
    with raises(InvalidTypeError, match="a version must be an int"):
        silt.open(url, version=version)


@pytest.mark.parametrize("version", [-1, 10**20])
def test_version_out_of_range(url: str, version: int) -> None:
    with raises(InvalidArgumentError, match="a version must be between 0 and"):
        silt.open(url, version=version)


def test_commit_at_or_below_the_base_version(db: silt.DB) -> None:
    db.put(b"k", b"v")
    assert db.commit(5) == 5
    for version in (0, 3, 5):
        with raises(InvalidArgumentError, match=r"cannot commit version \d+: this DB is at "
                    r"version 5; commit a greater version"):
            db.commit(version)
    with raises(InvalidArgumentError, match="between 0 and"):
        db.commit(-1)
    with raises(InvalidTypeError, match="must be an int"):
        db.commit("6")
    with raises(InvalidTypeError, match="meta must map str to str"):
        db.commit(6, meta={"a": 1})
    assert db.version == 5
    assert db.commit() == 6


# --- lifecycle ----------------------------------------------------------------------------------


def test_use_after_close(url: str) -> None:
    db = silt.open(url)
    db.put(b"k", b"v")
    db.commit()
    db.close()
    db.close()  # idempotent
    calls = [
        lambda: db.put(b"k", b"v"),
        lambda: db.put(b"k", b"v", ttl=5),
        lambda: db.get(b"k"),
        lambda: db.delete(b"k"),
        lambda: db.multi_get([b"k"]),
        lambda: db.scan(),
        lambda: db.write(silt.WriteBatch().put(b"k", b"v")),
        lambda: db.flush(),
        lambda: db.commit(),
    ]
    for call in calls:
        with raises(ClosedError, match="is closed; open it again with silt.open"):
            call()
    with silt.open(url) as again:
        assert again.get(b"k") == b"v"


# --- settings -----------------------------------------------------------------------------------


_I64 = 2**63 - 1
ARG, TYP = InvalidArgumentError, InvalidTypeError


@pytest.mark.parametrize(
    ("changes", "cls", "match"),
    [
        ({"memtable_bytes": 0}, ARG, rf"memtable_bytes must be in 1\.\.{_I64}, got 0"),
        ({"block_bytes": 10}, ARG, r"block_bytes must be in 64\.\.536870912, got 10"),
        ({"upload_parallelism": 0}, ARG, r"upload_parallelism must be in 1\.\.1024"),
        ({"bloom_bits_per_key": -1}, ARG, r"bloom_bits_per_key must be in 0\.\.64"),
        ({"bloom_bits_per_key": 65}, ARG, r"bloom_bits_per_key must be in 0\.\.64"),
        ({"compression": "zstd"}, ARG, r"compression must be one of .*'zstd'"),
        ({"memtable_bytes": "1MiB"}, TYP, "memtable_bytes must be an int in .*, got str"),
        ({"block_bytes": 4096.0}, TYP, "block_bytes must be an int in .*, got float"),
        ({"read_parallelism": True}, TYP, "read_parallelism must be an int"),
        ({"max_key_bytes": 2**33}, ARG, r"max_key_bytes must be in 1\.\.536870912"),
        # Absurdly large values that would overflow on-disk fields or thread pools.
        ({"max_value_bytes": 2**32}, ARG, r"max_value_bytes must be in 0\.\.5"),
        ({"memtable_bytes": 2**64}, ARG, rf"memtable_bytes must be in 1\.\.{_I64}"),
        ({"read_parallelism": 10**9}, ARG, r"read_parallelism must be in 1\.\.1024"),
        ({"retain_versions": 0}, ARG, r"retain_versions must be in 1\.\.9{20}, got 0"),
        ({"retain_versions": 10**20}, ARG, r"retain_versions must be in 1\.\."),
        ({"level_size_ratio": 1}, ARG, r"level_size_ratio must be in 2\.\."),
        # The seconds fields: finite, not negative, not absurd, a real number.
        ({"gc_grace_seconds": math.inf}, InvalidArgumentError,
         r"gc_grace_seconds must be a number of seconds in 0\.\.10000000000, got inf"),
        ({"gc_grace_seconds": math.nan}, ARG, r"gc_grace_seconds .* got nan"),
        ({"gc_grace_seconds": -1}, ARG, r"gc_grace_seconds .* got -1"),
        ({"gc_grace_seconds": 1e300}, ARG, r"gc_grace_seconds .* got 1e\+300"),
        ({"gc_grace_seconds": "3600"}, TYP, r"gc_grace_seconds must be a number"),
        ({"gc_grace_seconds": True}, TYP, r"gc_grace_seconds must be a number"),
        ({"compaction_poll_seconds": -math.inf}, InvalidArgumentError,
         r"compaction_poll_seconds must be a number of seconds in 0\.\."),
        ({"compaction_poll_seconds": math.nan}, ARG, r"compaction_poll_seconds"),
    ],
)
def test_bad_settings(changes: dict, cls: type, match: str) -> None:
    with raises(cls, match=match):
        silt.Settings(**changes)
    with raises(cls, match=match):
        silt.Settings().replace(**changes)


def test_unknown_settings_fields() -> None:
    with raises(InvalidArgumentError, match="unknown Settings fields: \\['memtable_size'\\]"):
        silt.Settings().replace(memtable_size=1)
    with raises(InvalidArgumentError, match="unknown Settings fields"):
        silt.Settings.from_dict({"nope": 1})
    assert silt.Settings.from_dict(silt.Settings().to_dict()) == silt.Settings()


def test_settings_must_be_settings(url: str) -> None:
    with raises(InvalidTypeError, match="settings must be a silt.Settings, got dict"):
        silt.open(url, settings={"memtable_bytes": 1024})


def test_open_at_most(url: str) -> None:
    for v in (2, 5, 9):
        with silt.open(url, at_most=v - 1) as db:
            db.put(b"v", str(v).encode())
            assert db.commit(v) == v
    # Each commit that skipped numbers from a base first created a version reserving them,
    # with its base's state: 3 (version 2's state, up to 5) and 6 (version 5's, up to 9). The
    # first commit, on an empty root, has no base to skip from.
    assert silt.versions(url) == [2, 3, 5, 6, 9]
    with silt.open(url, at_most=7) as db:
        assert db.version == 6 and db.manifest.skip_to == 9 and db.get(b"v") == b"5"
        assert db.newer_versions() == [9]
        with raises(InvalidArgumentError, match="commit version 9 or later"):
            db.commit(8)  # reserved: never created
    with silt.open(url, at_most=0) as db:
        assert db.version is None and db.get(b"v") is None
        assert db.newer_versions() == [2, 3, 5, 6, 9]
        with raises(silt.CommitConflict, match="already committed"):
            db.commit(2)
    with raises(InvalidArgumentError, match="either version= or at_most="):
        silt.open(url, version=2, at_most=3)
    with raises(InvalidTypeError, match="at_most must be an int"):
        silt.open(url, at_most="3")
    for at_most in (-2, 10**20, -(2**70)):
        with raises(InvalidArgumentError, match=r"at_most must be between -1 \(open empty\) and"):
            silt.open(url, at_most=at_most)
    with silt.open(url, at_most=-1) as db:  # batch 0 of a stream processor opens at_most=-1
        assert db.version is None


@pytest.mark.parametrize(
    ("meta", "cls", "match"),
    [
        ({"k": "\ud800"}, InvalidArgumentError, r"commit meta entry 'k' is not valid Unicode"),
        ({"\udfff": "v"}, InvalidArgumentError, r"is not valid Unicode \(it holds a lone"),
        ({"k": 1}, InvalidTypeError, r"commit meta must map str to str, got str 'k' -> int"),
        ({b"k": "v"}, InvalidTypeError, r"commit meta must map str to str, got bytes"),
        ([("k", "v")], InvalidTypeError, r"commit meta must be a dict of str to str, got list"),
    ],
)
def test_bad_commit_meta_is_refused_before_anything_is_written(
    url: str, meta: object, cls: type, match: str
) -> None:
    """A lone surrogate in meta used to be committed, and then crashed ``silt ls``/``inspect``."""
    with silt.open(url) as db:
        db.put(b"k", b"v")
        with raises(cls, match=match):
            db.commit(meta=meta)  # type: ignore[arg-type]
        assert silt.versions(url) == []
        assert db.commit(meta={"ok": "\u00e9t\u00e9 \U0001f600"}) == 1
    with silt.open(url) as db:
        assert db.meta == {"ok": "\u00e9t\u00e9 \U0001f600"} and db.get(b"k") == b"v"


def test_gc_grace_must_be_a_finite_number(url: str) -> None:
    """``db.gc(grace_seconds=inf)`` used to raise a bare OverflowError, ``nan`` a bare
    ValueError. (How short a grace may be is a separate rule, checked against the writers'.)"""
    with silt.open(url) as db:
        db.put(b"k", b"v")
        db.commit()
        for grace in (math.inf, -math.inf, math.nan):
            with raises(InvalidArgumentError,
                        match=r"grace_seconds must be a finite number of seconds >= 0, got"):
                db.gc(grace_seconds=grace)
        for grace in ("60", b"60", True, [60]):
            with raises(InvalidTypeError, match="grace_seconds must be a number of seconds, got"):
                db.gc(grace_seconds=grace)  # type: ignore[arg-type]
        assert db.get(b"k") == b"v" and silt.versions(url) == [1]


# --- the Spark binding's numeric options (checked when the query is built) ----------------------


@pytest.mark.parametrize(
    ("delay", "cls", "match"),
    [
        ("inf seconds", InvalidArgumentError, r"watermark_delay must be a finite interval"),
        ("-inf ms", InvalidArgumentError, r"watermark_delay must be a finite interval"),
        ("nan minutes", InvalidArgumentError, r"watermark_delay must be a finite interval"),
        ("1e300 days", InvalidArgumentError, r"watermark_delay must be at most 92233720368\d+ ms"),
        (2**80, InvalidArgumentError, r"watermark_delay must be at most 9223372036854775 ms"),
        (-1, InvalidArgumentError, r"watermark_delay must not be negative, got -1"),
        ("-5 seconds", InvalidArgumentError, r"watermark_delay must not be negative"),
        ("ten seconds", InvalidArgumentError, r"watermark_delay: cannot parse interval"),
        (1.5, InvalidTypeError, r"watermark_delay must be ms or an interval string, got 1\.5"),
        (math.inf, InvalidTypeError, r"watermark_delay must be ms or an interval string"),
        (True, InvalidTypeError, r"watermark_delay must be ms or an interval string"),
        (None, InvalidTypeError, r"watermark_delay must be ms or an interval string"),
    ],
)
def test_spark_watermark_delays(delay: object, cls: type, match: str) -> None:
    """``"inf seconds"`` used to raise a bare OverflowError while the query was built."""
    with raises(cls, match=match):
        _api.parse_delay_ms(delay)  # type: ignore[arg-type]


def test_spark_durations() -> None:
    for name in ("window_duration", "slide_duration", "ttl"):
        for value, cls, match in [
            ("inf hours", InvalidArgumentError, "must be a finite interval"),
            ("nan s", InvalidArgumentError, "must be a finite interval"),
            (dt.timedelta.max, InvalidArgumentError, "must be at most 9223372036854775 ms"),
            (10**19, InvalidArgumentError, "must be at most 9223372036854775 ms"),
            (0, InvalidArgumentError, "must be positive, got 0"),
            (dt.timedelta(0), InvalidArgumentError, "must be positive"),
            (-dt.timedelta(seconds=1), InvalidArgumentError, "must be positive"),
            (2.5, InvalidTypeError, "must be ms, a timedelta or an interval string"),
        ]:
            with raises(cls, match=f"{name} {match}"):
                _api._duration_ms(value, name)
        assert _api._duration_ms(dt.timedelta(minutes=2), name) == 120_000
        assert _api._duration_ms("1.5 s", name) == 1500


@pytest.mark.parametrize(
    ("num_shards", "key_groups", "cls", "match"),
    [
        (0, 256, InvalidArgumentError, r"num_shards must be between 1 and key_groups \(256\)"),
        (-3, 256, InvalidArgumentError, "num_shards must be between 1"),
        (300, 256, InvalidArgumentError, "num_shards must be between 1"),
        (10**30, 256, InvalidArgumentError, "num_shards must be between 1"),
        (4, 0, InvalidArgumentError, "key_groups must be between 1 and 65536, got 0"),
        (4, 2**17, InvalidArgumentError, "key_groups must be between 1 and 65536"),
        (True, 256, InvalidTypeError, "num_shards must be an int, got bool"),
        (4.0, 256, InvalidTypeError, "num_shards must be an int, got float"),
        (4, math.inf, InvalidTypeError, "key_groups must be an int, got float"),
        (4, "256", InvalidTypeError, "key_groups must be an int, got str"),
    ],
)
def test_spark_layout_options(num_shards: object, key_groups: object, cls: type,
                              match: str) -> None:
    with raises(cls, match=match):
        _api.operator_spec("aggregate", "file:///tmp/x", num_shards, key_groups,  # type: ignore[arg-type]
                   False, None)


def test_spark_state_ttls_and_timers() -> None:
    """State TTLs and timers given to a processor's handle: inf and nan used to surface as a
    bare OverflowError/ValueError (or, for a TTL, at the first write)."""
    for ttl in (math.inf, math.nan, 0, -5, 2**64, 1e300):
        with raises(InvalidArgumentError, match="ttlDurationMs must be a positive number of ms"):
            _state._ttl_seconds(ttl)  # type: ignore[arg-type]
    with raises(InvalidTypeError, match="ttlDurationMs must be a number of ms"):
        _state._ttl_seconds("1000")  # type: ignore[arg-type]
    assert _state._ttl_seconds(1500) == 1.5
    # The timestamp check runs before the handle touches its task.
    handle = _processor.StatefulProcessorHandle(None, time_mode="processingtime")  # type: ignore[arg-type]
    for expiry in (math.inf, -math.inf, math.nan, 2**63, -(2**63) - 1):
        with raises(InvalidArgumentError, match="timer timestamp .* is out of range"):
            handle._check_timer(expiry)
    with raises(InvalidTypeError, match="a timer is an int timestamp in ms, got str"):
        handle._check_timer("5")
    assert handle._check_timer(1700000000000.0) == 1_700_000_000_000
