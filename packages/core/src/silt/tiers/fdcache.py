"""A bounded, process-wide cache of the read-only descriptors the ``file://`` tier reads through.

A ranged read (:meth:`silt.tiers.file.FileStore.get_range`) used to open, read and close the file
each time: for an 8 KiB block that is most of a block-cache miss (the path check, ``open`` and
``close`` cost about as much as the ``pread``). Descriptors are kept here instead, keyed by
``(root, key)``, least recently used first out, at most :data:`MAX_OPEN` per process whatever
the number of stores and DBs that share it.

Why a kept descriptor never returns what an uncached read would not:

* **Deleted or replaced objects.** An exact hit (:meth:`FdCache.borrow`, what
  :meth:`~silt.tiers.file.FileStore.get_range` uses) checks ``fstat(fd).st_nlink``: once the
  file has no name left (GC deleted it, or a ``put`` renamed another file over it, in this
  process or any other on the host), the descriptor is dropped and the read opens the path
  again, so it fails with :class:`~silt.errors.NotFoundError` (or reads the new object) exactly
  like an uncached read. ``put`` and ``delete_many`` through any store of this process drop the
  entry first (:meth:`FdCache.invalidate`). silt never reuses an SST's name, so even a
  descriptor read a moment after its file was unlinked returns that object's own bytes, never
  another's.
* **Lenient hits.** :meth:`FdCache.borrow` with ``exact=False`` (the SST reader's direct reads,
  :meth:`~silt.tiers.file.FileStore.direct_reader`) checks a descriptor at most every
  :data:`RECHECK_SECONDS`, and on its first use after any ``put`` or delete made through a store
  of this process (:meth:`FdCache.invalidate` makes every descriptor due, whatever its
  identity: the same file can be cached under an operator root's identity and a shard's). So an
  object deleted in this process reads as gone at once, and one deleted by another process
  within :data:`RECHECK_SECONDS`: until then a read returns that immutable object's own bytes,
  as a read that started just before the delete would have.
* **Descriptor numbers.** A descriptor is closed only when no read is using it (a use count),
  so an eviction in one thread can never let another thread's ``pread`` land on a number the
  kernel has meanwhile given to a different file.
* **Space of deleted files.** A kept descriptor holds its file's blocks on disk after the name
  is gone. Deletes through a store of this process drop it at once; for deletes by another
  process (a GC elsewhere), every open of a descriptor and every :data:`SWEEP_EVERY`-th read
  check, at most once per :data:`SWEEP_SECONDS`, every kept descriptor and drop those whose file
  has no name left; :meth:`FileStore.close` drops all of a root's.
* **fork.** A forked child starts with an empty cache and a fresh lock (it closes its copies of
  the inherited descriptors); the parent's are untouched. Descriptors are opened close-on-exec,
  so a spawned process (the compaction subprocess) inherits none.

Known limits: on a network file system a file another host deleted may keep ``st_nlink > 0``
on this client (NFS's silly rename) until the server says the handle is stale; until then a read
returns that immutable object's bytes, and then the error drops the descriptor and the retried
read reopens the path. Caching is off where ``os.pread`` is missing (Windows, where an open file
also could not be deleted).

Thread safety: every function may be called from any thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable

from .._ext import accelerate


def _default_max_open() -> int:
    """128, or an eighth of this process's soft ``RLIMIT_NOFILE`` when that is smaller."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - no resource module
        return 128
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 128
    return max(1, min(128, soft // 8))


#: Most descriptors this process keeps open for reads (0 turns caching off).
MAX_OPEN = _default_max_open() if hasattr(os, "pread") else 0
#: A sweep for descriptors of deleted files runs on an open or every this many reads ...
SWEEP_EVERY = 1024
#: ... and at most this often.
SWEEP_SECONDS = 1.0
#: A lenient borrow (``FdCache.borrow(ident, exact=False)``) checks that a descriptor's file
#: still has a name at most this often (seconds): an ``fstat`` costs about as much as the
#: ``pread`` of a block.
RECHECK_SECONDS = 0.1


class Fd:
    """One cached descriptor: ``fd``, how many reads use it, whether it is out of the cache
    (``dropped``: closed by the last :meth:`FdCache.release`), and when its file was last seen
    to have a name (``checked``, ``time.monotonic()``, in the cache's ``epoch`` then)."""

    __slots__ = ("fd", "users", "dropped", "checked", "epoch")

    def __init__(self, fd: int, checked: float = float("-inf"), epoch: int = -1) -> None:
        self.fd = fd
        self.users = 1
        self.dropped = False
        self.checked = checked
        self.epoch = epoch


class FdCache:
    """Least recently used descriptors by an identity (the file tier's ``(root, key)``).

    :meth:`borrow` or :meth:`adopt` hand out an :class:`Fd` the caller must :meth:`release`;
    ``capacity`` bounds the descriptors kept between reads (those in use by reads at the moment
    of an eviction close when the last of them finishes).

    A block read borrows with :meth:`lend` (a lenient hit, no check, no Python call of its own
    when compiled) and returns with :meth:`release`. ``lock``, ``entries`` (identity ->
    :class:`Fd`, least recently used first), ``reads``, ``hits`` and ``epoch`` are public
    because the pure :class:`silt.tiers.blockread.CachedReads` makes :meth:`lend` and
    :meth:`release` inline on this class (no frame per read), under ``lock``, with the same
    rules.

    Identities are ``str`` or tuples of ``str`` (the file tier's ``(root, key)``): the
    compiled twin (``silt._speedups.FdCache``, selected where built) changes its state in
    stretches of C that the GIL keeps whole instead of under a lock, which holds only while
    hashing and comparing an identity run no Python code. It keeps the same counts and
    evicts the same descriptors; its ``entries`` is a plain dictionary in no particular order
    (each :class:`Fd`'s ``used`` stamp is its order of use) and it has no ``lock``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self.entries: OrderedDict[Hashable, Fd] = OrderedDict()
        self.lock = threading.Lock()
        self.reads = 0
        self._swept = time.monotonic()
        #: Bumped by :meth:`invalidate`: a lenient borrow rechecks a descriptor of an older one.
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.entries)

    def borrow(self, ident: Hashable, exact: bool = True) -> Fd | None:
        """The cached descriptor of ``ident`` if its file still has a name, else ``None`` (the
        caller opens the path and :meth:`adopt`\\ s the new descriptor).

        ``exact`` (the default) checks the name now. ``exact=False`` trusts a check made less
        than :data:`RECHECK_SECONDS` ago with no :meth:`invalidate` since (see the module
        docstring: a file deleted by another process meanwhile may still be read).
        """
        with self.lock:
            entry = self.entries.get(ident)
            if entry is None:
                self.misses += 1
                return None
            self.entries.move_to_end(ident)
            entry.users += 1
            self.reads += 1
            sweep = self.reads % SWEEP_EVERY == 0
        if sweep:
            self.sweep()
        now = time.monotonic()
        if not exact and entry.epoch == self.epoch and now - entry.checked < RECHECK_SECONDS:
            self.hits += 1
            return entry
        epoch = self.epoch  # read before the check: an invalidate() during it forces another
        try:
            alive = os.fstat(entry.fd).st_nlink > 0
        except OSError:
            alive = False
        if alive:
            entry.checked = now
            entry.epoch = epoch
            self.hits += 1  # a statistic: an unlocked += may lose a count, never a descriptor
            return entry
        self.discard(ident, entry)
        self.release(entry)
        with self.lock:
            self.misses += 1
        return None

    def lend(self, ident: Hashable) -> Fd | None:
        """A block read's borrow (:class:`silt.tiers.blockread.CachedReads`): ``ident``'s
        descriptor, its use counted (:meth:`release` it), when it is cached, of the current
        ``epoch`` and checked less than :data:`RECHECK_SECONDS` ago; else ``None`` and nothing
        counted (the caller takes the checked path: :meth:`borrow`). Every
        :data:`SWEEP_EVERY`-th read sweeps, as in :meth:`borrow`.
        """
        now = time.monotonic()
        with self.lock:
            entry = self.entries.get(ident)
            if (entry is None or entry.epoch != self.epoch
                    or not now - entry.checked < RECHECK_SECONDS):
                return None
            self.entries.move_to_end(ident)
            entry.users += 1
            self.hits += 1
            self.reads += 1
            sweep = self.reads % SWEEP_EVERY == 0
        if sweep:
            try:
                self.sweep()
            except BaseException:
                self.release(entry)
                raise
        return entry

    def adopt(self, ident: Hashable, fd: int) -> Fd:
        """Keep the freshly opened ``fd`` for ``ident`` (the caller holds it: :meth:`release` it);
        evicts the least recently used descriptors beyond the capacity."""
        # Never checked: a delete between the caller's open and here is seen by the next borrow.
        entry = Fd(fd)
        if self.capacity <= 0:
            entry.dropped = True
            return entry
        self.sweep()
        doomed: list[int] = []
        with self.lock:
            old = self.entries.pop(ident, None)
            if old is not None:
                self._drop(old, doomed)
            self.entries[ident] = entry
            while len(self.entries) > self.capacity:
                _, evicted = self.entries.popitem(last=False)
                self._drop(evicted, doomed)
        _close_all(doomed)
        return entry

    def release(self, entry: Fd) -> None:
        """The end of one read through ``entry``; closes it if it was dropped meanwhile."""
        with self.lock:
            entry.users -= 1
            close = entry.dropped and entry.users == 0
        if close:
            _close_all([entry.fd])

    def discard(self, ident: Hashable, entry: Fd | None = None) -> None:
        """Drop ``ident``'s descriptor (only if it is ``entry``, when given): its file was
        deleted or replaced, or a read through it failed."""
        doomed: list[int] = []
        with self.lock:
            current = self.entries.get(ident)
            if current is not None and (entry is None or current is entry):
                del self.entries[ident]
                self._drop(current, doomed)
        _close_all(doomed)

    def invalidate(self, ident: Hashable) -> None:
        """An object was written or deleted through a store of this process: drop ``ident``'s
        descriptor and make every other one due for a check on its next lenient borrow."""
        with self.lock:
            self.epoch += 1
        self.discard(ident)

    def sweep(self, *, force: bool = False) -> int:
        """Drop the descriptors whose file has no name left (deleted by any process); at most
        once per :data:`SWEEP_SECONDS` unless ``force``. Returns how many were dropped."""
        now = time.monotonic()
        with self.lock:
            if not force and now - self._swept < SWEEP_SECONDS:
                return 0
            self._swept = now
            kept = list(self.entries.items())
        dead = []
        # Unlocked: a descriptor closed meanwhile (its number maybe reused) belongs to an entry
        # already out of the cache, which discard() below leaves alone.
        for ident, entry in kept:
            try:
                if os.fstat(entry.fd).st_nlink == 0:
                    dead.append((ident, entry))
            except OSError:
                dead.append((ident, entry))
        for ident, entry in dead:
            self.discard(ident, entry)
        return len(dead)

    def discard_where(self, belongs: object) -> None:
        """Drop every descriptor whose identity ``belongs(ident)`` accepts (a store's close)."""
        doomed: list[int] = []
        with self.lock:
            for ident in [i for i in self.entries if belongs(i)]:  # type: ignore[operator]
                self._drop(self.entries.pop(ident), doomed)
        _close_all(doomed)

    def clear(self) -> None:
        """Drop every descriptor."""
        self.discard_where(lambda ident: True)

    @staticmethod
    def _drop(entry: Fd, doomed: list[int]) -> None:
        """Mark ``entry`` out of the cache; queue its close when no read uses it (lock held)."""
        entry.dropped = True
        if entry.users == 0:
            doomed.append(entry.fd)

    def _after_fork_in_child(self) -> None:
        """A forked child's copy: new lock, its copies of the inherited descriptors closed."""
        self.lock = threading.Lock()
        self._swept = time.monotonic()
        self.epoch += 1
        fds = [entry.fd for entry in self.entries.values()]
        self.entries = OrderedDict()
        _close_all(fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# The compiled Fd and FdCache (silt._speedups: their state in C, read and changed so by the
# compiled block reads) where built. (silt._speedups imports this module; a cycle Python
# resolves: it reads this module's names only when a cache is used.)
COMPILED = accelerate(globals(), ("Fd", "FdCache"))

#: The process's cache, shared by every ``file://`` store.
FDS = FdCache(MAX_OPEN)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: FDS._after_fork_in_child())

__all__ = ["COMPILED", "FDS", "MAX_OPEN", "RECHECK_SECONDS", "Fd", "FdCache"]
