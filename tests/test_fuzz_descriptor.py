"""Fuzzing an operator root's descriptor (``silt-spark.json``): a crafted one is silt's clear
error, never an internal one.

The descriptor is stored metadata like a manifest, read back by
:func:`silt_spark.runtime._shard.descriptor_of` (bounded JSON, every field checked). Starting from
descriptors as each operator writes them (aggregate, window aggregate, deduplication, join,
stateful processor), hundreds of crafted ones are made: a value anywhere replaced by another JSON
value (wrong types, huge, negative, deep), a field dropped, bytes flipped, inserted or cut, and
deep nesting. For each, ``descriptor_of`` returns a checked descriptor or raises
:class:`~silt.errors.CorruptionError`, and ``silt inspect`` (with and without decoded values)
answers with silt's own one-line error or a description: never "unexpected ... This is a bug".
No Spark session is needed: the shards are plain DBs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import cli, plugins
from silt.errors import CorruptionError
from silt.tiers.file import FileStore
from silt_spark.runtime import _names, _root

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

_BASE = {"format": 2, "incarnation": "9f1c", "lifecycle": 1, "key_groups": 256,
         "num_shards": 2, "generation": 1,
         "layouts": [{"generation": 0, "num_shards": 1}, {"generation": 1, "num_shards": 2}],
         "key_columns": [["user", "string"], ["day", "date"]]}
#: Descriptors as each operator writes them.
REAL: list[dict[str, Any]] = [
    {**_BASE, "operator": "aggregate", "state_columns": [["amount", "i64"], ["x", "f64"]],
     "outputs": [["count", "count", None, "bigint"], ["sum(amount)", "sum", "amount", "bigint"]]},
    {**_BASE, "operator": "window", "state_columns": [["amount", "i64"]],
     "window": {"window_ms": 10000, "slide_ms": 5000}, "window_time_type": "timestamp",
     "outputs": [["count", "count", None, "bigint"]]},
    {**_BASE, "operator": "dedup", "dedup_time": "event_time"},
    {**_BASE, "operator": "join", "join_time_index": 1,
     "join": {"how": "left_outer", "bucket_us": 1000000, "left": ["a", "t"], "right": ["b"]},
     "join_side_types": {"left": [["a", "string"], ["t", "timestamp"]],
                         "right": [["b", "bigint"]]}},
    {**_BASE, "operator": "processor",
     "state_schemas": {"count": {"kind": "value", "key": None, "base": 0,
                                 "versions": [[["n", "bigint", True]]]},
                       "seen": {"kind": "map", "key": [["k", "string", False]], "base": 1,
                                "versions": [[["v", "int", True]], [["v", "bigint", True]]]}}},
    {"operator": "aggregate", "key_groups": 64, "num_shards": 2},  # format 1
]

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 3), st.sampled_from([2**63, 2**64]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(["", "aggregate", "x" * 5000, "generation", "num_shards"]),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)


def _paths(value: Any, here: tuple = ()) -> Iterator[tuple]:
    """Every path to a value inside ``value`` (dict keys and list indexes)."""
    yield here
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*here, i))


def _set(doc: Any, path: tuple, value: Any, drop: bool) -> Any:
    if not path:
        return value
    target = doc
    for step in path[:-1]:
        target = target[step]
    if drop:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@st.composite
def crafted(draw: st.DrawFn) -> bytes:
    doc = copy.deepcopy(draw(st.sampled_from(REAL)))
    how = draw(st.sampled_from(["splice", "splice", "splice", "drop", "bytes", "nest"]))
    if how in ("splice", "drop"):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths[1:] if how == "drop" else paths))
        doc = _set(doc, path, draw(_values), how == "drop")
        return json.dumps(doc).encode()
    if how == "nest":
        depth = draw(st.sampled_from([20, 1000, 100_000]))
        return (b'{"operator": "aggregate", "key_groups": 8, "num_shards": 1, "key_columns": '
                + b"[" * depth + b"]" * depth + b"}")
    data = bytearray(json.dumps(doc).encode())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "insert", "cut"]))
        if op == "flip":
            data[at] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An operator root with two shards holding a committed version each."""
    base = tmp_path_factory.mktemp("descriptor") / "op"
    for shard in range(2):
        url = f"{base.as_uri()}/{shard_dir(shard)}"
        with silt.open(url) as db:
            db.put(b"\x00\x01k", b"v")
            db.commit(0)
    return base


def shard_dir(shard: int) -> str:
    spec = _root.spec_of(REAL[0], "file:///x")
    return spec.shard_url(shard).rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def spark_plugin() -> Iterator[None]:
    """silt_spark's plugin registered as its entry point would (autoloading stays off)."""
    saved = plugins.DEFAULT_PLUGINS
    plugins.DEFAULT_PLUGINS = (*saved, ("spark", "silt_spark.plugin"))
    plugins.reset_registry()
    yield
    plugins.DEFAULT_PLUGINS = saved
    plugins.reset_registry()


def test_real_descriptors_are_read_back_as_written(root: Path) -> None:
    for doc in REAL:
        (root / _names.DESCRIPTOR).write_bytes(json.dumps(doc).encode())
        got = _root.descriptor_of(FileStore(str(root)))
        assert got is not None and got["operator"] == doc["operator"]
        assert got["layouts"][-1] == {"generation": got["generation"],
                                      "num_shards": doc["num_shards"]}


@FUZZ
@given(data=crafted())
def test_a_crafted_descriptor_is_a_clear_error(root: Path, spark_plugin: None,
                                               capsys: pytest.CaptureFixture[str],
                                               data: bytes) -> None:
    (root / _names.DESCRIPTOR).write_bytes(data)
    try:
        desc = _root.descriptor_of(FileStore(str(root)))
    except CorruptionError as exc:
        assert exc.object_name == _names.DESCRIPTOR
        desc = None
    if desc is not None:  # still as silt_spark writes it: what reads it can use it
        spec = _root.spec_of(desc, root.as_uri())
        assert spec.layouts[-1] == (spec.generation, spec.num_shards)
    for argv in (["inspect", root.as_uri()], ["inspect", "--values", "3", root.as_uri()]):
        status = cli.main(argv)
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err and "is a bug" not in err, (data[:300], err)
        assert status in (cli.EXIT_OK, cli.EXIT_ERROR, cli.EXIT_CORRUPT)
        if status != cli.EXIT_OK:
            assert err.startswith("silt: error: ") and err.count("\n") == 1, err
        if desc is None:
            assert status == cli.EXIT_CORRUPT and _names.DESCRIPTOR in err
