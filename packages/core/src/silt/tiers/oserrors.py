"""What an ``OSError`` from the file system means for the ``file://`` tier.

:func:`advice` maps an error number to the :class:`~silt.errors.StoreError` class a tier raises
(:class:`~silt.errors.TransientStoreError` for what a retry may cure) and the sentence telling
the user what to do; the sets name the numbers the tier treats specially (a missing object, a
file system without hard links, a directory that cannot be fsynced). Pure functions of the
number: no I/O.
"""

from __future__ import annotations

import errno

from ..errors import StoreError, TransientStoreError

#: Errors a retry may cure (an interrupted call, a busy or stale network file system).
TRANSIENT_ERRNOS = frozenset(
    code
    for code in (
        errno.EINTR,
        errno.EAGAIN,
        errno.EWOULDBLOCK,
        errno.EBUSY,
        errno.ETIMEDOUT,
        getattr(errno, "ESTALE", None),
    )
    if code is not None
)
#: A missing object: no such file, a file where a directory is expected, or a directory.
MISSING_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR})
#: No hard links here: ``put_if_absent`` cannot publish with :func:`os.link`.
NO_LINK_ERRNOS = frozenset(
    code
    for code in (
        errno.EPERM,
        errno.EXDEV,
        errno.EMLINK,
        getattr(errno, "ENOTSUP", None),
        getattr(errno, "EOPNOTSUPP", None),
    )
    if code is not None
)
#: A directory this file system cannot fsync (the fsync is skipped).
NO_DIR_FSYNC_ERRNOS = frozenset(
    code
    for code in (errno.EINVAL, errno.EBADF, getattr(errno, "ENOTSUP", None))
    if code is not None
)


def advice(exc: OSError) -> tuple[type[StoreError], str]:
    """The error class and the what-to-do sentence for an ``OSError`` from the file system."""
    code = exc.errno
    if code in TRANSIENT_ERRNOS:
        return TransientStoreError, "this is usually temporary; the request can be retried"
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return StoreError, "free space (or raise the quota) on that file system, or move the root"
    if code in (errno.EACCES, errno.EPERM):
        return StoreError, (
            "make the store root and everything under it readable and writable by the user "
            "this process runs as"
        )
    if code == errno.EROFS:
        return StoreError, "the file system is read-only; remount it read-write or use another root"
    if code == errno.EIO:
        return StoreError, (
            "the device reported an I/O error; check the disk (kernel log, SMART) before "
            "trusting data on it"
        )
    if code == errno.ENAMETOOLONG:
        return StoreError, "the key is too long for this file system"
    if code in (errno.EMFILE, errno.ENFILE):
        return StoreError, "too many open files; raise the limit (ulimit -n) or use fewer threads"
    return StoreError, "check the store root and the file system"
