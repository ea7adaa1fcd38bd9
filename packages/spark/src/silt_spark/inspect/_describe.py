"""``silt inspect`` of an operator root: what :mod:`silt_spark.plugin` tells the core CLI.

The core CLI knows nothing of Spark; it finds this through the ``silt`` entry point
(``registry.add_root_inspector("silt-spark.json", ...)``) and prints what :func:`describe`
returns: the operator kind, its layout (key columns, key groups, shard count, generation and the
layouts before it), the watermark its last batch ran with, each shard's latest version ``<=`` the
micro-batch asked for with its SSTs, bytes and entries, and with ``--values N`` the first ``N``
state entries decoded as :func:`silt_spark.read_state` shows them (read directly, no Spark).

Reads the descriptor, one manifest per shard (the shards of the layout before a rescale for a
new shard without a version of its own), and with ``values`` the shards' entries until ``N``
are found.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from typing import Any

import silt
from silt.errors import VersionNotFoundError
from silt.store import ObjectStore
from silt.tierkit import public_url

from ..runtime import _layout, _root, _sources
from ..runtime._names import META_WATERMARK
from . import _read

_LATEST = 2**63 - 1


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def describe(store: ObjectStore, url: str, version: int | None, values: int) -> dict[str, Any]:
    """The operator root at ``url`` (``store``), as of micro-batch ``version`` (each shard's
    latest version ``<=`` it; ``None``: the latest), with ``values`` decoded state entries.
    See :func:`silt.plugins.describe_root` for the shape. Raises
    :class:`~silt.errors.CorruptionError` for a descriptor that does not decode."""
    desc = _root.descriptor_of(store)  # CorruptionError for one that does not decode
    if desc is None:  # the marker vanished between the check and the read (drop_state)
        raise VersionNotFoundError(f"{public_url(url)!r} holds no silt_spark descriptor now")
    spec = _root.spec_of(desc, url)
    at_most = _LATEST if version is None else version
    index = [g for g, _ in spec.layouts].index(spec.generation)
    shards: list[list[Any]] = []
    watermark: tuple[int, int] | None = None  # (shard version, watermark ms)
    for shard in range(spec.num_shards):
        db = silt.open(spec.shard_url(shard), at_most=at_most, settings=spec.silt_settings(),
                       read_only=True)
        sources = [db]
        note = ""
        if db.version is None and index > 0:
            db.close()
            first, last = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
            found: list[tuple[silt.DB, int, int]] = []
            _sources.previous_sources(spec, index - 1, first, last, at_most, found)
            sources = [src for src, _, _ in found]
            note = "state still in the previous layout's shards" if sources else ""
        ssts = size = entries = 0
        for src in sources:
            try:
                m = src.manifest
                for s in m.all_ssts() if m is not None else ():
                    ssts, size, entries = ssts + 1, size + s.size, entries + s.entries
                mark = (m.meta or {}).get(META_WATERMARK) if m is not None else None
                if mark is not None and src is db and (
                        watermark is None or m.version > watermark[0]):
                    watermark = (m.version, int(mark))
            finally:
                src.close()
        name = _layout.shard_dir(shard, spec.num_shards, spec.key_groups, spec.generation)
        shards.append([shard, name.rstrip("/"), "-" if db.version is None else db.version,
                       ssts, size, entries, note or "-"])
    key_columns = desc.get("key_columns") or [["key", "string"]]
    fields: dict[str, Any] = {
        "operator": desc.get("operator"),
        "key columns": ", ".join(f"{n} {t}" for n, t in key_columns),
        "key groups": spec.key_groups,
        "shards": spec.num_shards,
        "generation": spec.generation,
        "layouts": ", ".join(f"gen {g}: {n} shards" for g, n in spec.layouts),
        "as of batch": "latest" if version is None else version,
        "watermark": "-" if watermark is None
        else f"{watermark[1]} ({_time(watermark[1])}, shard version {watermark[0]})",
    }
    for name in ("state_columns", "window", "dedup_time"):
        if name in desc:
            fields[name.replace("_", " ")] = desc[name]
    described: dict[str, Any] = {
        "kind": f"silt_spark {desc.get('operator')} operator",
        "fields": fields,
        "tables": [{
            "title": "shards",
            "columns": ["SHARD", "DB", "VERSION", "SSTS", "BYTES", "ENTRIES", "NOTE"],
            "rows": shards,
        }],
    }
    if values:
        described["tables"].append(_values(spec, desc, key_columns, at_most, values))
    return described


def _values(spec: _root.OperatorSpec, desc: dict[str, Any], key_columns: list[list[str]],
            at_most: int, limit: int) -> dict[str, Any]:
    """The first ``limit`` state entries, decoded as ``read_state`` rows."""
    kind = desc["operator"]
    state_columns = desc.get("state_columns", desc.get("state_schemas"))
    rows: list[list[Any]] = []
    for shard in range(spec.num_shards):
        if len(rows) >= limit:
            break
        items = _read.read_shard(spec, shard, at_most)
        for gkey, *rest in islice(_read.decode_entries(kind, items, state_columns),
                                  limit - len(rows)):
            rows.append([*map(_cell, gkey), *map(_cell, rest)])
    names = [n for n, _ in key_columns] + [n for n, _ in _read.STATE_COLUMNS]
    return {"title": f"values (first {limit})", "columns": [c.upper() for c in names],
            "rows": rows}


def _cell(value: Any) -> Any:
    """A value as JSON and a table show it (bytes as hex, anything else as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
