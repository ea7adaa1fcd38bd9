"""The SQLite example tier's tests: silt's conformance suite on a fresh database file, and the
engine on it. (silt's own CI runs a longer version: tests/test_tier_sqlite_example.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import silt
from silt.testing import StoreConformance
from silt_sqlite_example.store import SqliteStore


class TestSqliteStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        store = SqliteStore.from_url(f"sqlite://{tmp_path}/state.db/conformance")
        yield store
        store.close()


def test_the_engine_runs_on_it(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/state.db/db"
    with silt.open(url, store=SqliteStore.from_url(url)) as db:
        db.put(b"k", b"v")
        assert db.commit() == 1
    with silt.open(url, store=SqliteStore.from_url(url)) as db:
        assert (db.version, db.get(b"k")) == (1, b"v")
