"""Every public DB method, fed a wrong-typed value for any argument, raises silt's
:class:`~silt.errors.InvalidTypeError` naming that argument, and writes nothing.

A table of wrong values per kind of argument (a key, a sequence of keys or values, a sequence
of ranges, a DB or DBs, a version number, a name, a number of seconds) is tried on every method
that takes one. Nothing the failed call did may show: the DB's contents, its version, and the
objects under its root are as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import silt
from silt.errors import InvalidTypeError

SETTINGS = silt.Settings(memtable_bytes=4096, block_bytes=64, compaction="none",
                         compaction_mode="external", compaction_poll_seconds=0)

#: Wrong values for an argument that takes one key (bytes).
NOT_A_KEY = [1, 2.5, True, "k", object(), [b"k"], (b"k",), {b"k": b"v"}, {b"k"}, {"k"}]
#: Wrong values for an argument that takes many items (a sequence).
NOT_A_SEQUENCE = [1, 2.5, True, None, object(), b"k", "k", bytearray(b"k"), memoryview(b"k"),
                  {b"k": b"v"}, {b"k": 1}, iter]
#: Wrong values inside a sequence of keys.
BAD_KEYS = [[1], [b"a", 2], [None], [b"a", "b"], [[b"a"]], [(b"a", b"b")], [object()]]
#: Wrong values for a sequence of (start, end) ranges.
BAD_RANGES = [[b"a"], [b"ab"], [(b"a",)], [(b"a", 1)], [(1, b"b")], [(b"a", b"b", b"c")],
              [None], [[b"a", b"b"], 1], [{b"a": b"b"}], [(b"a", "b")]]
#: Wrong values for arguments that take DBs.
NOT_DBS = [b"k", [b"k"], 1, [1], "db", ["db"], [None], object(), [object()], {b"k": 1}]
#: Wrong values for a version number or a count.
NOT_AN_INT = [1.5, "3", b"3", [3], None, object()]
#: Wrong values for a name.
NOT_A_NAME = [1, b"name", None, ["name"], object()]
#: Wrong values for a number of seconds.
NOT_SECONDS = ["5", b"5", [5], object(), {5: 5}]


def _as_many(like: Any, item: bytes) -> list[bytes]:
    """As many ``item`` as ``like`` holds when it is a list (else one)."""
    return [item] * (len(like) if isinstance(like, list) else 1)


def _cases() -> list[tuple[str, str, Callable[[silt.DB, Any], Any], list[Any]]]:
    """``(method, argument, call, wrong values)``: ``call(db, value)`` calls ``method`` with
    ``value`` for ``argument`` and valid values for the others."""
    def drain(result: Any) -> Any:
        return list(result) if hasattr(result, "__next__") else result

    return [
        ("put", "key", lambda db, v: db.put(v, b"v"), NOT_A_KEY),
        ("put", "value", lambda db, v: db.put(b"k", v), [*NOT_A_KEY, None]),
        ("put", "ttl", lambda db, v: db.put(b"k", b"v", ttl=v), NOT_SECONDS),
        ("delete", "key", lambda db, v: db.delete(v), [*NOT_A_KEY, None]),
        ("delete_range", "start", lambda db, v: db.delete_range(v, b"z"), [*NOT_A_KEY, None]),
        ("delete_range", "end", lambda db, v: db.delete_range(b"a", v), [*NOT_A_KEY, None]),
        ("write", "batch", lambda db, v: db.write(v), [*NOT_A_SEQUENCE, [(b"k", b"v", None)]]),
        ("put_many", "keys", lambda db, v: db.put_many(v, _as_many(v, b"v")),
         [*NOT_A_SEQUENCE, *BAD_KEYS]),
        ("put_many", "values", lambda db, v: db.put_many(_as_many(v, b"k"), v),
         [*NOT_A_SEQUENCE, *BAD_KEYS]),
        ("put_many", "keys", lambda db, v: db.put_many(v, v), NOT_A_SEQUENCE),
        ("get", "key", lambda db, v: db.get(v), [*NOT_A_KEY, None]),
        ("multi_get", "keys", lambda db, v: db.multi_get(v), [*NOT_A_SEQUENCE, *BAD_KEYS]),
        ("multi_scan", "ranges", lambda db, v: db.multi_scan(v), [*NOT_A_SEQUENCE, *BAD_RANGES]),
        ("scan", "start", lambda db, v: drain(db.scan(v)), NOT_A_KEY),
        ("scan", "end", lambda db, v: drain(db.scan(None, v)), NOT_A_KEY),
        ("scan", "prefix", lambda db, v: drain(db.scan(prefix=v)), NOT_A_KEY),
        ("committed_records", "start", lambda db, v: drain(db.committed_records(v)), NOT_A_KEY),
        ("committed_records", "end", lambda db, v: drain(db.committed_records(None, v)),
         NOT_A_KEY),
        ("changed_keys", "since", lambda db, v: db.changed_keys(v), NOT_DBS),
        ("changed_keys", "start", lambda db, v: db.changed_keys([db], v), NOT_A_KEY),
        ("changed_keys", "end", lambda db, v: db.changed_keys([db], None, v), NOT_A_KEY),
        ("reference", "source", lambda db, v: db.reference(v), NOT_DBS),
        ("commit", "version", lambda db, v: db.commit(v), [x for x in NOT_AN_INT if x is not None]),
        ("commit", "meta", lambda db, v: db.commit(meta=v), [1, b"m", "m", [("a", "b")],
                                                              {"a": 1}, {1: "a"}, {b"a": b"b"}]),
        ("checkpoint", "name", lambda db, v: db.checkpoint(v), NOT_A_NAME),
        ("gc", "retain_versions", lambda db, v: db.gc(retain_versions=v),
         [x for x in NOT_AN_INT if x is not None]),
        ("gc", "grace_seconds", lambda db, v: db.gc(grace_seconds=v), NOT_SECONDS),
        ("gc", "dry_run", lambda db, v: db.gc(dry_run=v), [None, 0, 1, "no", b"", [True]]),
        ("advance", "at_most", lambda db, v: db.advance(v), NOT_AN_INT),
        ("advance_newer", "at_most", lambda db, v: db.advance_newer(v), NOT_AN_INT),
        ("catch_up", "at_most", lambda db, v: db.catch_up(v), NOT_AN_INT),
        ("wait_for_compaction", "timeout", lambda db, v: db.wait_for_compaction(v), NOT_SECONDS),
    ]


CASES = _cases()


def _objects(store: Any) -> dict[str, int]:
    return {o.key: o.size for o in store.list("")}


@pytest.mark.parametrize("method,argument,call,values", CASES,
                         ids=[f"{m}-{a}" for m, a, _, _ in CASES])
def test_a_wrong_type_is_refused_naming_the_argument_and_writes_nothing(
        method: str, argument: str, call: Callable[[silt.DB, Any], Any],
        values: list[Any]) -> None:
    url = f"memory://wrong-types-{uuid.uuid4().hex}/db"
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(30):
            db.put(b"k%02d" % i, b"v%d" % i)
        db.commit()
        db.delete_range(b"k05", b"k08")  # a range tombstone over committed state
        db.put(b"pending", b"1")
        before = (list(db.scan()), db.version, _objects(db.store))
        for value in values:
            with pytest.raises(InvalidTypeError) as info:
                call(db, value)
            assert isinstance(info.value, TypeError)
            assert argument in str(info.value), (method, value, str(info.value))
            assert (list(db.scan()), db.version, _objects(db.store)) == before, (method, value)
