"""URLs: endpoints that must carry no secret, URLs as messages may show them, and the
``scheme://root/prefix`` shape of every object-store tier's URL."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import InvalidArgumentError, InvalidTypeError
from .names import _BAD_CATEGORIES, decode_path, normalize_prefix


def split_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split ``scheme://location?opt=val`` into ``(scheme, location, options)``.

    ``location`` is everything between ``://`` and the query. Raises ``InvalidArgumentError`` for
    strings that are not URLs, with a hint at the expected shape.
    """
    if not isinstance(url, str):
        raise InvalidTypeError(
            f"a store URL must be a str such as 'file:///data/state', got {type(url).__name__}"
        )
    if "://" not in url:
        raise InvalidArgumentError(
            f"{public_url(url)!r} is not a store URL: use 'file:///absolute/path', "
            "'memory://name', or a scheme a tier plugin provides such as 's3://bucket/prefix'"
        )
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    location = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    return scheme, location, options


def check_endpoint(value: object, *, what: str, hint: str = "", allow_path: bool = True) -> str:
    """Return ``value`` (stripped) if it is an ``http://`` or ``https://`` URL with a host and
    without user, password, query or fragment; raise :class:`~silt.errors.InvalidArgumentError`
    otherwise.

    Endpoints end up in messages and logs, so they must not carry a secret: a password in
    ``http://user:password@host`` or a token in a query. The messages name ``what`` (the option
    or variable) and never echo the value. ``allow_path=False`` also refuses a path (a base URL).
    """
    text = str(value).strip()
    sentence = f"; {hint}" if hint else ""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise InvalidArgumentError(
            f"{what} is not a valid URL (not shown: it may hold a secret){sentence}"
        ) from None
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise InvalidArgumentError(
            f"{what} must not contain credentials ('user@' or 'user:password@'; the URL is not "
            f"shown): credentials never go in a URL, URLs end up in logs{sentence}"
        )
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise InvalidArgumentError(
            f"{what} must not carry a SAS, token or other query, nor a fragment (the URL is not "
            f"shown: URLs end up in logs){sentence}"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(
            f"{what} must be an http:// or https:// URL with a host, like "
            "'http://127.0.0.1:9000'"
        )
    if any(ch.isspace() or unicodedata.category(ch) in _BAD_CATEGORIES for ch in text):
        raise InvalidArgumentError(f"{what} contains spaces or control characters")
    if not allow_path and parts.path.strip("/"):
        raise InvalidArgumentError(
            f"{what} must be a base URL such as 'http://127.0.0.1:4443' (no path, query or "
            "fragment)"
        )
    return text


#: ``[scheme:][//]authority`` and the rest, of a URL or of text that looks like one (an
#: ``scheme:`` or ``//`` may be missing: ``user:pw@host/x`` still names a password).
_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*:)?(//)?([^/]*)(.*)", re.DOTALL)


def public_url(url: object) -> str:
    """``url`` as messages, reprs and logs may show it: without its query (tier options may hold
    a secret, such as an Azure connection string), its fragment, and any ``user:password@``
    before the first ``/`` (with or without a scheme)."""
    text = str(url)
    base = text.split("?", 1)[0].split("#", 1)[0]
    match = _AUTHORITY.fullmatch(base)
    if match is not None and "@" in match[3]:
        host = "<redacted>@" + match[3].rsplit("@", 1)[1]
        base = f"{match[1] or ''}{match[2] or ''}{host}{match[4]}"
    return base + ("?..." if "?" in text else "")


def parse_root_url(
    url: str,
    schemes: Iterable[str],
    *,
    check_root: Callable[[str, str], str],
    example: str,
) -> tuple[str, str, dict[str, str]]:
    """Split ``scheme://root/prefix?opts`` into ``(root, prefix, options)``.

    ``root`` is the bucket or container (percent-decoded, then checked by
    ``check_root(root, url)``); ``prefix`` is ``""`` or a ``/``-terminated key prefix
    (``"jobs/clicks/"``), decoded and checked by the name rule every tier shares
    (:func:`~silt.tierkit.decode_path`, :func:`~silt.tierkit.normalize_prefix`). ``example`` is
    the URL shape to suggest (``"s3://bucket/prefix"``). Raises
    :class:`~silt.errors.InvalidArgumentError`.
    """
    scheme, location, options = split_url(url)
    allowed = tuple(schemes)
    if scheme not in allowed:
        raise InvalidArgumentError(
            f"this tier opens {allowed[0]}:// URLs, got {public_url(url)!r}; write {example!r}"
        )
    raw_root, _, raw_prefix = location.partition("/")
    root = check_root(unquote(raw_root), url)
    public = url.split("?", 1)[0]
    prefix = decode_path(raw_prefix, what=f"the prefix of {public!r}")
    suggestion = example.replace("prefix", "jobs/clicks")
    return root, normalize_prefix(prefix, url, example=suggestion), options


def check_root_name(
    name: object,
    url: str = "",
    *,
    what: str,
    example: str,
    rule: str,
    advice: str,
    valid: Callable[[str], bool] | None = None,
) -> str:
    """Return ``name``, the bucket or container a URL names, if it is plausible; raise
    :class:`~silt.errors.InvalidArgumentError` otherwise (the server checks the rest).

    Refused: a name with an ``@`` anywhere in the URL's host part
    (:func:`refuse_credentials_in_host`, with ``advice``), an empty name (the message suggests
    ``example``), and a name holding a separator, a space or a control character, or that
    ``valid`` rejects (the message states ``rule``). ``what`` is "bucket" or "container".
    """
    url = url.split("?", 1)[0]
    if isinstance(name, str):
        refuse_credentials_in_host(url, name, advice)
    where = f" in {url!r}" if url else ""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"no {what} named{where}; write {example!r}")
    if any(ch in name for ch in "/?#:\\ \t\r\n\x00") or (valid is not None and not valid(name)):
        raise InvalidArgumentError(f"{what} name {name!r}{where} is not valid; {rule}")
    return name


def refuse_credentials_in_host(url: str, root: str, advice: str) -> None:
    """Raise :class:`~silt.errors.InvalidArgumentError` (without echoing the URL) if ``url``'s
    host part or ``root`` holds an ``@``: a ``user:password@`` never belongs in a URL, which
    ends up in logs. ``advice`` says where credentials come from instead."""
    host = url.split("?", 1)[0].split("://", 1)[-1].split("/", 1)[0]
    if "@" in root or "@" in host:
        scheme = f"{url.split('://', 1)[0]}://" if "://" in url else "store"
        raise InvalidArgumentError(
            f"the {scheme} URL (not shown) must not contain '@': credentials never go in a URL "
            f"(URLs end up in logs). {advice}"
        )


__all__ = [
    "check_endpoint",
    "check_root_name",
    "parse_root_url",
    "public_url",
    "refuse_credentials_in_host",
    "split_url",
]
