"""What object-store requests cost: request classes, a price table, and the per-version count.

Object stores bill every request. The expensive class (S3's PUT, COPY, POST and LIST; GCS's
"Class A"; Azure's write and list operations) costs about twelve times the cheap one (GET and
ranged GET), and deletes are free on S3. silt counts its requests by kind (``GET``,
``RANGE_GET``, ``PUT``, ``LIST``, ``DELETE``, see :mod:`silt.metrics`), so what a workload
costs is a sum over kinds of count times price:

* :class:`Prices` is a price table, in US dollars per 1,000 requests of each kind;
  :data:`S3_STANDARD` (the default) holds S3 Standard's list prices, and
  :meth:`Prices.parse` reads a table written as ``PUT=0.005,LIST=0.005,GET=0.0004`` (kinds left
  out cost what the default says). Prices differ by region, storage class and provider: pass
  your own.
* :func:`request_classes` splits counts into class A (``PUT``, ``LIST``), class B (``GET``,
  ``RANGE_GET``) and free (``DELETE``).
* Every committed version records in its manifest's ``meta``, under :data:`META_REQUESTS`, the
  requests its writer made **since its previous commit** (or since it opened the DB): reads,
  SST uploads, compaction, GC fencing checks, and this commit's manifest write counted as one
  PUT. A request made after that (a post-commit check, a reservation, a retried write) lands in
  the next version's count, so the counts of consecutive versions add up to what the writer
  paid, each request once. :func:`encode_requests` / :func:`decode_requests` are its form
  (``LIST=1,PUT=2,RANGE_GET=3``); ``silt inspect`` shows it with its estimated cost.

A LIST is counted once per listing call; a listing of more than one page (1,000 names on S3)
is billed per page, so its count is a lower bound there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgumentError
from .metrics import KINDS

#: Request kinds of each class.
CLASS_A = ("PUT", "LIST")
CLASS_B = ("GET", "RANGE_GET")
FREE = ("DELETE",)

#: The ``meta`` key under which a committed version records its writer's requests.
META_REQUESTS = "silt.requests"
#: ``meta`` keys starting with this are silt's own: a caller's commit meta may not use them.
RESERVED_META_PREFIX = "silt."


@dataclass(frozen=True)
class Prices:
    """A price table: US dollars per 1,000 requests of each kind (:data:`silt.metrics.KINDS`)."""

    name: str
    per_1000: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind, price in self.per_1000.items():
            if kind not in KINDS:
                raise InvalidArgumentError(
                    f"unknown request kind {kind!r} in price table {self.name!r}; "
                    f"kinds are {', '.join(KINDS)}")
            if (isinstance(price, bool) or not isinstance(price, (int, float))
                    or not math.isfinite(price) or price < 0):
                raise InvalidArgumentError(
                    f"price of {kind} in {self.name!r} must be a finite number >= 0 (US dollars "
                    f"per 1,000 requests), got {price!r}")

    def price(self, kind: str) -> float:
        """Dollars per 1,000 requests of ``kind`` (0 for a kind the table does not name)."""
        return float(self.per_1000.get(kind, 0.0))

    def cost(self, requests: Mapping[str, Any]) -> float:
        """Estimated dollars for ``requests`` (``{kind: count}`` or ``{kind: {"count": n}}``)."""
        return sum(_count(n) * self.price(kind) / 1000.0 for kind, n in requests.items())

    @classmethod
    def parse(cls, text: str, base: Prices | None = None) -> Prices:
        """A table from ``"PUT=0.005,LIST=0.005,GET=0.0004"``: each kind's dollars per 1,000
        requests; kinds not named keep ``base``'s prices (default :data:`S3_STANDARD`)."""
        base = S3_STANDARD if base is None else base
        prices = dict(base.per_1000)
        for item in (text or "").split(","):
            if not item.strip():
                continue
            kind, sep, value = item.partition("=")
            kind = kind.strip().upper()
            try:
                if not sep:
                    raise ValueError
                prices[kind] = float(value)
            except ValueError:
                raise InvalidArgumentError(
                    f"bad price {item.strip()!r}: write KIND=DOLLARS_PER_1000 pairs separated by "
                    f"commas, e.g. 'PUT=0.005,LIST=0.005,GET=0.0004'") from None
        return cls(f"{base.name} (adjusted)" if text and text.strip() else base.name, prices)


#: S3 Standard's list prices: PUT, COPY, POST and LIST $0.005 per 1,000; GET $0.0004 per
#: 1,000; DELETE free.
S3_STANDARD = Prices("S3 Standard", {
    "PUT": 0.005, "LIST": 0.005, "GET": 0.0004, "RANGE_GET": 0.0004, "DELETE": 0.0,
})


def _count(n: Any) -> int:
    return int(n["count"] if isinstance(n, Mapping) else n)


def request_classes(requests: Mapping[str, Any]) -> dict[str, int]:
    """``{"class_a", "class_b", "free"}`` counts of ``requests`` (``{kind: count}`` or
    ``{kind: {"count": n}}``); a kind outside the three classes counts as class A."""
    out = {"class_a": 0, "class_b": 0, "free": 0}
    for kind, n in requests.items():
        cls = "class_b" if kind in CLASS_B else "free" if kind in FREE else "class_a"
        out[cls] += _count(n)
    return out


def encode_requests(requests: Mapping[str, int]) -> str:
    """``{kind: count}`` as ``meta`` text: ``LIST=1,PUT=2`` (sorted, zero counts left out)."""
    return ",".join(f"{k}={int(n)}" for k, n in sorted(requests.items()) if n)


def decode_requests(text: str) -> dict[str, int]:
    """The counts :func:`encode_requests` wrote; ``{}`` for text that is not such a list (meta
    is the writer's: a damaged or foreign value is shown as unknown, never trusted)."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        kind, sep, value = item.partition("=")
        if not sep or kind not in KINDS or not value.isdigit():
            return {}
        out[kind] = int(value)
    return out


def recorded_requests(meta: Mapping[str, str]) -> dict[str, int]:
    """The requests a version's writer recorded in its ``meta`` (:data:`META_REQUESTS`), by
    kind; ``{}`` when it recorded none (written before silt counted them)."""
    return decode_requests(meta.get(META_REQUESTS, ""))


def user_meta(meta: Mapping[str, str]) -> dict[str, str]:
    """``meta`` without silt's own entries (keys starting with :data:`RESERVED_META_PREFIX`)."""
    return {k: v for k, v in meta.items() if not k.startswith(RESERVED_META_PREFIX)}


def summary(requests: Mapping[str, Any], prices: Prices = S3_STANDARD) -> dict[str, Any]:
    """``{"class_a", "class_b", "free", "usd", "prices"}`` for ``requests``."""
    return {**request_classes(requests), "usd": prices.cost(requests), "prices": prices.name}
