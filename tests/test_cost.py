"""Request cost: the price table, and the requests every version records (silt.cost).

Each committed version records what its writer paid since its previous commit; the records of
consecutive versions must add up to what the writer's store saw, each request once.
"""

from __future__ import annotations

import json
import math

import pytest
import silt
from silt import paths
from silt.cli import main
from silt.cost import (
    META_REQUESTS,
    S3_STANDARD,
    Prices,
    decode_requests,
    encode_requests,
    recorded_requests,
    request_classes,
)
from silt.errors import InvalidArgumentError
from silt.metrics import KINDS
from silt.plugins import open_store
from silt.versions import read_manifest


def _totals(db: silt.DB) -> dict[str, int]:
    return db.stats()["requests_by_kind"]


def _recorded(url: str) -> dict[int, dict[str, int]]:
    store = open_store(url)
    try:
        return {v: recorded_requests(read_manifest(store, v).meta) for v in silt.versions(url)}
    finally:
        store.close()


def test_versions_record_each_request_of_their_writer_once(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    settings = silt.Settings(compaction="none")
    with silt.open(url, settings=settings) as db:
        for batch in range(4):
            for i in range(50):
                db.put(f"k{batch}-{i:03d}".encode(), b"v" * 20)
            db.get(b"k0-001")
            db.commit(meta={"batch": str(batch)})
        paid = _totals(db)
    recorded = _recorded(url)
    assert sorted(recorded) == [1, 2, 3, 4]
    summed = {k: sum(r.get(k, 0) for r in recorded.values()) for k in KINDS}
    # Every commit's delta was small: carried inline by its manifest, one PUT each, recorded.
    assert all(r["PUT"] == 1 for r in recorded.values()), recorded
    assert summed["PUT"] == paid["PUT"]
    # What no version recorded is only what the last commit did after its manifest was
    # written (its fencing check reads): never a write, never more than a few reads.
    unrecorded = {k: paid[k] - summed[k] for k in KINDS}
    assert all(n >= 0 for n in unrecorded.values()), unrecorded
    assert unrecorded["PUT"] == 0 and sum(unrecorded.values()) <= 3, unrecorded

    # A reopened writer starts its own count: opening (LIST, GETs) lands in its first commit.
    with silt.open(url, settings=settings) as db:
        db.put(b"late", b"v")
        db.commit()
        assert META_REQUESTS not in db.meta and db.meta == {"batch": "3"}
    fifth = _recorded(url)[5]
    assert fifth["PUT"] == 1 and fifth.get("LIST", 0) + fifth.get("GET", 0) >= 1  # (inline)


def test_commit_meta_may_not_use_silts_own_keys(tmp_path) -> None:
    with silt.open((tmp_path / "db").as_uri()) as db:
        db.put(b"k", b"v")
        with pytest.raises(InvalidArgumentError, match=r"'silt\.requests'.*silt's own"):
            db.commit(meta={META_REQUESTS: "PUT=0"})
        with pytest.raises(InvalidArgumentError, match="silt's own"):
            db.commit(meta={"silt.anything": "x"})
        assert db.version is None  # nothing was written
        assert db.commit(meta={"silt_other": "fine"}) == 1


def test_prices() -> None:
    assert S3_STANDARD.cost({"PUT": 1000, "LIST": 1000, "GET": 1000, "DELETE": 1000}) == (
        pytest.approx(0.005 + 0.005 + 0.0004))
    assert S3_STANDARD.cost({"RANGE_GET": {"count": 2000, "bytes": 7}}) == pytest.approx(0.0008)
    assert request_classes({"PUT": 2, "LIST": 1, "GET": 4, "RANGE_GET": 1, "DELETE": 3}) == {
        "class_a": 3, "class_b": 5, "free": 3}
    custom = Prices.parse("put=0.01, GET=0")
    assert custom.price("PUT") == 0.01 and custom.price("GET") == 0.0
    assert custom.price("LIST") == S3_STANDARD.price("LIST")  # not named: the default's
    for bad, message in (("PUT", "KIND=DOLLARS"), ("PUT=abc", "KIND=DOLLARS"),
                         ("POST=1", "unknown request kind 'POST'"),
                         ("PUT=-1", "finite number >= 0"), ("PUT=nan", "finite number >= 0"),
                         ("PUT=inf", "finite number >= 0")):
        with pytest.raises(InvalidArgumentError, match=message):
            Prices.parse(bad)
    with pytest.raises(InvalidArgumentError, match="finite number"):
        Prices("mine", {"GET": math.inf})


def test_requests_text_round_trips_and_junk_is_unknown() -> None:
    counts = {"PUT": 2, "LIST": 1, "GET": 0, "RANGE_GET": 12}
    text = encode_requests(counts)
    assert text == "LIST=1,PUT=2,RANGE_GET=12"
    assert decode_requests(text) == {"LIST": 1, "PUT": 2, "RANGE_GET": 12}
    for junk in ("", "PUT", "PUT=-1", "PUT=1,EVIL=2", "PUT=1e3", "PUT=1;LIST=2", "PUT= 1"):
        assert decode_requests(junk) == {}, junk


def test_inspect_shows_the_cost_of_a_version(tmp_path, capsys) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url) as db:
        db.put(b"k", b"v")
        db.commit()
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("requests"))
    # A one-key delta is carried inline by the manifest: its one PUT is the commit's only one.
    assert "PUT 1" in line and "at S3 Standard prices" in line and "est. $0.0000" in line
    assert main(["inspect", url, "--json", "--prices", "PUT=1000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["requests"]["PUT"] == 1 and META_REQUESTS not in doc["meta"]
    puts_usd = 1 * 1000 / 1000.0
    assert doc["cost"]["usd"] >= puts_usd and doc["cost"]["class_a"] >= 1
    assert main(["inspect", url, "--prices", "PUT=free"]) == 2  # a usage error
    assert "KIND=DOLLARS_PER_1000" in capsys.readouterr().err


def test_inspect_a_root_sums_its_dbs_last_versions(tmp_path, capsys) -> None:
    root = (tmp_path / "op").as_uri()
    for shard in ("kg-0-127", "kg-128-255"):
        with silt.open(f"{root}/{shard}") as db:
            db.put(b"k", b"v")
            db.commit()
    assert main(["inspect", root, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["db"] for r in doc["dbs"]] == ["kg-0-127", "kg-128-255"]
    per_db = [r["cost"]["class_a"] for r in doc["dbs"]]
    assert all(n >= 2 for n in per_db) and doc["cost"]["class_a"] == sum(per_db)
    assert main(["inspect", root]) == 0
    assert "requests of these versions: class A" in capsys.readouterr().out


def test_a_manifest_without_a_record_shows_unknown(tmp_path, capsys) -> None:
    """Versions written before silt recorded requests (or by another writer) show ``-``."""
    url = (tmp_path / "db").as_uri()
    with silt.open(url) as db:
        db.put(b"k", b"v")
        db.commit()
    store = open_store(url)
    try:
        m = read_manifest(store, 1)
        assert m.meta[META_REQUESTS]
        from dataclasses import replace
        old = replace(m, meta={})
        store.delete_many([paths.manifest_key(1)])
        store.put(paths.manifest_key(1), old.encode())
    finally:
        store.close()
    assert main(["ls", url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[4] == "-"
    assert main(["inspect", url]) == 0
    assert "- (not recorded" in capsys.readouterr().out
