"""What a policy asks for: :class:`CompactionTask`, and the :class:`Policy` interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..manifest import Manifest
    from ..settings import Settings

#: ``into_level``: merge the inputs into level ``target_level`` (1-based) of a leveled tree.
#: ``new_run``: merge the inputs (an L0 suffix and/or adjacent whole runs) into one new sorted run
#: that takes their place. ``drop``: remove the inputs without rewriting anything.
MODES = ("into_level", "new_run", "drop")


@dataclass(frozen=True)
class CompactionTask:
    """One unit of compaction work chosen by a policy.

    ``inputs`` are SST ids of the manifest the task was picked from. ``drop_tombstones`` may be
    true only when no SST below the output overlaps it (the output is the bottom of its key
    range): then tombstones and expired entries are left out of the output.
    """

    inputs: tuple[str, ...]
    mode: str
    target_level: int = 0
    drop_tombstones: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown compaction mode {self.mode!r}; expected one of {MODES}")
        if not self.inputs:
            raise ValueError("a compaction task needs at least one input SST")
        if self.mode == "into_level" and self.target_level < 1:
            raise ValueError("into_level tasks need target_level >= 1")


class Policy(Protocol):
    """A compaction policy. Registered by name through ``registry.add_compaction_policy``.

    The registered factory is called as ``factory(settings)`` and returns an object with
    ``pick``. ``pick`` must be pure: same manifest and time, same answer; no I/O.
    """

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None: ...


def make_policy(name: str, settings: Settings) -> Policy | None:
    """The policy registered as ``name`` (``None`` for ``"none"``), built for ``settings``."""
    if name == "none":
        return None
    from ..errors import InvalidArgumentError
    from ..plugins import get_registry, registry_for

    factory = registry_for("compaction_policy", name).compaction_policies.get(name)
    if factory is None:
        known = ", ".join(sorted(get_registry().compaction_policies)) or "none"
        raise InvalidArgumentError(
            f"no compaction policy named {name!r} is installed (installed: {known}, or 'none'); "
            "check Settings.compaction or install the plugin that provides it"
        )
    return factory(settings)
