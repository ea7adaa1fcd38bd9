"""The operator root: its :class:`OperatorSpec` (what a task needs to find its shards) and its
descriptor (``silt-spark.json``: kind, key groups, layouts, the operator's own fields), created
or checked on the driver when a query starts.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import silt
from silt.errors import NotFoundError
from silt.plugins import open_store
from silt.store import retrying

from ..errors import (
    LayoutMismatchError,
)
from . import _descriptor, _layout, _lifecycle
from ._descriptor import DESCRIPTOR, DESCRIPTOR_FORMAT

log = logging.getLogger("silt_spark")


@dataclass(frozen=True)
class OperatorSpec:
    """Everything a task needs to find and use its shard: options only, no open clients."""

    kind: str
    root: str
    num_shards: int
    key_groups: int = _layout.DEFAULT_KEY_GROUPS
    #: Discard state of another streaming query found under the root (``take_over=True``).
    take_over: bool = False
    settings: dict[str, Any] | None = None
    #: Layout generation of ``num_shards`` (0 until the first rescale) and every layout of the
    #: root, oldest first, as ``(generation, num_shards)``; the last one is this spec's.
    generation: int = 0
    layouts: tuple[tuple[int, int], ...] = ()
    #: The descriptor's id (a dropped and re-created root gets a new one) and whether the
    #: root records the queries it serves (see _lifecycle.py).
    incarnation: str = ""
    records_origin: bool = False
    #: Watermark delay (ms) of each event-time input; empty for operators without event time.
    event_time_delays: tuple[int, ...] = ()
    #: Whether the query has the operator's tick source (``_tick.py``): it then runs Spark's
    #: no-data batches, and rows are late against batch ``b - 1``'s watermark as in Spark;
    #: without it (``spark.silt.tick=false``), a data batch also does the work of the no-data
    #: batch before it, so its rows are late against its own watermark.
    ticks: bool = False
    #: Whether Spark runs a no-data batch for this operator after a batch that moved the
    #: watermark: only for one with work due then (eviction, closings, timers). A join with a
    #: watermark on one side only evicts nothing: it gets no tick, and its rows are late
    #: against batch ``b - 1``'s watermark, as Spark's (which runs its batches back to back).
    no_data_batches: bool = True
    #: ``spark.silt.memoryBudget`` in bytes (each Python worker's silt.set_memory_budget), or
    #: ``None`` to keep the process's budget.
    memory_budget: int | None = None
    #: ``spark.silt.maintenance.intervalBatches``: a shard that commits collects its garbage
    #: (``DB.gc``) once per this many micro-batches; 0 never (see :meth:`ShardTask.finish`).
    maintenance_batches: int = 100
    #: Storage options (credentials included) for every store of the root, from the builder's
    #: ``storage_options=`` and ``spark.silt.storage.*`` (_storage.py); never in ``repr``.
    storage_options: dict[str, str] | None = field(default=None, repr=False)

    def silt_settings(self) -> silt.Settings:
        return silt.Settings.from_dict(self.settings) if self.settings else silt.Settings()

    def shard_url(self, shard: int) -> str:
        return _layout.shard_url(
            self.root, shard, self.num_shards, self.key_groups, self.generation
        )


def read_descriptor(
    root: str, storage_options: dict[str, str] | None = None
) -> dict[str, Any] | None:
    """The operator root's descriptor (format 1 upgraded in memory), or ``None``."""
    store = open_store(root, storage_options=storage_options)
    try:
        return descriptor_of(store)
    finally:
        store.close()


def descriptor_of(store: Any) -> dict[str, Any] | None:
    """The descriptor of the operator root ``store`` is opened at (format 1 upgraded in
    memory), or ``None``; :class:`~silt.errors.CorruptionError` for one that is not as
    silt_spark writes it (:func:`silt_spark.runtime._descriptor.parse`)."""
    try:
        data = retrying(lambda: store.get(DESCRIPTOR))
    except NotFoundError:
        return None
    return _descriptor.parse(data)


def ensure_descriptor(
    spec: OperatorSpec, extra: dict[str, Any] | None = None, pinned: tuple[str, ...] = ()
) -> OperatorSpec:
    """Create the operator root's descriptor, or check it against ``spec`` (driver side).

    The descriptor pins the operator kind and the key-group count (a mismatch fails at once
    with :class:`LayoutMismatchError` instead of reading garbage), and records the layouts
    (shard counts) the root has had. A different ``num_shards`` is a **rescale**: a new layout
    generation is appended, and each new shard builds its first version from the previous
    layout's shards when its first task runs (see :func:`migrate`). ``extra`` holds more
    descriptor fields (key schema, state record layout); those named in ``pinned`` must not
    change. Returns ``spec`` with its layout generation and history filled in.
    """
    extra = dict(extra or {})
    want = {
        "format": DESCRIPTOR_FORMAT,
        "incarnation": uuid.uuid4().hex,
        _lifecycle.DESCRIPTOR_FIELD: _lifecycle.DESCRIPTOR_VERSION,
        "operator": spec.kind,
        "key_groups": spec.key_groups,
        "num_shards": spec.num_shards,
        "generation": 0,
        "layouts": [{"generation": 0, "num_shards": spec.num_shards}],
        **extra,
    }
    store = open_store(spec.root, storage_options=spec.storage_options)
    try:
        data = json.dumps(want, sort_keys=True).encode()
        if retrying(lambda: store.put_if_absent(DESCRIPTOR, data)):
            return replace(
                spec, generation=0, layouts=((0, spec.num_shards),),
                incarnation=want["incarnation"], records_origin=True,
            )
    finally:
        store.close()
    have = read_descriptor(spec.root, spec.storage_options)
    assert have is not None
    if have.get("operator") != spec.kind:
        raise LayoutMismatchError(
            f"the state root {spec.root!r} holds state of a {have.get('operator')!r} operator, "
            f"not {spec.kind!r}; use another state_url"
        )
    if have.get("key_groups") != spec.key_groups:
        raise LayoutMismatchError(
            f"the state root {spec.root!r} was created with key_groups={have.get('key_groups')}; "
            f"key_groups is fixed per root, got {spec.key_groups}"
        )
    for name in pinned:
        if name in have and name in extra and have[name] != extra[name]:
            raise LayoutMismatchError(
                f"the state root {spec.root!r} was created with {name}={have[name]!r}, which "
                f"its state records depend on; got {extra[name]!r}. Use another state_url"
            )
    changed = any(k not in have for k in extra)
    for k, v in extra.items():
        have.setdefault(k, v)
    if have["num_shards"] != spec.num_shards:
        gen = have["generation"] + 1
        log.warning(
            "silt_spark: rescaling %s from %d to %d shards (layout generation %d); each new "
            "shard builds its first version from the old shards' state when its first task runs",
            spec.root, have["num_shards"], spec.num_shards, gen,
        )
        have["layouts"].append({"generation": gen, "num_shards": spec.num_shards})
        have["generation"] = gen
        have["num_shards"] = spec.num_shards
        changed = True
    if changed:
        have["format"] = DESCRIPTOR_FORMAT
        store = open_store(spec.root, storage_options=spec.storage_options)
        try:
            body = json.dumps(have, sort_keys=True).encode()
            retrying(lambda: store.put(DESCRIPTOR, body))
        finally:
            store.close()
    layouts = tuple((int(x["generation"]), int(x["num_shards"])) for x in have["layouts"])
    return replace(
        spec, generation=int(have["generation"]), layouts=layouts,
        incarnation=str(have.get("incarnation", "")),
        records_origin=_lifecycle.DESCRIPTOR_FIELD in have,
    )


def refresh_descriptor(spec: OperatorSpec, fields: dict[str, Any]) -> None:
    """Set ``fields`` in the root's descriptor when any differs from what it holds (fields a
    query records at every start and that may change between runs, such as the outputs)."""
    have = read_descriptor(spec.root, spec.storage_options)
    if have is not None and any(have.get(k) != v for k, v in fields.items()):
        update_descriptor(spec.root, fields, spec.storage_options)


def update_descriptor(
    root: str, fields: dict[str, Any], storage_options: dict[str, str] | None = None
) -> None:
    """Set ``fields`` in the operator root's descriptor (driver side, when a query starts)."""
    have = read_descriptor(root, storage_options)
    assert have is not None
    have.update(fields)
    have["format"] = DESCRIPTOR_FORMAT
    body = json.dumps(have, sort_keys=True).encode()
    store = open_store(root, storage_options=storage_options)
    try:
        retrying(lambda: store.put(DESCRIPTOR, body))
    finally:
        store.close()


def spec_of(
    desc: dict[str, Any], root: str, storage_options: dict[str, str] | None = None
) -> OperatorSpec:
    """The spec of the operator root at ``root`` as its descriptor ``desc`` records it (for
    reading it: ``read_state``, ``read_changes``, ``state_size``, ``silt inspect``)."""
    layouts = tuple((int(x["generation"]), int(x["num_shards"])) for x in desc["layouts"])
    return OperatorSpec(
        kind=desc["operator"], root=root, num_shards=int(desc["num_shards"]),
        key_groups=int(desc["key_groups"]), generation=int(desc["generation"]), layouts=layouts,
        storage_options=storage_options,
    )
