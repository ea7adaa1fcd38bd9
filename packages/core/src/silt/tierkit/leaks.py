"""Secrets never leave a tier: redacting messages and choosing what an error may chain to.

SDK exception texts can carry credentials (a presigned URL's signature, a SAS, an account key in
a connection string, an OAuth token). Every tier message goes through :func:`redact`, and a tier
chains an SDK exception to its own error only when nothing in that exception's chain holds a
secret (``raise error from safe_cause(exc, secrets)``), since tracebacks end up in logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def chain_leaks(exc: BaseException, secrets: Iterable[str | None] = ()) -> bool:
    """Whether the text of ``exc`` or of any exception chained to it (``__cause__``,
    ``__context__``, an SDK's ``inner_exception``) holds a secret: a known secret shape
    (:func:`redact`) or one of ``secrets``. Tiers chain an SDK exception to their own error
    only when it does not (``raise error from safe_cause(exc, secrets)``)."""
    secrets = tuple(secrets)
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for text in (str(current), repr(current)):
            if redact(text, secrets) != text:
                return True
        for inner in (current.__cause__, current.__context__,
                      getattr(current, "inner_exception", None)):
            if isinstance(inner, BaseException):
                pending.append(inner)
    return False


def safe_cause(exc: BaseException, secrets: Iterable[str | None] = ()) -> BaseException | None:
    """``exc`` if nothing in its chain holds a secret (:func:`chain_leaks`), else ``None``: the
    cause to raise a tier's error ``from``."""
    return None if chain_leaks(exc, secrets) else exc


# Patterns of secrets that SDK exception texts can carry: AWS access key ids, presigned-URL and
# SAS query parameters, Authorization headers, account keys in connection strings, Google tokens.
_SECRETS = [
    re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{16}\b"),
    re.compile(
        r"(?i)((?<![A-Za-z0-9_-])(?:x-amz-(?:credential|signature|security-token)|sig|"
        r"signature|se|sv|skoid|"
        r"sktid|accountkey|sharedaccesssignature|access_token|token)=)[^&;\s\"']+"
    ),
    re.compile(r"(?i)(authorization:\s*)[^\r\n]+"),
    # Google's: OAuth access tokens, bearer headers, signed-URL parameters, private keys and
    # refresh tokens from service-account and user credential files.
    re.compile(r"\bya29\.[\w.-]+"),
    re.compile(r"(?i)(bearer\s+)[\w.~+/=-]+"),
    re.compile(r"(?i)(x-goog-(?:credential|signature)=)[^&\s\"']+"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
               re.DOTALL),
    re.compile(r"(?i)(\"?(?:refresh_token|client_secret|private_key)\"?\s*[:=]\s*\"?)[^\"',\s}]+"),
]


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Remove known secret shapes, and the exact ``secrets`` given, from ``text``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    for pattern in _SECRETS:
        text = pattern.sub(
            lambda m: (m.group(1) if m.groups() else "") + "<redacted>", text
        )
    return text


__all__ = ["chain_leaks", "redact", "safe_cause"]
