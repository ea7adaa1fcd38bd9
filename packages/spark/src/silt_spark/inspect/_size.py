"""How large an operator's state is, from its shards' manifests (no state is read)."""

from __future__ import annotations

from dataclasses import dataclass, field

import silt

from ..errors import LayoutMismatchError
from ..runtime import _layout, _names, _root, _sources, _storage


@dataclass(frozen=True)
class StateSize:
    """An operator's state at one version, summed over its shards.

    ``bytes`` and ``entries`` are what the shards' SSTs hold (compressed bytes on the object
    store; entries include tombstones and old values that compaction has not dropped yet, so
    they bound the live keys from above). An SST shared by shards after a rescale counts once per
    shard that references it, as it does for reads. The memtable of a running query is not
    included: it is part of the next commit.
    """

    bytes: int
    entries: int
    ssts: int
    #: Shards of the current layout, and each shard's version counted (``None``: no state yet).
    versions: dict[int, int | None] = field(default_factory=dict)

    @property
    def shards(self) -> int:
        return len(self.versions)


def state_size(
    state_url: str, version: int | None = None, *,
    storage_options: dict[str, str] | None = None,
) -> StateSize:
    """The size of the state an operator keeps at ``state_url``: at micro-batch ``version``
    (each shard's latest version not after it), or the latest. Reads one manifest per shard.
    ``storage_options``: object-store options for the root (credentials included), as for the
    operator builders; the active Spark session's ``spark.silt.storage.*`` conf, if any, sets
    them too.

    >>> size = silt_spark.state_size("s3://bucket/state/counts")    # doctest: +SKIP
    >>> print(f"{size.bytes / 1e9:.1f} GB in {size.entries:,} entries, {size.shards} shards")
    """
    storage = _storage.resolve(storage_options, _storage.active_session())
    desc = _root.read_descriptor(state_url, storage)
    if desc is None:
        raise LayoutMismatchError(
            f"{state_url!r} is not a silt_spark operator root (no {_names.DESCRIPTOR}); pass the "
            "state_url the operator was built with"
        )
    spec = _root.spec_of(desc, state_url, storage)
    at_most = version if version is not None else 2**63 - 1
    total = entries = ssts = 0
    versions: dict[int, int | None] = {}
    index = [g for g, _ in spec.layouts].index(spec.generation)
    for shard in range(spec.num_shards):
        db = silt.open(spec.shard_url(shard), at_most=at_most, settings=spec.silt_settings(),
                       storage_options=spec.storage_options, read_only=True)
        versions[shard] = db.version
        sources = [db]
        if db.version is None and index > 0:  # a rescaled shard without a version of its own
            db.close()
            first, last = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
            found: list[tuple[silt.DB, int, int]] = []
            _sources.previous_sources(spec, index - 1, first, last, at_most, found)
            sources = [src for src, _, _ in found]
        for src in sources:
            try:
                manifest = src.manifest
                for s in manifest.all_ssts() if manifest is not None else ():
                    total += s.size
                    entries += s.entries
                    ssts += 1
            finally:
                src.close()
    return StateSize(total, entries, ssts, versions)
