"""The example tier rooted at a path (examples/tier-sqlite): the conformance suite, its URLs,
the engine on it through ``silt.open("sqlite://...")``, and the suite catching planted mistakes.

Nothing is installed: the example's ``src`` goes on ``sys.path`` and its plugin is registered
directly on a registry. The planted mistakes (an overwriting ``put_if_absent``, a ``get_range``
that ignores its length, a check-then-insert ``put_if_absent``) are subclasses of the example's
store run through the suite by a pytest of their own, in a subprocess: each must fail every
time (10 runs of 10) with a message that shows the values.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import silt
from silt.errors import InvalidArgumentError, NotFoundError, RetriesExhaustedError
from silt.plugins import Registry, open_store
from silt.testing import StoreConformance

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tier-sqlite"
sys.path.insert(0, str(EXAMPLE / "src"))

import silt_sqlite_example  # noqa: E402 - from the example's source folder, as installed
from silt_sqlite_example.store import SqliteStore  # noqa: E402


class TestSqliteStore(StoreConformance):
    """The whole suite on a fresh database file."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        store = SqliteStore.from_url(f"sqlite://{tmp_path}/state.db")
        yield store
        store.close()


class TestSqliteStoreUnderPrefix(StoreConformance):
    """A store on ``state.db/kg-0-1`` behaves like a whole store, with neighbours around it."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        outside = SqliteStore(str(tmp_path / "state.db"))
        for key in ("kg-0-0/before", "kg-0-1", "kg-0-10/x", "kg-0-2/after"):
            outside.put(key, b"neighbour")
        outside.close()
        store = SqliteStore.from_url(f"sqlite://{tmp_path}/state.db/kg-0-1?page_size=7")
        yield store
        store.close()


@pytest.fixture
def registry() -> Registry:
    registry = Registry()
    silt_sqlite_example.silt_register(registry=registry)
    return registry


def test_registers_its_scheme_and_parses_path_urls(registry: Registry, tmp_path: Path) -> None:
    assert set(registry.tiers) == {"sqlite"}
    url = f"sqlite://localhost{tmp_path}/a%20b.sqlite3/jobs/clicks?busy_timeout=0.5"
    store = open_store(url, registry)
    assert isinstance(store, SqliteStore)
    assert (store.path, store.prefix) == (f"{tmp_path}/a b.sqlite3", "jobs/clicks/")
    assert store.url == f"sqlite://{tmp_path}/a%20b.sqlite3/jobs/clicks"
    assert store.options.busy_timeout == 0.5
    assert (store.local, store.shared_across) == (True, "host")
    assert not os.path.exists(store.path)  # reads of a database nobody wrote create nothing
    assert list(store.list()) == []
    with pytest.raises(NotFoundError):
        store.get("k")
    assert not os.path.exists(store.path)
    store.put("k", b"v")
    again = open_store(store.url, registry)  # the url opens the same objects
    assert again.get("k") == b"v"
    copy = pickle.loads(pickle.dumps(store))  # cls(root, prefix, options=...)
    assert (copy.url, copy.options, copy.get("k")) == (store.url, store.options, b"v")


@pytest.mark.parametrize(
    ("url", "text"),
    [
        ("sqlite:///var/state", "names no file ending in .db"),
        ("sqlite://host/var/state.db", "names the host 'host'"),
        ("sqlite://user:secret@host/var/state.db", "holds credentials"),
        ("sqlite:///var/../state.db", "'..'"),
        ("sqlite:///var/state.db/a/../b", "'..'"),
        ("sqlite:///var/state.db?speed=fast", "unknown option"),
        ("sqlite:///var/state.db?busy_timeout=0", "busy_timeout"),
    ],
)
def test_rejects_bad_urls(registry: Registry, url: str, text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(text)) as info:
        open_store(url, registry)
    assert "secret" not in str(info.value)


def test_storage_options_reach_the_store(registry: Registry, tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}/s.db", registry,
                       storage_options={"busy_timeout": "2.5"})
    assert store.options.busy_timeout == 2.5


def test_a_lock_held_past_busy_timeout_is_retries_exhausted(tmp_path: Path) -> None:
    """SQLite's busy wait is the tier's one retry layer: when it runs out the engine must not
    wait again (RetriesExhaustedError, which silt.store.retrying does not retry)."""
    import sqlite3

    store = SqliteStore.from_url(f"sqlite://{tmp_path}/s.db?busy_timeout=0.2")
    store.put("k", b"v")
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        with pytest.raises(RetriesExhaustedError, match=r"locked by another writer.*0\.2 s"):
            store.put("k2", b"v")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.put("k2", b"v")
    assert store.get("k2") == b"v"


def test_the_engine_opens_commits_and_reopens_through_silt_open(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(silt.plugins, "_registry", registry)
    url = f"sqlite://{tmp_path}/state.db/jobs/clicks"
    with silt.open(url) as db:
        for i in range(200):
            db.put(f"key-{i:04d}".encode(), f"value-{i}".encode())
        assert db.commit() == 1
        db.delete(b"key-0007")
        assert db.commit() == 2
    with silt.open(url) as db:
        assert db.version == 2
        assert db.get(b"key-0006") == b"value-6"
        assert db.get(b"key-0007") is None
        assert len(list(db.scan())) == 199
    keys = [info.key for info in SqliteStore.from_url(url).list("manifest/")]
    assert keys == ["manifest/00000000000000000001", "manifest/00000000000000000002"]


# --- planted mistakes: the suite must catch each, every time, and show the values ----------------

PLANTED = '''
import sys
import threading
sys.path.insert(0, {src!r})
import pytest
from silt.testing import StoreConformance
from silt_sqlite_example.store import SqliteStore


class Overwriting(SqliteStore):
    """put_if_absent that overwrites (an upsert) and always reports a win."""
    def _create(self, key, full, data):
        self._put(key, full, data)
        return True


class IgnoringLength(SqliteStore):
    """get_range that returns everything from start (the length ignored)."""
    def _read(self, key, full, start, length):
        whole = super()._read(key, full, None, None)
        return whole if start is None else whole[start:]


class CheckThenInsert(SqliteStore):
    """put_if_absent as a read, then a write: not atomic."""
    def _create(self, key, full, data):
        try:
            self._head(key, full)
            return False
        except FileNotFoundError:
            self._put(key, full, data)
            return True


class ProcessLocked(CheckThenInsert):
    """The same, under a lock of this process: atomic for its threads, not for processes."""
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_lock = threading.Lock()

    def _create(self, key, full, data):
        with self._create_lock:
            return super()._create(key, full, data)


for run in range(10):
    for cls in (Overwriting, IgnoringLength, CheckThenInsert, ProcessLocked):
        def store(self, tmp_path, cls=cls):
            s = cls(str(tmp_path / "state.db"))
            yield s
            s.close()
        name = f"Test{{cls.__name__}}Run{{run}}"
        globals()[name] = type(name, (StoreConformance,), {{"store": pytest.fixture(store)}})
'''

#: mistake -> (the conformance tests that must fail on every run, what their output must show)
MISTAKES = {
    "Overwriting": (["test_put_if_absent_creates_once"], ["assert True is False"]),
    "IgnoringLength": (["test_get_range_inside"], ["assert b'0123456789' == b'0123'"]),
    "CheckThenInsert": (
        ["test_put_if_absent_race_has_one_winner", "test_put_if_absent_race_between_processes"],
        ["put_if_absent returned True to contenders [", "(exactly one must win)"],
    ),
    "ProcessLocked": (["test_put_if_absent_race_between_processes"],
                              ["(exactly one must win)"]),
}


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One pytest run, in a subprocess, of the named tests against every planted mistake, ten
    times each; its output."""
    folder = tmp_path_factory.mktemp("planted")
    (folder / "test_planted.py").write_text(PLANTED.format(src=str(EXAMPLE / "src")))
    names = sorted({test for tests, _ in MISTAKES.values() for test in tests})
    selector = " or ".join(f"({cls} and {test})" for cls, (tests, _) in MISTAKES.items()
                           for test in tests)
    assert names
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rf", "-q",
         "--tb=short", "-k", selector, str(folder / "test_planted.py")],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600,
    )
    return result.stdout + result.stderr


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_the_suite_catches_each_planted_mistake_every_time(planted_run: str, mistake: str
                                                           ) -> None:
    tests, shown = MISTAKES[mistake]
    for test in tests:
        failed = set(re.findall(rf"FAILED \S*::Test{mistake}Run(\d+)::{test}\b", planted_run))
        assert failed == {str(run) for run in range(10)}, (test, planted_run[-3000:])
    assert not re.search(r"\d+ passed", planted_run), planted_run[-3000:]  # none escaped
    for text in shown:
        assert text in planted_run, (text, planted_run[-3000:])
