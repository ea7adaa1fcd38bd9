"""Crafted names never lead a store outside its root (invariant 9, docs/architecture.md).

Names that become part of an object's location come from two places: URLs (API input) and stored
metadata (a manifest entry's sibling ``db`` name and SST ``id``, a compaction record's outputs, a
``refs/`` marker). Each is checked by one rule all tiers share (:func:`silt.tierkit.check_name`)
after every decoding step. These tests attack that rule with the whole class of crafted names -
``..``, ``.``, empty, separators, percent-encoded forms (single and double), NUL and control
characters, overlong names, absolute paths, Unicode look-alikes - on every path a manifest reaches:
reads, ``silt verify``, ``silt compact``, GC, and the URLs a sibling's store is opened from.
"""

from __future__ import annotations

import dataclasses
import os
import unicodedata
import uuid
from urllib.parse import unquote

import pytest
import silt
from hypothesis import given, settings
from hypothesis import strategies as st
from silt import paths
from silt.cli import main
from silt.compaction.record import CompactionRecord
from silt.compaction.task import CompactionTask
from silt.errors import CorruptionError, InvalidArgumentError
from silt.gc import collect_garbage
from silt.manifest import Manifest
from silt.siblings import sibling_url, split_parent
from silt.tierkit import MAX_NAME_BYTES, check_name, check_path, decode_path, name_problem
from silt.tiers.file import FileStore

#: Names that must never be accepted, as stored (already decoded) names. The ones marked with a
#: comment reached another root through the file:// tier before names were checked decoded.
CRAFTED = [
    "",
    ".",
    "..",
    "/",
    "a/b",
    "../other/victim",
    "/abs",
    "\\",
    "..\\other",
    "C:\\other",
    "%2e%2e%2fother%2fvictim",  # decoded by the file tier into ../other/victim
    "%2E%2E%2Fother%2Fvictim",  # the same, upper case
    "..%2fother%2fvictim",  # half encoded
    "%2e%2e",
    "%2f",
    "%5c",
    "%252e%252e%252fother",  # encoded twice
    "%25252e%25252e",  # three times
    "a\x00b",
    "\x00",
    "a\nb",
    "\t",
    "\x7f",
    "\x85",  # a C1 control (NEXT LINE)
    "\u202e..",  # RIGHT-TO-LEFT OVERRIDE
    "\u200b",  # ZERO WIDTH SPACE
    "\u2028",  # LINE SEPARATOR
    "a" * (MAX_NAME_BYTES + 1),
    "\u00e9" * (MAX_NAME_BYTES // 2 + 1),  # 256 UTF-8 bytes in 128 characters
    "\uff0e\uff0e",  # FULLWIDTH FULL STOP x2: NFKC ".."
    "\u2025",  # TWO DOT LEADER: NFKC ".."
    "\u2024",  # ONE DOT LEADER: NFKC "."
    "\ufe52\ufe52",  # SMALL FULL STOP x2
    "..\uff0fother",  # FULLWIDTH SOLIDUS: NFKC "/"
    "a\uff3cb",  # FULLWIDTH REVERSE SOLIDUS
    "a\ufe68b",  # SMALL REVERSE SOLIDUS
    "a\u2215b",  # DIVISION SLASH
    "a\u2044b",  # FRACTION SLASH
    "a\u29f8b",  # BIG SOLIDUS
    "\ud800",  # a lone surrogate
    # percent-escapes that appear only after NFKC folding (a tier that folds, then decodes)
    "\uff052e\uff052e",  # FULLWIDTH PERCENT SIGN: NFKC "%2e%2e", decoded ".."
    "\ufe6a2e\ufe6a2e",  # SMALL PERCENT SIGN
    "\uff052F",  # NFKC "%2F", decoded "/"
    "a\uff055Cb",  # NFKC "a%5Cb", decoded "a\\b"
    "\uff05\uff12\uff45\uff05\uff12\uff45",  # full-width digits and letters too: "%2e%2e"
    "%\uff12\uff46",  # a plain '%' before full-width "2f"
    "\ufdfa" * 15,  # 45 UTF-8 bytes, 495 once NFKC spells each out in 18 characters
]

#: Names that are fine (a tier stores them as one plain path segment).
PLAIN = ["kg-0-63", "01J0000000000000000000000", "a", "...", ".hidden", "my state", "100%",
         "%zz", "caf\u00e9", "\u00e9" * (MAX_NAME_BYTES // 2), "a" * MAX_NAME_BYTES, "x~y_z.1"]


# --- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CRAFTED, ids=repr)
def test_crafted_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a plain name"):
        check_name(name, what="sibling DB name")
    if "/" not in name:  # (a '/' only splits a path into other segments)
        with pytest.raises(InvalidArgumentError):
            check_path(f"state/{name}/x")


@pytest.mark.parametrize("name", PLAIN, ids=repr)
def test_plain_names_are_accepted(name: str) -> None:
    assert check_name(name) == name
    assert check_path(f"/state/{name}/") == f"/state/{name}/"


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_an_accepted_name_is_one_segment_under_every_decoding(name: str) -> None:
    try:
        check_name(name)
    except InvalidArgumentError:
        return
    for form in (name, unquote(name), unicodedata.normalize("NFKC", name),
                 unicodedata.normalize("NFKC", unquote(name))):
        assert "/" not in form and "\\" not in form and form.strip() not in ("", ".", "..")
    assert unquote(name) == name  # nothing left for a decoder to change


#: Characters that fold or decode into something else, to mix into generated names.
_FOLDING = ("%\uff05\ufe6a2eEfF5cC\uff12\uff45\uff46\uff25\uff26\uff43\uff23.\uff0e\ufe52"
            "\u2024\u2025/\uff0f\\\uff3c\ufe68 \u3000\ufdfa")


@given(st.text(st.one_of(st.sampled_from(_FOLDING), st.characters()), max_size=40))
@settings(max_examples=1000, deadline=None)
def test_an_accepted_name_is_accepted_folded_and_decoded(name: str) -> None:
    """Whatever a tier does to an accepted name (NFKC folding, then one percent-decoding, or
    the other way round), the result is an accepted name too."""
    if name_problem(name) is not None:
        return
    for form in (unquote(unicodedata.normalize("NFKC", name)),
                 unicodedata.normalize("NFKC", unquote(name))):
        assert name_problem(form) is None, (name, form)


@given(st.text(min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_sibling_urls_round_trip_through_the_file_tier(name: str) -> None:
    """A name the rule accepts is encoded into the sibling's URL and decoded back to itself by the
    tier: the sibling's store is the folder of that name in the same parent, nowhere else."""
    url = "file:///state/op/a"
    try:
        check_name(name)
    except InvalidArgumentError:
        with pytest.raises(InvalidArgumentError):
            sibling_url(url, name)
        return
    other = sibling_url(url, name)
    assert split_parent(other) == ("file:///state/op", name, "")
    assert FileStore.from_url(other).root == os.path.join("/state/op", name)


@pytest.mark.parametrize(
    "path",
    ["/state/%2e%2e/x", "/state/..%2fx", "/state/%252e%252e/x", "/state/a%00b", "/state/%0a",
     "/state/%ef%bc%8f", "/state/%e2%80%a5/x", "/state/%ff", "/state//x", "/state/./x"],
)
def test_url_paths_are_checked_after_decoding(path: str) -> None:
    with pytest.raises(InvalidArgumentError):
        decode_path(path)
    with pytest.raises(InvalidArgumentError):
        silt.open_store(f"file://{path}")
    with pytest.raises(InvalidArgumentError):
        silt.open_store(f"memory://ns{path}")


# --- crafted references on the tiers ----------------------------------------------------------


@pytest.fixture(params=["file", "memory"])
def roots(request: pytest.FixtureRequest, tmp_path) -> tuple[str, str, str]:
    """``(parent, mine, victim)``: a DB ``mine/db`` and, in another folder, ``other/victim``, whose
    data a crafted reference in ``mine/db`` tries to read. ``mine/db/../../other/victim`` is it."""
    if request.param == "file":
        parent = f"file://{tmp_path}"
    else:
        parent = f"memory://crafted-{uuid.uuid4().hex}"
    return parent, f"{parent}/mine/db", f"{parent}/other/victim"


def _objects(url: str) -> dict[str, int]:
    store = silt.open_store(url)
    try:
        return {i.key: i.size for i in store.list("")}
    finally:
        store.close()


#: Deltas are uploaded (no inline deltas): the names of SST objects are the subject here.
UPLOADED = silt.Settings(inline_delta_bytes=0)


def _craft(mine: str, victim: str, *, db: str | None = None, sst_id: str | None = None) -> None:
    """Commit, as version 2 of ``mine``, a manifest whose entries point at the victim's SSTs
    through the crafted sibling name ``db`` (or the crafted SST id ``sst_id``). The manifest's
    checksum is valid: it is what a hostile writer (or a hand-edited object) would store."""
    with silt.open(victim, settings=UPLOADED) as v:
        v.put(b"secret", b"victim-data")
        v.commit()
    with silt.open(mine, settings=UPLOADED) as m:
        m.put(b"mine", b"1")
        m.commit()
    vstore, mstore = silt.open_store(victim), silt.open_store(mine)
    try:
        theirs = Manifest.decode(vstore.get(paths.manifest_key(1)), "victim")
        own = Manifest.decode(mstore.get(paths.manifest_key(1)), "mine")
        entries = []
        for s in theirs.l0:
            if db is not None:
                entries.append(dataclasses.replace(s, db=db))
            else:
                entries.append(dataclasses.replace(s, id=sst_id))
        crafted = dataclasses.replace(own, version=2, parent=1, token="crafted",
                                      l0=(*entries, *own.l0))
        assert mstore.put_if_absent(paths.manifest_key(2), crafted.encode())
    finally:
        vstore.close()
        mstore.close()


#: Crafted names a hostile manifest can carry in ``db`` (a few of CRAFTED per kind; the rule
#: itself is tested on all of them above).
CRAFTED_DB = ["%2e%2e%2fother%2fvictim", "%2E%2E%2Fother%2Fvictim", "..%2fother%2fvictim",
              "%252e%252e%252fother%252fvictim", "../other/victim", "..", ".", "a\x00b",
              "\uff0e\uff0e\uff0fother\uff0fvictim", "\u2025", "x" * 300, "/abs",
              "\uff052e\uff052e", "\uff052e\uff052e\uff052fother\uff052fvictim", "a\uff055Cb"]


@pytest.mark.parametrize("name", CRAFTED_DB, ids=repr)
def test_a_crafted_sibling_reference_is_corruption_everywhere(
    roots: tuple[str, str, str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parent, mine, victim = roots
    _craft(mine, victim, db=name)
    # reads: the crafted version is refused as damaged metadata, never served
    with pytest.raises(CorruptionError, match="not a plain name"):
        silt.open(mine)
    with pytest.raises(CorruptionError, match="manifest/00000000000000000002"):
        silt.open(mine, version=2)
    with silt.open(mine, version=1) as m:  # the versions before it are untouched
        assert m.get(b"mine") == b"1" and m.get(b"secret") is None
    # silt verify reports it instead of OK
    capsys.readouterr()
    assert main(["verify", mine]) == 2
    out, err = capsys.readouterr()
    assert "corruption" in err and "not a plain name" in err and ": OK" not in out
    # silt compact copies nothing and says why
    before = _objects(mine)
    assert main(["compact", mine, "--policy", "tiered"]) == 2
    out, err = capsys.readouterr()
    assert "not a plain name" in err and "Traceback" not in out + err
    assert _objects(mine) == before
    # GC of the parent cannot tell what the version references: it refuses, deleting nothing
    everything = _objects(parent)
    store = silt.open_store(parent)
    try:
        with pytest.raises(CorruptionError):
            collect_garbage(store, retain_versions=1, grace_seconds=3600)
    finally:
        store.close()
    assert _objects(parent) == everything


@pytest.mark.parametrize(
    "sst_id", ["../../other/victim/sst/X", "a/b", "..", "%2e%2e", "x\x00", "\u2215x"], ids=repr
)
def test_a_crafted_sst_id_is_corruption(roots: tuple[str, str, str], sst_id: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _, mine, victim = roots
    _craft(mine, victim, sst_id=sst_id)
    with pytest.raises(CorruptionError, match="SST id"):
        silt.open(mine)
    capsys.readouterr()
    assert main(["verify", mine]) == 2
    assert "SST id" in capsys.readouterr().err


def test_a_crafted_compaction_output_is_corruption() -> None:
    """A compaction record's outputs are parsed like manifest entries, by the same rule."""
    with silt.open(f"memory://crafted-{uuid.uuid4().hex}/db", settings=UPLOADED) as db:
        db.put(b"k", b"v")
        db.commit()
        info = next(db.manifest.all_ssts())
    record_id = paths.new_id()
    rec = CompactionRecord(id=record_id, base_version=1, created_ms=0,
                           task=CompactionTask(inputs=(info.id,), mode="into_level", target_level=1,
                                               drop_tombstones=False),
                           outputs=(dataclasses.replace(info, db="%2e%2e%2fvictim"),))
    with pytest.raises(CorruptionError, match="not a plain name"):
        CompactionRecord.decode(rec.encode(), paths.compaction_key(record_id))


@pytest.mark.parametrize("name", ["%2e%2e", "a/b", "..%2f..%2fother"])
def test_gc_keeps_everything_of_a_db_marked_by_a_crafted_referrer(
    roots: tuple[str, str, str], name: str
) -> None:
    """A ``refs/`` marker whose name is not a plain folder name names no sibling GC could read:
    GC treats the referrer as one it cannot see and keeps every SST of the marked DB."""
    parent, mine, _ = roots
    with silt.open(mine) as m:
        m.put(b"k", b"v")
        m.commit()
    store = silt.open_store(parent)
    try:
        old = f"mine/db/{paths.sst_key(paths.new_id(now_ms=1))}"  # unreferenced, ancient
        store.put(old, b"garbage unless a referrer needs it")
        store.put(f"mine/db/{paths.refs_key(name)}", b"{}")
        report = collect_garbage(store, retain_versions=1, grace_seconds=3600)
        assert old not in report.deleted_ssts
        assert store.get(old)
    finally:
        store.close()


# --- names from URLs: the API boundary -------------------------------------------------------


def test_sibling_names_are_stored_decoded_and_read_back(tmp_path) -> None:
    """A sibling whose folder name needs escaping in a URL is referenced by its decoded name and
    read through the URL the name is encoded into again."""
    source = f"file://{tmp_path}/op/my%20state"
    with silt.open(source, settings=UPLOADED) as src:
        src.put(b"k", b"v")
        src.commit()
        with silt.open(f"file://{tmp_path}/op/b") as b:
            assert b.reference(src) == 1
            b.commit()
    assert os.path.isdir(tmp_path / "op" / "my state")
    with silt.open(f"file://{tmp_path}/op/b") as b:
        assert {s.db for s in b.manifest.all_ssts()} == {"my state"}
        assert b.get(b"k") == b"v"


@pytest.mark.parametrize("name", ["%2e%2e", "..", "%252e%252e", "a%00b", "%e2%80%a5"])
def test_opening_a_crafted_url_is_an_invalid_argument(tmp_path, name: str) -> None:
    for url in (f"file://{tmp_path}/op/{name}", f"memory://ns-{uuid.uuid4().hex}/op/{name}"):
        with pytest.raises(InvalidArgumentError):
            silt.open(url)
    with pytest.raises(InvalidArgumentError):
        split_parent(f"file://{tmp_path}/op/{name}")
