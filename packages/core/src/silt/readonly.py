"""A DB opened to read only (``silt.open(url, read_only=True)``): every write is refused at the
API boundary with :class:`~silt.errors.ReadOnlyError`, so its open need not prepare a commit.

On a remote store, :func:`silt.open` reads the GC markers beside the version (the LIST of the
newest GC epoch, then the LIST of ``gc/``: :mod:`silt.coldopen`) only so that the handle's first
commit is a warm one and its first upload finds its writer grace announced. A handle that never
commits needs neither, so a read-only open makes the requests it made before the markers were
read at open: the LIST of ``manifest/``, then the manifest and its fate record (and, with
``at_most``, the guessed manifest and its SSTs' tails, which are the first reads' requests): 2
round trips, 2 LISTs fewer. Nothing of the GC/fencing protocol is skipped by that: the markers
serve checks a commit makes after its PUT, and no commit is ever made from this handle.
Opening at ``version=`` still lists ``gc/``: the horizon and pins say whether that version is
retained, which a reader needs too.

What is refused: :meth:`~silt.DB.put`, :meth:`~silt.DB.put_many`, :meth:`~silt.DB.delete`,
:meth:`~silt.DB.delete_range`, :meth:`~silt.DB.write`, :meth:`~silt.DB.flush`,
:meth:`~silt.DB.commit`, :meth:`~silt.DB.reference` (into this DB; a read-only DB may be the
*source* of another DB's reference), :meth:`~silt.DB.checkpoint` (it writes a pin) and
:meth:`~silt.DB.gc` (it deletes). Reads, :meth:`~silt.DB.advance`, :meth:`~silt.DB.catch_up`
and the version queries work as on any DB (a read-only handle knows no GC markers, so those
list where a warm handle would GET: :mod:`silt.reopen`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from .db import DB
from .errors import ReadOnlyError
from .gc import GcReport
from .writebatch import WriteBatch


class ReadOnlyDB(DB):
    """A :class:`silt.DB` whose writes raise :class:`~silt.errors.ReadOnlyError` (module
    docstring). Create it with ``silt.open(url, read_only=True)``."""

    read_only = True

    def _refuse(self, what: str) -> NoReturn:
        self._check_open()
        raise ReadOnlyError(
            f"{self._pub!r} was opened with read_only=True: {what} would write; open it "
            "without read_only to write"
        )

    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> None:
        self._refuse("put()")

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        self._refuse("put_many()")

    def delete(self, key: bytes) -> None:
        self._refuse("delete()")

    def delete_range(self, start: bytes, end: bytes) -> None:
        self._refuse("delete_range()")

    def write(self, batch: WriteBatch) -> None:
        self._refuse("write()")

    def flush(self) -> None:
        self._refuse("flush()")

    def commit(self, version: int | None = None, *, meta: dict[str, str] | None = None) -> int:
        self._refuse("commit()")

    def reference(self, source: DB, start: bytes | None = None, end: bytes | None = None) -> int:
        self._refuse("reference()")

    def checkpoint(self, name: str) -> int:
        self._refuse("checkpoint() (a pin)")

    def gc(self, *, retain_versions: int | None = None, grace_seconds: float | None = None,
           dry_run: bool = False) -> GcReport:
        self._refuse("gc()")
