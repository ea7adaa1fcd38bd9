"""The processors' state schema registry on the driver, shared by ``transform_with_state`` and
``transform_batches`` (one state layout, one registry): the state variables a processor declares
evolved against the registry its root records, and recorded there before any state is written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..runtime import _api, _rewrite, _root, _schema
from ..runtime._names import DESCRIPTOR_SCHEMAS


def record_schemas(
    spec: _root.OperatorSpec, df: Any, keys: list[str], declared: dict[str, _schema.Declared]
) -> tuple[_root.OperatorSpec, dict[str, Any]]:
    """The operator's spec and registry once the root records ``declared`` (and the key
    columns' types, pinned): evolved from what the root holds (refused with
    :class:`~silt_spark.errors.StateSchemaError` before anything is written), the descriptor
    created or updated, and the spec's settings made to rewrite values of older schema ids in
    compaction (never at restart)."""
    have = _root.read_descriptor(spec.root, spec.storage_options)
    registry = _schema.evolve((have or {}).get(DESCRIPTOR_SCHEMAS) or {}, declared)
    spec = _root.ensure_descriptor(
        spec, {"key_columns": _api.key_types(df, keys), DESCRIPTOR_SCHEMAS: registry},
        _api.PINNED,
    )
    if have is not None and DESCRIPTOR_SCHEMAS in have and have[DESCRIPTOR_SCHEMAS] != registry:
        _root.update_descriptor(spec.root, {DESCRIPTOR_SCHEMAS: registry},
                                 spec.storage_options)
    spec = dataclasses.replace(spec, settings=_rewrite.settings_for(spec.settings, registry))
    return spec, registry


__all__ = ["record_schemas"]
