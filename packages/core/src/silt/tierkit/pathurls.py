"""URLs rooted at a path on this host, not at a bucket: ``scheme:///var/state.db/jobs/clicks``.

A tier that keeps its objects in one file (a SQLite database, an archive) names that file in
its URL and may put a key prefix after it, as an object store puts one after its bucket. Where
the file's path ends and the prefix begins is decided by one rule, the same for every such
tier:

**The path ends at its first segment that ends with one of the tier's declared suffixes**
(``.db``, ``.sqlite``, ``.sqlite3`` for SQLite); everything after it is the key prefix.

    ``sqlite:///var/state.db``                -> path ``/var/state.db``, prefix ``""``
    ``sqlite:///var/state.db/jobs/clicks``    -> path ``/var/state.db``, prefix ``jobs/clicks/``
    ``sqlite://localhost/var/a%20b.db/p``     -> path ``/var/a b.db``,   prefix ``p/``
    ``sqlite:///var/run.db.d/state.db``       -> refused: ``run.db.d`` does not end in ``.db``,
                                                 so the path is ``/var/run.db.d/state.db``

The rule reads the URL alone, never the file system (whether a segment exists as a file
depends on when you look, and a new database does not exist yet), so a URL names the same
database on every host and at every time. A directory on the way to the file must not itself
end with a declared suffix (``/data/old.db/new.db`` would name the file ``/data/old.db``):
:func:`path_url` refuses to build such a URL, and :func:`parse_path_url` would read it as the
shorter path.

The path is absolute, after three slashes (``scheme:///abs/path``) or after ``localhost``
(``scheme://localhost/abs/path``), as in ``file://`` URLs; another host is refused (mount the
share and use its local path). It is percent-decoded and every segment, the prefix's too, must
pass the name rule (:func:`~silt.tierkit.decode_path`: no ``..``, ``.``, empty, control or
look-alike segment), so no URL built from stored names can leave its root.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import quote

from ..errors import InvalidArgumentError, InvalidTypeError
from .names import check_path, decode_path, normalize_prefix
from .urls import public_url, split_url


class PathRoot(NamedTuple):
    """A path-rooted URL, split: the file's absolute ``path`` (decoded), the key ``prefix``
    (``""`` or ``/``-terminated, as in ``"jobs/clicks/"``) and the query ``options``."""

    path: str
    prefix: str
    options: dict[str, str]


def _suffixes(suffixes: Iterable[str]) -> tuple[str, ...]:
    found = tuple(suffixes)
    if not found or not all(isinstance(s, str) and s.startswith(".") and "/" not in s
                            for s in found):
        raise InvalidArgumentError(
            f"suffixes must be a non-empty list of file name endings such as '.db', got {found!r}"
        )
    return found


def _ends_path(segment: str, suffixes: tuple[str, ...]) -> bool:
    return any(segment.endswith(s) and len(segment) > len(s) for s in suffixes)


def parse_path_url(
    url: str, schemes: Iterable[str], *, suffixes: Iterable[str], example: str
) -> PathRoot:
    """Split ``scheme:///abs/path/file.ext/prefix?opts`` into a :class:`PathRoot` by the rule in
    the module docstring: the path ends at its first segment ending with one of ``suffixes``
    (file name endings, case-sensitive, as ``(".db", ".sqlite")``).

    ``schemes`` are the tier's schemes (the first is named in messages), ``example`` a URL to
    suggest (``"sqlite:///var/state.db/prefix"``). Raises
    :class:`~silt.errors.InvalidArgumentError` for another scheme, a host other than
    ``localhost`` (or a relative path), a path with no segment ending in a suffix, and a
    segment the name rule refuses; messages never show the query.
    """
    ends = _suffixes(suffixes)
    scheme, location, options = split_url(url)
    allowed = tuple(schemes)
    public = public_url(url)
    if scheme not in allowed:
        raise InvalidArgumentError(
            f"this tier opens {allowed[0]}:// URLs, got {public!r}; write {example!r}"
        )
    if location.lower().startswith("localhost/"):
        location = location[len("localhost"):]
    if not location.startswith("/"):
        host = location.split("/", 1)[0]
        problem = ("names no path" if not location else "holds credentials" if "@" in host
                   else f"names the host {host!r} (or a relative path)")
        shown = public if "@" not in host else f"{scheme}://<redacted>"
        raise InvalidArgumentError(
            f"{shown!r} {problem}; a {scheme}:// URL holds an absolute path after three "
            f"slashes (or after 'localhost'), as in {example!r}. Remote hosts are not "
            "supported: mount the share and use its local path"
        )
    path = decode_path(location, what=f"the path of {public!r}")
    segments = path.strip("/").split("/") if path.strip("/") else []
    for i, segment in enumerate(segments):
        if _ends_path(segment, ends):
            root = "/" + "/".join(segments[: i + 1])
            rest = "/".join(segments[i + 1:])
            return PathRoot(root, normalize_prefix(rest, public, example=example), options)
    raise InvalidArgumentError(
        f"{public!r} names no file ending in {' or '.join(ends)}: the path of a {scheme}:// "
        f"URL ends at its first segment with one of these endings and the rest is the key "
        f"prefix; write {example!r}"
    )


def path_url(scheme: str, path: str, prefix: str = "", *, suffixes: Iterable[str]) -> str:
    """The URL of the store on the file ``path`` under ``prefix``, as a store's ``url`` shows it
    (no query): ``path_url("sqlite", "/var/a b.db", "jobs/")`` is
    ``"sqlite:///var/a%20b.db/jobs"``. :func:`parse_path_url` reads it back to the same path
    and prefix.

    Raises :class:`~silt.errors.InvalidArgumentError` if that could not be so: ``path`` is not
    absolute, a segment fails the name rule, its last segment does not end with one of
    ``suffixes``, or an earlier one does (the URL would name that directory as the file).
    """
    ends = _suffixes(suffixes)
    if not isinstance(path, str):
        raise InvalidTypeError(f"the path must be a str, got {type(path).__name__}")
    if not path.startswith("/"):
        raise InvalidArgumentError(f"the path {path!r} must be absolute (start with '/')")
    check_path(path, what="the path")
    segments = path.strip("/").split("/") if path.strip("/") else []
    first = next((i for i, s in enumerate(segments) if _ends_path(s, ends)), None)
    if first is None or first != len(segments) - 1:
        problem = (f"its file name does not end in {' or '.join(ends)}" if first is None
                   else f"the directory {segments[first]!r} on the way ends in one of "
                        f"{', '.join(ends)}, so a URL would name it as the file")
        raise InvalidArgumentError(f"{path!r} cannot root a {scheme}:// store: {problem}; "
                                   f"rename it")
    prefix = normalize_prefix(prefix)
    return f"{scheme}://{quote(path)}/{quote(prefix)}".rstrip("/")


__all__ = ["PathRoot", "parse_path_url", "path_url"]
