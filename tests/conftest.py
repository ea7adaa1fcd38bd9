"""Shared fixtures for silt's test suite.

The core's tests load only the built-in plugins: whatever else happens to be installed in the
environment must not change their outcome (tests that exercise entry-point discovery turn it on
explicitly).
"""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("SILT_DISABLE_PLUGIN_AUTOLOAD", "1")

import silt
from silt.tiers.memory import MemoryStore

#: Small sizes so a few thousand keys exercise flushes, many blocks and several SSTs.
SMALL = silt.Settings(memtable_bytes=64 * 1024, block_bytes=1024, block_cache_bytes=256 * 1024)


@pytest.fixture(params=["file", "memory"])
def url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh, empty root on each built-in tier."""
    if request.param == "file":
        yield (tmp_path / "root").as_uri()
        return
    name = f"test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


@pytest.fixture
def file_url(tmp_path) -> str:
    """A fresh, empty root on the file:// tier."""
    return (tmp_path / "root").as_uri()


@pytest.fixture
def small() -> silt.Settings:
    return SMALL
