"""The errors silt raises.

Every error derives from :class:`SiltError`, so ``except silt.errors.SiltError`` catches anything
silt reports on purpose. Where a builtin fits, the error also derives from it (bad input is a
``ValueError``/``TypeError``, a missing object a ``FileNotFoundError``), so generic handlers work.

Messages say what was wrong and what to do about it. Object-store errors never include
credentials.
"""

from __future__ import annotations


class SiltError(Exception):
    """Base class of every error silt raises on purpose."""


class InvalidArgumentError(SiltError, ValueError):
    """A caller passed a value silt cannot accept (the message says which and why)."""


class InvalidTypeError(SiltError, TypeError):
    """A caller passed a value of the wrong type, for example ``str`` where ``bytes`` is needed."""


class NoTierError(SiltError, ValueError):
    """No installed plugin provides the URL scheme (or cache) that was asked for."""


class ClosedError(SiltError):
    """The database was used after :meth:`silt.DB.close`."""


class ReadOnlyError(SiltError):
    """A write (put, commit, checkpoint, GC...) on a DB opened with ``read_only=True``."""


class VersionNotFoundError(SiltError, LookupError):
    """The requested version has no manifest under the root (never committed or collected)."""


class CommitConflict(SiltError):
    """Another writer already committed the version this commit tried to create.

    Raised by :meth:`silt.DB.commit`. Nothing of this writer's commit is visible; the SSTs it
    uploaded are unreferenced garbage that ``silt gc`` removes. Reopen the latest version (or the
    version your processing should start from) and redo the work.

    ``withdrawn`` is True when the version exists but its writer withdrew it: its number is
    never committed again, so a commit of that exact number can never succeed.
    """

    def __init__(self, message: str, *, version: int | None = None,
                 withdrawn: bool = False) -> None:
        super().__init__(message)
        self.version = version
        self.withdrawn = withdrawn


class FencedError(SiltError):
    """This writer is stale: garbage collection has moved past the version it tried to commit.

    The commit is withdrawn. Reopen the latest version and redo the work from there.
    """


class ReferenceConflict(SiltError, ValueError):
    """:meth:`silt.DB.reference` cannot express the requested state as references.

    Raised when the referenced ranges overlap, or when one sibling SST would have to be listed
    twice with clip ranges that do not touch (its middle was rewritten by a compaction of one
    source). Nothing was changed; copy the range instead (read it and write it).
    """


class CorruptionError(SiltError):
    """Stored bytes failed a checksum or structural check; they are never returned as data.

    ``object_name`` is the object's key under the root and ``offset`` the byte offset of the
    damaged region (``None`` when the whole object is unusable).
    """

    def __init__(self, object_name: str, offset: int | None, detail: str) -> None:
        where = f"{object_name!r} at offset {offset}" if offset is not None else repr(object_name)
        super().__init__(
            f"corruption in {where}: {detail}. The stored object is damaged; restore it from a "
            "replica or open an older version that does not reference it"
        )
        self.object_name = object_name
        self.offset = offset
        self.detail = detail


class StoreError(SiltError, OSError):
    """An object-store request failed and retrying it will not help."""


class WithdrawnError(StoreError):
    """The commit's manifest was created, then withdrawn by this writer before ``commit``
    returned: garbage collection may have collected an SST it publishes (the commit stalled past
    the grace period while a GC pass ran). The version reads as its parent and its number is
    never used again; the DB stays at its base with its writes pending, so commit again (young
    SSTs are re-uploaded) or reopen and redo the work.
    """


class TransientStoreError(StoreError):
    """An object-store request failed in a way that a retry may fix (timeouts, 5xx, throttling)."""


class RetriesExhaustedError(TransientStoreError):
    """A transient failure that the tier has already retried as far as its retry policy allows
    (its SDK's retries, or its own loop for what the SDK does not retry).

    The engine does not retry it again at once (:func:`silt.store.retrying`); a later operation
    (the next commit, a reopened DB) may succeed. Raise tiers' retry options (``max_attempts``
    and ``read_attempts``, or ``retry_deadline`` on ``gs://``) to ride out longer outages.
    """


class NotFoundError(StoreError, FileNotFoundError):
    """The object does not exist in the store."""


class AlreadyExistsError(StoreError, FileExistsError):
    """A create-only write found the object already there."""


class PreconditionError(StoreError):
    """A conditional request's precondition did not hold."""


__all__ = [
    "AlreadyExistsError",
    "ClosedError",
    "CommitConflict",
    "CorruptionError",
    "FencedError",
    "WithdrawnError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "NoTierError",
    "NotFoundError",
    "PreconditionError",
    "ReadOnlyError",
    "RetriesExhaustedError",
    "SiltError",
    "StoreError",
    "TransientStoreError",
    "VersionNotFoundError",
]
