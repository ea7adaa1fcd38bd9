"""The name rule every tier shares: which names and keys may become part of an object's location.

:func:`check_name`, :func:`check_path` and :func:`decode_path` are the one place that decides
whether a name taken from a URL path or from stored metadata (a sibling DB's folder name in a
manifest, an SST id, a referrer marker) may become part of an object's location. The rule is
applied to the *decoded* text, and it refuses what a further decoding step could still turn
into a separator or a ``..`` (a percent-escape left after decoding, Unicode look-alikes of
``/``, ``\\`` and ``.``), so no number of decodings lets a name leave the root (invariant
9 of docs/architecture.md). :func:`validate_key` checks the object keys the engine passes to a
tier, and :func:`normalize_prefix` the key prefix a tier's URL names (a bucket's or container's
folder).
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

from ..errors import InvalidArgumentError, InvalidTypeError

#: The longest name (one path segment), in UTF-8 bytes: the usual file-system limit.
MAX_NAME_BYTES = 255

#: Names made only of these need no further check (silt's own names: ULIDs, ``kg-0-63``).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._~-]+")
#: A percent-escape: left in a decoded name, it means the name was encoded twice.
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
#: Characters that look like or act as a path separator somewhere (file systems, SDKs that
#: normalize Unicode, terminals); NFKC folds the full-width and small forms onto ``/``, ``\\``
#: and ``.``, these it does not.
_LOOKALIKES = frozenset("\u2044\u2215\u2216\u29f5\u29f8\u29f9\u2571\u2572")
#: Unicode categories a name must not contain: controls (NUL included), invisible format
#: characters (bidirectional overrides, zero-width), lone surrogates, line/paragraph separators.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid name, or ``None`` when it is (see :func:`check_name`)."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a str"
    if not name:
        return "it is empty"
    if len(name) <= MAX_NAME_BYTES and _PLAIN_NAME.fullmatch(name) and name not in (".", ".."):
        return None  # the common case, decided without looking at Unicode
    if name in (".", ".."):
        return f"{name!r} names a folder relatively"
    for ch in name:
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            return f"it contains the control or invisible character U+{ord(ch):04X}"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    folded = unicodedata.normalize("NFKC", name)
    if "/" in folded or "\\" in folded or any(ch in _LOOKALIKES for ch in name):
        return "it contains a path separator ('/', '\\' or a look-alike)"
    if folded.strip() in ("", ".", ".."):
        return f"it reads as {folded.strip()!r} (blank, or a relative folder)"
    if _ESCAPE.search(name):
        return ("it holds a percent-escape, which one more decoding step could turn into a "
                "separator (names are checked decoded: an escape here was encoded twice)")
    if folded != name:
        # A tier (or an SDK under it) may fold before it decodes: '\uff05' folds to '%', so
        # '\uff052e\uff052e' is '%2e%2e' and then '..'. The folded form must pass the same
        # rule (NFKC is idempotent: this recursion stops at once).
        problem = name_problem(folded)
        if problem is not None:
            return f"its Unicode compatibility form (NFKC) {folded!r:.80} is refused: {problem}"
    return None


def check_name(name: object, *, what: str = "name") -> str:
    """Return ``name`` if it is a plain name for one path segment; raise otherwise.

    A name is a non-empty ``str`` of at most :data:`MAX_NAME_BYTES` UTF-8 bytes that is not
    blank, ``.`` or ``..`` (also after NFKC folding and trimming spaces) and holds no ``/``, no
    ``\\``, no character that Unicode compatibility folding (NFKC) turns into one of those or
    that looks like one, no control or invisible character, and no percent-escape (the name is
    already decoded; an escape left in it could be decoded again); its NFKC form must pass the
    same rule (``'\uff052e\uff052e'`` folds to ``'%2e%2e'``). Apply it after every decoding
    step. Raises :class:`~silt.errors.InvalidArgumentError` (``what`` names the thing in the
    message); callers that read the name from stored metadata report it as a
    :class:`~silt.errors.CorruptionError` instead.
    """
    problem = name_problem(name)
    if problem is not None:
        if not isinstance(name, str):
            raise InvalidTypeError(f"{what} must be a str, got {type(name).__name__}")
        raise InvalidArgumentError(f"{what} {name!r} is not a plain name: {problem}")
    return name  # type: ignore[return-value]


def check_path(path: object, *, what: str = "path") -> str:
    """Return ``path`` if it is ``/``-separated names that each pass :func:`check_name`.

    Leading and trailing ``/`` are allowed (``""`` and ``"/"`` are valid, empty paths); an empty
    segment inside (``a//b``) is not. Raises like :func:`check_name`, naming the whole path.
    """
    if not isinstance(path, str):
        raise InvalidTypeError(f"{what} must be a str, got {type(path).__name__}")
    inner = path.strip("/")
    if inner:
        for segment in inner.split("/"):
            problem = name_problem(segment)
            if problem is not None:
                raise InvalidArgumentError(
                    f"{what} {path!r} is not a plain '/'-separated path: segment {segment!r} "
                    f"is refused ({problem})"
                )
    return path


def decode_path(text: str, *, what: str = "path") -> str:
    """Percent-decode the path part of a URL (UTF-8) and check the result with
    :func:`check_path`. Every tier decodes its URL's path with this, and only this."""
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"{what} {text!r} holds percent-escapes that are not UTF-8"
        ) from None
    return check_path(decoded, what=what)


def validate_key(key: object) -> str:
    """Return ``key`` if it is a valid object key, else raise.

    A key is a non-empty ``str`` of ``/``-separated segments; no segment is empty, ``.`` or
    ``..``; it contains no backslash and no NUL. Raises :class:`~silt.errors.InvalidTypeError`
    for a non-``str`` and :class:`~silt.errors.InvalidArgumentError` (naming the rule) otherwise.
    Keys come from the engine (:mod:`silt.paths`), whose variable parts (SST ids, sibling names)
    passed :func:`check_name` when they were read.
    """
    if not isinstance(key, str):
        raise InvalidTypeError(f"an object key must be a str, got {type(key).__name__}")
    if not key:
        raise InvalidArgumentError("an object key must not be empty")
    if "\\" in key or "\x00" in key:
        raise InvalidArgumentError(
            f"object key {key!r} contains a backslash or NUL; keys use '/' as the only separator"
        )
    if key.startswith("/"):
        raise InvalidArgumentError(
            f"object key {key!r} starts with '/'; keys are relative to the store root"
        )
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgumentError(
                f"object key {key!r} has an empty, '.' or '..' segment; keys name objects under "
                "the root with plain '/'-separated names such as 'sst/01J0000000.sst'"
            )
    return key


def normalize_prefix(prefix: str, url: str = "", *, example: str = "") -> str:
    """``"a/b"``, ``"/a/b/"`` -> ``"a/b/"``; ``""`` stays ``""``. Every segment must pass
    :func:`check_name`.

    The key prefix of a store opened on ``scheme://root/prefix`` (a bucket's or container's
    folder). ``url`` names the store in the message, ``example`` is a URL to suggest instead.
    Raises :class:`~silt.errors.InvalidArgumentError`.
    """
    prefix = prefix.strip("/")
    if not prefix:
        return ""
    try:
        check_path(prefix, what="prefix")
    except InvalidArgumentError as exc:
        where = url.split("?", 1)[0] or "the URL"
        hint = f"; use a URL like {example!r}" if example else ""
        raise InvalidArgumentError(
            f"prefix {prefix!r} in {where} is not a plain '/'-separated path ({exc}){hint}"
        ) from None
    return prefix + "/"


__all__ = [
    "MAX_NAME_BYTES",
    "check_name",
    "check_path",
    "decode_path",
    "name_problem",
    "normalize_prefix",
    "validate_key",
]
