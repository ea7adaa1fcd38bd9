"""Which keys may differ between versions of one state, found from the manifests' deltas.

:func:`changed_keys` backs :meth:`silt.DB.changed_keys`: instead of comparing two snapshots it
reads only what the versions do not share: the keys of every SST one side lists and the other
does not, and the older side's keys under range deletes made after it. The answer is a
superset of the keys whose values differ (a compaction rewrites unchanged keys into new SSTs);
it never misses one. Pure reads of immutable read views: thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from .state import TreeState


def changed_keys(now_state: TreeState, since: Sequence[TreeState], start: bytes | None,
                 end: bytes | None) -> list[bytes]:
    """Keys in ``[start, end)`` whose committed value may differ between the base versions of
    the older states ``since`` and that of ``now_state``, sorted (see the module docstring)."""
    since_ids: set[str] = set()
    since_seq = 0
    for old_state in since:
        base = old_state.manifest
        if base is not None:
            since_ids.update(s.id for s in base.all_ssts())
            since_seq = max(since_seq, base.seq)
    # The base versions' own SSTs: not compactions shown before a commit (silt.compaction.early)
    now, now_base = now_state.committed_view(), now_state.manifest
    now_ids = {s.id for s in now_base.all_ssts()} if now_base is not None else set()
    olds = [old_state.committed_view() for old_state in since]
    keys = now.changed_keys(since_ids, start, end)
    for old in olds:
        # SSTs compacted away since: a key deleted since may have left no trace in this
        # version (compaction drops a tombstone with the value it hides)
        keys |= old.changed_keys(now_ids, start, end)
    for lo, hi, seq in now.tombs.fragments:
        if seq <= since_seq:
            continue
        lo = lo if start is None or lo > start else start
        hi = hi if end is None or hi < end else end
        if lo >= hi:
            continue
        for old in olds:
            keys.update(k for k, rec in old.committed_records(lo, hi) if rec is not None)
    return sorted(keys)
