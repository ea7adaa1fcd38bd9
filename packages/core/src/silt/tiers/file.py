"""The ``file://`` tier: objects are files under a local (or mounted network) directory.

URL: ``file:///absolute/path`` or ``file://localhost/absolute/path``; percent-escapes are decoded
(``file:///data/my%20state``) and every decoded segment must be a plain name
(:func:`silt.tierkit.check_name`: no ``..``, ``.``, empty, control or look-alike segment). The
tier takes no options, and refuses an ``@`` in the host part (``file://user:password@...``)
without showing the URL.

Layout: the object ``a/b/c`` is the file ``<root>/a/b/c``; ``<root>/.tmp/`` holds writes in
flight and is never listed.

How writes stay atomic and durable:

* ``put`` writes the bytes to a uniquely named file in ``<root>/.tmp/``, fsyncs it, renames it
  onto the final name with :func:`os.replace` and fsyncs the directory.
* ``put_if_absent`` does the same but publishes with :func:`os.link`, which fails if the name
  exists, so exactly one of any number of racing threads or processes (on any host sharing the
  directory over a file system with POSIX link semantics) creates the object.
* When either returns, the data, its directory entry, and every directory created for it have
  been fsynced. A file is never visible under its final name before it is complete.
* A writer that crashes leaves at most a stale file in ``<root>/.tmp/``; it is never listed or
  read. GC removes such files once they are older than its grace period
  (:meth:`FileStore.remove_stale_temporaries`). Removing one that a paused writer still meant
  to publish only makes that write fail (the rename or link finds no source); no object is
  ever touched.

Known simplifications, on purpose:

* A key cannot also be a "directory" of another key: ``a`` and ``a/b`` cannot both exist, since
  a file system cannot hold both. silt's own keys never collide this way; such a write raises
  :class:`~silt.errors.StoreError` and such a read :class:`~silt.errors.NotFoundError`.
* Keys that differ only in case collide on case-insensitive file systems (macOS, Windows).
* A listing is not a snapshot: objects created or deleted while it runs may or may not appear.
* Empty directories are never removed. ``put_if_absent`` needs hard links (every POSIX local file
  system and NFS have them; FAT and some FUSE file systems do not).
* Directory fsync is skipped on Windows and where the file system does not support it.

Thread safety: every method may be called from any number of threads and processes at once.
"""

from __future__ import annotations

import errno
import os
import pathlib
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import (
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    StoreError,
)
from ..hookspecs import hookimpl
from ..store import ObjectInfo, ObjectStore
from ..tierkit import (
    check_data,
    check_keys,
    check_list_args,
    check_options,
    check_range,
    decode_path,
    public_url,
    refuse_credentials_in_host,
    split_url,
    validate_key,
)
from .blockread import CachedReads
from .fdcache import FDS, MAX_OPEN
from .fileio import O_RDONLY, fsync_dir, read_fully, unlink_quietly
from .oserrors import MISSING_ERRNOS, NO_LINK_ERRNOS, advice

#: Name of the directory under the root that holds writes in flight. Never a valid first key
#: segment, never listed.
TMP_DIR = ".tmp"

#: How :meth:`FileStore._write_temp` names a temporary file: ``<pid>-<thread>-<random>.tmp``.
_TEMP_NAME = re.compile(r"[0-9]+-[0-9]+-[0-9a-f]{16}\.tmp")

#: Options ``FileStore.from_url`` accepts (none yet).
ACCEPTED_OPTIONS: frozenset[str] = frozenset()
#: What a file:// URL with a ``user:password@`` is told (the URL itself is not shown).
_NO_CREDENTIALS = ("A file:// URL names a local path, as in 'file:///data/state': the file "
                   "system's permissions apply, there are no credentials to give.")


# --- helpers ----------------------------------------------------------------------------------


def _open_fd(path: str) -> int:
    """A read-only descriptor of ``path`` (a name tests can replace to inject errors)."""
    return os.open(path, O_RDONLY)


# --- the store ---------------------------------------------------------------------------------


class FileStore(ObjectStore):
    """Objects as files under a root directory. See the module docstring for the guarantees.

    ``root`` may be relative (it is made absolute at construction) and is created, with its
    parents, if missing. Raises :class:`~silt.errors.StoreError` if it cannot be created or is
    not a directory.
    """

    local = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not isinstance(root, (str, os.PathLike)):
            raise InvalidTypeError(
                f"FileStore root must be a str or path, got {type(root).__name__}"
            )
        path = os.fspath(root)
        if not isinstance(path, str):
            raise InvalidTypeError("FileStore root must be a str path, not bytes")
        if not path:
            raise InvalidArgumentError("FileStore root must not be empty")
        self.root: str = os.path.abspath(path)
        self.url = pathlib.Path(self.root).as_uri()
        self._tmp_dir = os.path.join(self.root, TMP_DIR)
        self._lock = threading.Lock()
        # Directories whose entry in their parent is known to be durable (created or fsynced).
        self._durable_dirs: set[str] = {self.root}
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise StoreError(
                f"cannot open {self.url}: {self.root!r} exists and is not a directory; "
                "point the URL at a directory"
            )
        # Directories are created on the first write, so opening a root only to read it (the
        # CLI, a reader at an old version) never changes it.

    def _make_root(self) -> None:
        """Create the root and ``.tmp/``; each created directory is made durable in its parent."""
        missing = []
        directory = self.root
        while not os.path.isdir(directory):
            missing.append(directory)
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
        try:
            os.makedirs(self._tmp_dir, exist_ok=True)
        except FileExistsError as exc:
            raise StoreError(
                f"cannot open {self.url}: {exc.filename!r} exists and is not a directory; "
                "point the URL at a directory"
            ) from exc
        except OSError as exc:
            raise self._os_error(exc, "create the store root", self.root) from exc
        for created in reversed(missing):
            fsync_dir(os.path.dirname(created))

    @classmethod
    def from_url(cls, url: str, options: dict[str, str] | None = None) -> FileStore:
        """Open the store a ``file://`` URL names.

        Accepts ``file:///absolute/path`` and ``file://localhost/absolute/path``. Options may
        come in ``options`` or in the URL's query; there are none yet, so any option is an
        :class:`~silt.errors.InvalidArgumentError` (as is a relative path or a remote host).
        """
        scheme, location, query = split_url(url)
        if scheme != "file":
            raise InvalidArgumentError(
                f"FileStore opens file:// URLs, got {public_url(url)!r}; use 'file:///absolute/path'"
            )
        refuse_credentials_in_host(url, "", _NO_CREDENTIALS)
        check_options(url, {**query, **(options or {})}, ACCEPTED_OPTIONS, "file")
        if location.lower().startswith("localhost/"):
            location = location[len("localhost") :]
        if not location.startswith("/"):
            host = location.split("/", 1)[0]
            if not location:
                problem = "names no path"
            elif host in (".", ".."):
                problem = "names a relative path"
            else:
                problem = f"names the host {host!r} (or a relative path)"
            raise InvalidArgumentError(
                f"{public_url(url)!r} {problem}; a file:// URL holds an absolute path after three "
                f"slashes, as in 'file:///{location or 'data/state'}' or "
                "'file://localhost/data/state'. Remote hosts are not supported: mount the share "
                "and use its local path"
            )
        # Decoded and checked by the rule all tiers share: no '..', '.', empty, control or
        # look-alike segment can move the root (a sibling's URL is built from stored names).
        path = decode_path(location, what=f"the path of {url.split('?', 1)[0]!r}")
        if os.name == "nt" and re.match(r"/[A-Za-z]:", path):  # pragma: no cover - Windows
            path = path[1:]
        return cls(path)

    # --- paths and errors ----------------------------------------------------------------------

    def _path(self, key: object) -> str:
        """The file for ``key``, after validating it (``.tmp`` is reserved at the top level)."""
        key = validate_key(key)
        parts = key.split("/")
        if parts[0] == TMP_DIR:
            raise InvalidArgumentError(
                f"object key {key!r} is reserved: the file:// tier keeps writes in flight in "
                f"'{TMP_DIR}/'"
            )
        return os.path.join(self.root, *parts)

    def _os_error(self, exc: OSError, action: str, path: str) -> StoreError:
        cls, todo = advice(exc)
        reason = exc.strerror or str(exc)
        return cls(f"failed to {action} {path!r} in {self.url}: {reason}; {todo}")

    def _not_found(self, key: str) -> NotFoundError:
        return NotFoundError(f"object {key!r} does not exist in {self.url}")

    def _conflict(self, key: str, path: str) -> StoreError:
        return StoreError(
            f"cannot write object {key!r} in {self.url}: {path!r} or one of its parents is both "
            "an object and a directory (the file:// tier cannot hold both 'a' and 'a/b'); use "
            "keys that are not prefixes of other keys followed by '/'"
        )

    def _write_error(self, exc: OSError, key: str, path: str) -> StoreError:
        if exc.errno in (errno.ENOTDIR, errno.EISDIR, errno.EEXIST):
            return self._conflict(key, path)
        return self._os_error(exc, f"write object {key!r} at", path)

    # --- write machinery -----------------------------------------------------------------------

    def _write_temp(self, data: bytes) -> str:
        """Write ``data`` to a new, fsynced file in ``.tmp/`` and return its path."""
        name = f"{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(8)}.tmp"
        tmp = os.path.join(self._tmp_dir, name)
        try:
            f = open(tmp, "xb")  # "x" is O_EXCL: a name is never reused; closed below
        except FileNotFoundError:  # first write, or someone removed .tmp/: create it once
            self._make_root()
            f = open(tmp, "xb")
        try:
            with f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            unlink_quietly(tmp)
            raise
        return tmp

    def _ensure_parents(self, key: str, path: str) -> None:
        """Create the directories ``key`` lives in, each made durable in its parent."""
        parts = key.split("/")[:-1]
        directory = self.root
        for part in parts:
            parent, directory = directory, os.path.join(directory, part)
            if directory in self._durable_dirs:
                continue
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise self._conflict(key, path) from None
            # fsync even if another thread or process created it: it may not have synced yet.
            fsync_dir(parent)
            with self._lock:
                self._durable_dirs.add(directory)

    def _publish(self, key: str, path: str, tmp: str, exclusive: bool) -> bool:
        """Move ``tmp`` to ``path`` (``os.link`` if ``exclusive`` else ``os.replace``)."""
        for attempt in (1, 2):
            self._ensure_parents(key, path)
            try:
                if exclusive:
                    os.link(tmp, path)
                else:
                    os.replace(tmp, path)
                return True
            except FileExistsError:
                if os.path.isdir(path):
                    raise self._conflict(key, path) from None
                return False
            except FileNotFoundError:
                if attempt == 2 or not os.path.exists(tmp):
                    raise
                # A parent directory vanished under us (removed by hand): forget and recreate.
                with self._lock:
                    self._durable_dirs = {self.root}
            except OSError as exc:
                if exclusive and exc.errno in NO_LINK_ERRNOS:
                    raise StoreError(
                        f"cannot create object {key!r} in {self.url}: hard-linking {tmp!r} to "
                        f"{path!r} failed ({exc.strerror}). The file:// tier needs a file system "
                        "with hard links for create-only writes (FAT and some FUSE or SMB mounts "
                        "lack them) and write permission on the root; use another root"
                    ) from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, key: str, data: bytes, exclusive: bool) -> bool:
        path = self._path(key)
        payload = check_data(data)
        if exclusive and os.path.isfile(path):
            return False  # it exists now, so a create-only write would fail: skip the upload
        try:
            tmp = self._write_temp(payload)
        except OSError as exc:
            raise self._os_error(
                exc, f"write object {key!r} to a temporary file in", self._tmp_dir
            ) from exc
        try:
            created = self._publish(key, path, tmp, exclusive)
        except StoreError:
            raise
        except OSError as exc:
            raise self._write_error(exc, key, path) from exc
        finally:
            unlink_quietly(tmp)  # already gone after os.replace; the link's source otherwise
        if created:
            FDS.invalidate((self.root, key))  # a descriptor of the object this one replaced
            directory = os.path.dirname(path)
            try:
                fsync_dir(directory)
            except OSError as exc:
                raise self._os_error(exc, "sync directory", directory) from exc
        return created

    # --- ObjectStore ---------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """Return the whole object; :class:`~silt.errors.NotFoundError` if it does not exist."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            if exc.errno in MISSING_ERRNOS:
                raise self._not_found(key) from exc
            raise self._os_error(exc, f"read object {key!r} at", path) from exc

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Return up to ``length`` bytes from ``start`` (``b""`` past the end).

        Reads through the process's cache of open descriptors (:mod:`silt.tiers.fdcache`,
        which says why a kept descriptor answers "does this object still exist?" like a fresh
        open): a block read is one ``fstat`` and one ``pread``, no path check, ``open`` or
        ``close``.
        """
        ident = (self.root, key) if type(key) is str else None
        entry = FDS.borrow(ident) if ident is not None else None
        try:
            if entry is None:
                path = self._path(key)  # validates the key (a cached one was validated before)
                start, length = check_range(start, length)
                if length == 0:
                    try:
                        with open(path, "rb"):  # fails like a read would (missing, a directory)
                            return b""
                    except OSError as exc:
                        raise self._read_error(exc, key, path) from exc
                try:
                    fd = _open_fd(path)
                except OSError as exc:
                    raise self._read_error(exc, key, path) from exc
                entry = FDS.adopt(ident if ident is not None else (self.root, str(key)), fd)
            else:
                start, length = check_range(start, length)
                if length == 0:
                    return b""  # the cached file still has its name: it exists
            try:
                return read_fully(entry.fd, start, length)
            except OSError as exc:
                # a stale handle (network file system) is opened again by the next read
                FDS.discard(ident if ident is not None else (self.root, str(key)), entry)
                raise self._read_error(exc, key, self._path(key)) from exc
        finally:
            if entry is not None:
                FDS.release(entry)

    def direct_reader(self, key: str) -> Callable[[int, int], bytes | memoryview] | None:
        """A ranged reader of ``key`` for the SST reader's block reads (see
        :meth:`ObjectStore.direct_reader`): one ``pread`` through the process's cached
        descriptor (:class:`~silt.tiers.blockread.CachedReads`, compiled where built), with a
        lenient check that the file still has a name (:mod:`silt.tiers.fdcache`: a delete made
        through any store of this process is seen at once, one by another process within
        ``RECHECK_SECONDS``). A file shrunk by damage reads short, which the SST reader reports
        as corruption. Without a cached descriptor it reads like :meth:`get_range`, which opens
        and caches one. ``None`` where descriptors are not cached (Windows), and for a subclass
        that overrides ``get_range`` (its reads must all go through it).
        """
        if MAX_OPEN <= 0 or type(self).get_range is not FileStore.get_range:
            return None
        path = self._path(key)  # validates the key once
        ident = (self.root, key)
        get_range = self.get_range
        fds = FDS

        def checked_read(start: int, length: int) -> bytes:
            """The slow path: a lenient borrow (its check made here when due), else
            ``get_range``; a failed read drops the descriptor and is mapped to silt's errors."""
            entry = fds.borrow(ident, False)
            if entry is None:
                return get_range(key, start, length)
            try:
                return read_fully(entry.fd, start, length)
            except OSError as exc:
                fds.discard(ident, entry)  # a stale handle: the next read opens the path
                raise self._read_error(exc, key, path) from exc
            finally:
                fds.release(entry)

        return CachedReads(fds, ident, checked_read)

    def _read_error(self, exc: OSError, key: str, path: str) -> StoreError:
        if exc.errno in MISSING_ERRNOS:
            return self._not_found(key)
        return self._os_error(exc, f"read object {key!r} at", path)

    def close(self) -> None:
        """Close the descriptors kept for reads of this root (later reads open them again)."""
        root = self.root
        FDS.discard_where(lambda ident: ident[0] == root)

    def put(self, key: str, data: bytes) -> None:
        """Create or replace the object atomically and durably (see the module docstring)."""
        self._write(key, data, exclusive=False)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object unless the key exists; atomic across threads and processes."""
        return self._write(key, data, exclusive=True)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the objects, ignoring missing ones; the removals are fsynced.

        All keys are validated before anything is deleted.
        """
        items = check_keys(keys, lambda key: (key, self._path(key)))
        touched: set[str] = set()
        for key, path in items:
            FDS.discard((self.root, key))
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno in MISSING_ERRNOS or os.path.isdir(path):
                    continue  # no object by that name (a directory is not an object)
                raise self._os_error(exc, f"delete object {key!r} at", path) from exc
            finally:
                # After the unlink: a lenient check made by a read racing with this delete
                # (before the unlink) must not be trusted once the name is gone.
                FDS.invalidate((self.root, key))
            touched.add(os.path.dirname(path))
        for directory in sorted(touched):
            try:
                fsync_dir(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._os_error(exc, "sync directory", directory) from exc

    def remove_stale_temporaries(self, prefix: str, older_than_seconds: float) -> int:
        """Delete the temporary files of interrupted writes in ``<root>/<prefix>.tmp/`` (the
        ``.tmp/`` of this root for ``""``, of the DB whose store is opened at ``<prefix>``
        otherwise) whose last change is more than ``older_than_seconds`` old by this host's
        clock; return how many were removed.

        Best effort: a file that vanishes meanwhile or cannot be removed is skipped. Objects are
        never touched: only regular files named like this tier's temporaries are considered.
        """
        if prefix:
            directory = os.path.join(self.root, *validate_key(prefix.rstrip("/")).split("/"),
                                     TMP_DIR)
        else:
            directory = self._tmp_dir
        cutoff = time.time() - older_than_seconds
        removed = 0
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return 0  # no .tmp/ there (nothing was ever written), or unreadable
        for entry in entries:
            if not _TEMP_NAME.fullmatch(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
        return removed

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Yield the objects under ``prefix`` with keys after ``start_after``, in key order.

        Only the directory named by the prefix's part before its last ``/`` is walked (so
        ``"manifest/000"`` reads ``<root>/manifest`` alone), and subdirectories that cannot hold
        a key after ``start_after`` are skipped. Arguments are checked at the call; file-system
        errors surface while iterating.
        """
        prefix, start_after = check_list_args(prefix, start_after)
        dir_part = prefix.rpartition("/")[0]
        if not dir_part:
            return self._walk(self.root, "", prefix, start_after)
        try:
            validate_key(dir_part)
        except InvalidArgumentError:
            return iter(())  # no valid key can start with this prefix
        if dir_part.split("/", 1)[0] == TMP_DIR:
            return iter(())
        directory = os.path.join(self.root, *dir_part.split("/"))
        return self._walk(directory, dir_part + "/", prefix, start_after)

    def _walk(
        self, directory: str, dir_key: str, prefix: str, start_after: str | None
    ) -> Iterator[ObjectInfo]:
        """Yield the objects under ``directory`` (whose keys start with ``dir_key``) in order.

        Sorting each directory's entries by ``name`` (files) or ``name + "/"`` (directories)
        gives global lexicographic key order, because every key below a directory starts with
        that directory's key and ``/`` is part of the comparison.
        """
        try:
            with os.scandir(directory) as it:
                entries = [*it]
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return
            raise self._os_error(exc, "list directory", directory) from exc
        chosen: list[tuple[str, os.DirEntry[str], bool]] = []
        for entry in entries:
            name = entry.name
            if (not dir_key and name == TMP_DIR) or "\\" in name:
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue  # vanished or unreadable entry: not an object
            if is_dir:
                sub = dir_key + name + "/"
                if not (sub.startswith(prefix) or prefix.startswith(sub)):
                    continue
                if (
                    start_after is not None
                    and sub < start_after
                    and not start_after.startswith(sub)
                ):
                    continue  # every key below sorts before start_after
                chosen.append((sub, entry, True))
            else:
                key = dir_key + name
                if not key.startswith(prefix) or (start_after is not None and key <= start_after):
                    continue
                chosen.append((key, entry, False))
        chosen.sort(key=lambda item: item[0])
        for key, entry, is_dir in chosen:
            if is_dir:
                yield from self._walk(entry.path, key, prefix, start_after)
                continue
            try:
                st = entry.stat()
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue  # deleted while listing
                raise self._os_error(exc, "stat", entry.path) from exc
            if stat.S_ISREG(st.st_mode):
                yield ObjectInfo(key, st.st_size)


@hookimpl
def silt_register(registry: Any) -> None:
    """Register the ``file://`` tier (``registry.add_tier("file", FileStore.from_url)``)."""
    registry.add_tier("file", FileStore.from_url)


__all__ = ["ACCEPTED_OPTIONS", "TMP_DIR", "FileStore"]
