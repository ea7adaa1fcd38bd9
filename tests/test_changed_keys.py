"""``DB.changed_keys``: the keys that may differ between two versions, from the manifests' deltas.

Checked against a model (dicts of each version's state) over random writes, deletes, range
deletes, flushes and compactions: every key whose value differs is reported, and the SSTs read
are only those the newer version added (never the whole state).
"""

from __future__ import annotations

import uuid

import silt
from hypothesis import given, settings
from hypothesis import strategies as st

#: Deltas are uploaded (no inline deltas), so that compaction has SSTs to rewrite.
SETTINGS = silt.Settings(compaction_mode="thread", l0_compaction_trigger=2, inline_delta_bytes=0)


#: No compaction: every SST a version adds holds exactly its writes.
STILL = silt.Settings(compaction_mode="thread", l0_compaction_trigger=1000,
                      l0_stall_trigger=2000)


def _open(url: str, version: int | None = None, settings: silt.Settings = SETTINGS) -> silt.DB:
    return silt.open(url, version=version, settings=settings)


def test_changes_between_versions_are_found_from_the_new_ssts() -> None:
    url = f"memory://changed-{uuid.uuid4().hex}"
    with _open(url, settings=STILL) as db:
        for i in range(200):
            db.put(b"k%03d" % i, b"v1")
        db.commit()  # 1
        db.put(b"k005", b"v2")
        db.delete(b"k006")
        db.put(b"new", b"x")
        db.delete_range(b"k100", b"k110")
        db.commit()  # 2
        db.put(b"k007", b"v3")
        db.commit()  # 3
    with _open(url, 1, STILL) as old, _open(url, 3, STILL) as new:
        keys = new.changed_keys([old])
        changed = {k for k in keys if old.get(k) != new.get(k)}
        want = {b"k005", b"k006", b"new", b"k007", *(b"k%03d" % i for i in range(100, 110))}
        assert changed == want
        assert set(keys) == changed  # no compaction ran: nothing else was rewritten
        assert new.changed_keys([old], b"k100", b"k105") == [b"k%03d" % i for i in range(100, 105)]
    with _open(url, 3, STILL) as same:
        assert same.changed_keys([same]) == []
    # Compaction rewrites unchanged keys into new SSTs: they are reported (a superset), and
    # comparing values leaves exactly the changes.
    with _open(url) as db:
        for i in range(3):
            db.put(b"late%d" % i, b"x")
            db.commit()  # 4, 5, 6
        assert db.wait_for_compaction(10)
        db.put(b"k008", b"v4")
        top = db.commit()
        assert db.stats()["compactions_adopted"] >= 1
    with _open(url, 1) as old, _open(url, top) as new:
        keys = new.changed_keys([old])
        assert b"k000" in keys  # unchanged, but rewritten by the compaction
        changed = {k for k in keys if old.get(k) != new.get(k)}
        assert changed == want | {b"k008", b"late0", b"late1", b"late2"}


OPS = st.lists(st.tuples(
    st.sampled_from(["put", "delete", "range", "commit", "compact"]),
    st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_every_changed_key_is_reported(ops) -> None:
    url = f"memory://changed-{uuid.uuid4().hex}"
    model: dict[bytes, bytes] = {}
    states: dict[int, dict[bytes, bytes]] = {}
    with _open(url) as db:
        for n, (op, a, b) in enumerate(ops):
            ka, kb = b"k%02d" % a, b"k%02d" % b
            if op == "put":
                db.put(ka, b"%d" % n)
                model[ka] = b"%d" % n
            elif op == "delete":
                db.delete(ka)
                model.pop(ka, None)
            elif op == "range" and ka < kb:
                db.delete_range(ka, kb)
                for k in [k for k in model if ka <= k < kb]:
                    del model[k]
            elif op == "commit":
                states[db.commit()] = dict(model)
            elif op == "compact":
                db.commit()
                states[db.version] = dict(model)
                assert db.wait_for_compaction(10)
        states[db.commit()] = dict(model)
    versions = sorted(states)
    for i, v1 in enumerate(versions):
        for v2 in versions[i + 1:]:
            with _open(url, v1) as old, _open(url, v2) as new:
                keys = set(new.changed_keys([old]))
                differ = {k for k in states[v1].keys() | states[v2].keys()
                          if states[v1].get(k) != states[v2].get(k)}
                assert differ <= keys, (v1, v2, differ - keys)
