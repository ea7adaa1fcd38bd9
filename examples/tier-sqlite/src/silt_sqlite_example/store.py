"""``SqliteStore``: silt objects as rows of one SQLite database file.

URL: ``sqlite:///var/state.db[/prefix][?busy_timeout=5&page_size=1000]``. The path ends at its
first segment ending in ``.db``, ``.sqlite`` or ``.sqlite3`` and the rest is the key prefix
(:mod:`silt.tierkit.pathurls`), so ``sqlite:///var/state.db/jobs/clicks`` keeps the objects of
``jobs/clicks`` in the file ``/var/state.db``, beside those of other prefixes.

How each rule of the object-store contract is met:

* **Objects are rows** of ``silt_objects(key TEXT PRIMARY KEY, data BLOB)``; ``key`` is the
  prefix plus the object key. Keys compare as bytes (SQLite's ``BINARY`` collation on UTF-8
  text orders like Python strings), so ``list`` is a range scan in key order.
* **Create-only** is one ``INSERT ... ON CONFLICT(key) DO NOTHING``: SQLite runs a statement
  atomically under the database's write lock, which every process on this host that opens the
  file takes, so exactly one creator wins. The lock is not reliable on network file systems
  (SQLite's own advice), hence ``shared_across = "host"``: two hosts must not write one file.
* **Durability**: WAL journal mode with ``synchronous=FULL``; each write is its own
  transaction, committed (and synced) when the method returns.
* **Waiting for the lock** is SQLite's busy handler, bounded by ``busy_timeout``: that wait is
  this tier's only retry layer, so when it runs out the request fails with
  ``RetriesExhaustedError`` and the engine does not retry it again (docs/plugins.md, "Local
  waits").
* **Thread safety**: every method may be called from any thread. A store keeps a pool of
  connections, one per concurrent caller (SQLite releases the GIL while it works, so reads
  overlap each other and the writes); a connection is used by one thread at a time. The
  store's own writes queue on a lock of the store, so ``busy_timeout`` bounds only the wait
  for *other* processes (SQLite's busy handler polls and is not fair: eight busy threads of
  one process could starve one of them past any timeout). A store travels to another process
  as its path, prefix and options and opens connections there (SQLite connections must not
  cross a ``fork``: a forked child that inherits a store opens its own).

Simplified, knowingly: an object is one row (at most SQLite's ``SQLITE_MAX_LENGTH``, 1 GB by
default, far above an SST), and the file does not shrink when objects are deleted (SQLite
reuses the free pages; ``VACUUM`` it offline to give them back).
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from silt.errors import NotFoundError, RetriesExhaustedError, StoreError
from silt.store import ObjectInfo
from silt.tierkit import TierOptions, TierStore, parse_path_url, path_url

SCHEME = "sqlite"
#: A URL's path ends at its first segment with one of these endings (silt.tierkit.pathurls).
SUFFIXES = (".db", ".sqlite", ".sqlite3")
EXAMPLE = "sqlite:///var/state.db/prefix"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS silt_objects (key TEXT PRIMARY KEY NOT NULL, data BLOB NOT NULL)"
)
#: SQLite's result codes (primary, the low byte) that mean "another connection holds the lock".
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_FULL, _CANTOPEN, _READONLY = 13, 14, 8


@dataclass(frozen=True)
class SqliteOptions(TierOptions):
    """``?busy_timeout=`` seconds a request waits for another writer's lock (SQLite's busy
    handler; then ``RetriesExhaustedError``), ``?page_size=`` keys per ``list`` query."""

    SCHEME = SCHEME

    busy_timeout: float = 5.0
    page_size: int = 1000


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``sqlite:///var/state.db/prefix?opts`` -> ``(path, prefix, options)``."""
    path, prefix, options = parse_path_url(url, (SCHEME,), suffixes=SUFFIXES, example=EXAMPLE)
    return path, prefix, options


class SqliteStore(TierStore):
    """Objects under ``prefix`` in the SQLite file ``path`` (absolute, ending in one of
    :data:`SUFFIXES`; created with its directories on the first write, never by a read)."""

    scheme = SCHEME
    options_type = SqliteOptions
    sdk_errors = (sqlite3.Error,)
    parse_url = staticmethod(parse_url)
    local = True  # rows are read from this host's disk: a read costs microseconds
    shared_across = "host"  # SQLite's locks hold between the processes of one host only

    def __init__(self, path: str, prefix: str = "", *,
                 options: SqliteOptions | None = None) -> None:
        # The constructor from_url and unpickling call: cls(root, prefix, options=...).
        path = os.path.abspath(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else path
        url = path_url(SCHEME, path, prefix, suffixes=SUFFIXES)  # refuses what cannot round-trip
        super().__init__(path, prefix, options, picklable=True)
        self.options: SqliteOptions
        self.url = url  # TierStore writes scheme://root/prefix; a path is percent-encoded
        self.path = path
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pid = os.getpid()

    # --- connections ---------------------------------------------------------------------------

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        """An idle connection, or a new one; ``None`` when the file does not exist and
        ``create`` is false (a read of a database nobody wrote yet)."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        if not os.path.exists(self.path):
            if not create:
                return None
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.options.busy_timeout,
                               isolation_level=None, check_same_thread=False)
        # Switching a new file to WAL can be refused at once with SQLITE_BUSY, without SQLite's
        # busy handler, while another process sets it up too: wait for it here, within the same
        # busy_timeout (this tier's one wait), instead of failing the request.
        deadline = time.monotonic() + self.options.busy_timeout
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(_SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
                if (code in _BUSY or "locked" in str(exc)) and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                conn.close()
                raise
            except BaseException:
                conn.close()
                raise
        with self._lock:
            self._opened.append(conn)
        return conn

    def _run(self, action: str, key: str | None, work: Any, *, create: bool = False,
             write: bool = False, absent: Any = None) -> Any:
        """Run ``work(connection)`` on a pooled connection, its errors mapped (``absent``: the
        answer when the database file does not exist and ``create`` is false; ``write``: after
        this store's other writes, under its write lock)."""
        if self._pid != os.getpid():  # a forked child: never use the parent's connections
            self._idle, self._opened, self._pid = queue.SimpleQueue(), [], os.getpid()
            self._lock, self._write_lock = threading.Lock(), threading.Lock()

        def call() -> Any:
            conn = self._connect(create)
            if conn is None:
                return absent() if callable(absent) else absent
            try:
                if write:
                    with self._write_lock:
                        result = work(conn)
                else:
                    result = work(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            self._idle.put(conn)
            return result

        return self._request(action, key, call)

    def _release(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

    # --- errors --------------------------------------------------------------------------------

    def _error(self, exc: BaseException, action: str, key: str | None) -> StoreError:
        """Map a ``sqlite3.Error`` onto silt's errors (the file's path is no secret)."""
        where = f"{action} {key!r} in {self.url}" if key is not None else f"{action} {self.url}"
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        text = str(exc)
        if code in _BUSY or "locked" in text:
            return RetriesExhaustedError(
                f"{where}: the database stayed locked by another writer for busy_timeout="
                f"{self.options.busy_timeout:g} s (SQLite's wait, this tier's only retry); "
                "try again later, or raise busy_timeout in the URL"
            )
        if code == _FULL:
            return StoreError(f"{where}: the disk is full; free space and retry")
        if code in (_CANTOPEN, _READONLY):
            return StoreError(f"{where}: cannot open {self.path!r} for writing ({text}); check "
                              "that its directory exists and is writable")
        return StoreError(f"{where}: {type(exc).__name__}: {text}")

    # --- requests ------------------------------------------------------------------------------

    def _missing(self, key: str) -> NotFoundError:
        return NotFoundError(f"object {key!r} does not exist in {self.url}")

    def _read(self, key: str, full: str, start: int | None, length: int | None) -> bytes:
        if start is None or length is None:
            sql, args = "SELECT data FROM silt_objects WHERE key = ?", (full,)
        else:
            sql, args = ("SELECT substr(data, ?, ?) FROM silt_objects WHERE key = ?",
                         (start + 1, length, full))

        def work(conn: sqlite3.Connection) -> bytes:
            row = conn.execute(sql, args).fetchone()
            if row is None:
                raise self._missing(key)
            return bytes(row[0] or b"")  # substr() of an empty blob is NULL

        def absent() -> bytes:
            raise self._missing(key)

        return self._run("read", key, work, absent=absent)

    def _head(self, key: str, full: str) -> None:
        self._read(key, full, 0, 0)

    def _put(self, key: str, full: str, data: bytes) -> None:
        self._run("write", key, lambda conn: conn.execute(
            "INSERT INTO silt_objects (key, data) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET data = excluded.data", (full, data)),
            create=True, write=True)

    def _create(self, key: str, full: str, data: bytes) -> bool:
        return self._run("create", key, lambda conn: conn.execute(
            "INSERT INTO silt_objects (key, data) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
            (full, data)).rowcount == 1, create=True, write=True)

    def _delete(self, names: list[str]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")  # take the write lock now: the busy wait applies
            conn.executemany("DELETE FROM silt_objects WHERE key = ?", [(n,) for n in names])
            conn.execute("COMMIT")

        self._run("delete", None, work, write=True)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        low = self.prefix + prefix
        after = self.prefix + start_after if start_after is not None else ""
        sql = ("SELECT key, length(data) FROM silt_objects WHERE key >= ? AND key > ? "
               "ORDER BY key LIMIT ?")
        while True:  # one short query per page: no connection is held between pages
            page = self._run("list", None, lambda conn, after=after: conn.execute(
                sql, (low, after, self.options.page_size)).fetchall(), absent=list)
            for name, size in page:
                if not name.startswith(low):
                    return
                yield ObjectInfo(name[len(self.prefix):], size)
            if len(page) < self.options.page_size:
                return
            after = page[-1][0]


__all__ = ["EXAMPLE", "SCHEME", "SUFFIXES", "SqliteOptions", "SqliteStore", "parse_url"]
