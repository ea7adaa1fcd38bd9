"""Compaction: policies pick work from a manifest; the compactor does it; the writer adopts it.

* A **policy** (``leveled``, ``tiered``, ``ttl`` or a plugin's) is a pure function of a manifest:
  ``pick(manifest, now_ms) -> CompactionTask | None``. No I/O, so it can be simulated.
* The **compactor** (:mod:`.compactor`) merges the task's input SSTs into new SSTs and writes a
  record under ``compaction/`` naming inputs and outputs. It never writes a manifest.
* The **writer** adopts a record at its next commit if every input is still live and the result
  keeps the tree's ordering rules (:func:`.adopt.adopt`); otherwise the record is discarded and
  its outputs become garbage for GC.
"""

from __future__ import annotations

from .task import MODES, CompactionTask, Policy

__all__ = ["MODES", "CompactionTask", "Policy"]
