"""Adoption: applying a compaction record to the writer's current tree, or refusing to.

The record was computed from an older version; since then the writer may have added L0 SSTs and
adopted other compactions. :func:`adopt` accepts the record only if

1. every input is still live;
2. the inputs sit where the mode allows (an L0 *suffix*, i.e. the oldest L0 SSTs, except for
   ``drop``, which may take any SST; for ``into_level`` the level above the target and the
   target; for ``new_run`` adjacent whole runs, starting at the first non-empty run when L0
   inputs are present; empty runs are ignored);
3. the resulting target run is still sorted with disjoint ranges;
4. for ``drop_tombstones`` (and ``drop``), nothing below the output overlaps it.

Those rules guarantee that every key reads the same before and after (newer data never moves
below older data). A refused record's outputs are garbage for GC. Pure: no I/O.
"""

from __future__ import annotations

from ..sst.builder import SstInfo
from .layout import hull, is_sorted_run, nothing_below, overlaps
from .record import CompactionRecord

Tree = tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...]]


class Refused(Exception):
    """Why a record cannot be adopted (the message is for logs and metrics)."""


def adopt(l0: tuple[SstInfo, ...], levels: tuple[tuple[SstInfo, ...], ...],
          record: CompactionRecord) -> Tree:
    """The tree with ``record`` applied. Raises :class:`Refused` when it may not be applied."""
    task = record.task
    ids = set(task.inputs)
    l0_pos = [i for i, s in enumerate(l0) if s.id in ids]
    run_hits = {i: [s for s in run if s.id in ids] for i, run in enumerate(levels)}
    run_hits = {i: hit for i, hit in run_hits.items() if hit}
    found = len(l0_pos) + sum(len(h) for h in run_hits.values())
    if found != len(ids):
        raise Refused(f"{len(ids) - found} of {len(ids)} inputs are no longer live")
    if task.mode == "drop":
        # Dropping rewrites nothing, so any L0 SST may go (not only the oldest), as long as no
        # older data it shadows lies below it (checked below).
        new_l0 = tuple(s for s in l0 if s.id not in ids)
    elif l0_pos and l0_pos != list(range(len(l0) - len(l0_pos), len(l0))):
        raise Refused("L0 inputs are not the oldest L0 SSTs")
    else:
        new_l0 = l0[:len(l0) - len(l0_pos)]
    in_lo, in_hi = hull([l0[i] for i in l0_pos] + [s for hit in run_hits.values() for s in hit])
    outputs = tuple(sorted(record.outputs, key=lambda s: s.smallest))
    if not is_sorted_run(outputs):
        raise Refused("outputs overlap each other")

    if task.mode == "drop":
        if outputs:
            raise Refused("a drop task has no outputs")
        layers = [[s] for s in l0] + [list(r) for r in levels]
        for depth, layer in enumerate(layers):
            for s in layer:
                if s.id in ids and any(
                    t.id not in ids and overlaps(t, s.smallest, s.largest)
                    for deeper in layers[depth + 1:] for t in deeper
                ):
                    raise Refused(f"dropping {s.id} would expose older data below it")
        new_levels = tuple(tuple(s for s in run if s.id not in ids) for run in levels)
        return new_l0, new_levels

    if task.mode == "into_level":
        target = task.target_level - 1
        allowed = {target, target - 1}
        if not set(run_hits) <= allowed:
            raise Refused("inputs come from levels other than the target and the one above it")
        if l0_pos and (target != 0):
            raise Refused("L0 inputs may only go into level 1")
        runs = [list(r) for r in levels]
        while len(runs) <= target:
            runs.append([])
        for i in run_hits:
            runs[i] = [s for s in runs[i] if s.id not in ids]
        if any(overlaps(s, in_lo, in_hi) for s in runs[target]):
            raise Refused("SSTs that are not inputs overlap the inputs in the target level")
        merged = tuple(sorted([*runs[target], *outputs], key=lambda s: s.smallest))
        if not is_sorted_run(merged):
            raise Refused("outputs overlap SSTs that stayed in the target level")
        runs[target] = list(merged)
        new_levels = tuple(tuple(r) for r in runs)
        position = target
    else:  # new_run
        hit = sorted(run_hits)
        # Empty runs (a leveled tree can leave some) hold no data: they never separate runs.
        if hit and any(levels[i] and i not in run_hits for i in range(hit[0], hit[-1] + 1)):
            raise Refused("input runs are not adjacent")
        for i in hit:
            if len(run_hits[i]) != len(levels[i]):
                raise Refused(f"run {i} is only partly an input")
        if l0_pos and hit and any(levels[i] for i in range(hit[0])):
            raise Refused("L0 inputs must merge with the newest runs")
        start = hit[0] if hit else 0
        stop = hit[-1] + 1 if hit else 0
        runs = [*levels[:start], outputs, *levels[stop:]] if outputs else [
            *levels[:start], *levels[stop:]
        ]
        new_levels = tuple(tuple(r) for r in runs)
        position = start
    if task.drop_tombstones:
        if not nothing_below(new_levels, position if outputs else position - 1, in_lo, in_hi):
            raise Refused("tombstones were dropped but older data now lies below the output")
    return new_l0, tuple(r for r in new_levels)
