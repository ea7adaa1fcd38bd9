"""Value rewriters: compaction brings old values up to date while it copies them.

An application whose value encoding evolves (a new schema version, a new codec) reads old values
by converting them on every read. A *value rewriter* lets compaction convert them once: each live
value a compaction copies is passed to the rewriter, and what it returns is written instead.
This is RocksDB's compaction filter restricted to changing a value, never dropping one.

**Naming one.** ``Settings.value_rewriter`` is ``"package.module:factory"``: an importable
callable taking ``Settings.value_rewriter_config`` (a string, JSON by convention, ``""`` unless
set) and returning the rewriter, ``rewrite(key: bytes, value: bytes) -> bytes | None``. A name,
not a function object, because compaction may run in another process (the compaction subprocess,
``silt compact``): each process imports the factory once per (name, config).

**The contract** (the application's; silt cannot check it):

- a rewritten value reads, through the application's decoder, as the value it replaces: a
  reader may see either of them (an older retained version keeps the old SST);
- ``None`` keeps the value as it is (the common case: return it fast);
- deterministic and free of side effects: compaction may run a task twice, in any process;
- an exception fails the compaction task (it is picked again later; nothing is adopted).

Tombstones are never passed; a value with a time to live keeps its expiry. The rewriter sees
only values that compaction copies: a key compaction never touches keeps its old value until it
does (or until the application writes it). Flushes, inline deltas and ``multi_get`` do not run
it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

from ..errors import InvalidArgumentError
from ..settings import check_rewriter_name

Rewriter = Callable[[bytes, bytes], "bytes | None"]

_lock = threading.Lock()
_loaded: dict[tuple[str, str], Rewriter] = {}


def load(name: str, config: str) -> Rewriter:
    """The rewriter ``name``'s factory makes from ``config``, imported and built once per
    process; an :class:`~silt.errors.InvalidArgumentError` naming what failed otherwise."""
    key = (name, config)
    with _lock:
        found = _loaded.get(key)
        if found is not None:
            return found
    check_rewriter_name(name)
    module, _, attr = name.partition(":")
    try:
        factory: object = importlib.import_module(module)
        for part in attr.split("."):
            factory = getattr(factory, part)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgumentError(
            f"Settings.value_rewriter {name!r} cannot be imported ({type(exc).__name__}: "
            f"{exc}); install the package that provides it in every process that compacts"
        ) from None
    if not callable(factory):
        raise InvalidArgumentError(f"Settings.value_rewriter {name!r} is not callable")
    rewriter = factory(config)
    if not callable(rewriter):
        raise InvalidArgumentError(
            f"Settings.value_rewriter {name!r} returned {type(rewriter).__name__}, not a "
            "function rewrite(key, value) -> bytes | None"
        )
    with _lock:
        return _loaded.setdefault(key, rewriter)


def apply(rewrite: Rewriter, key: bytes, record: object) -> object:
    """``record`` (a value, ``(value, expires_at_ms)`` or ``None`` for a tombstone) with its value
    rewritten; the same object when the rewriter keeps it."""
    if record is None:
        return None
    if record.__class__ is bytes:
        new = rewrite(key, record)  # type: ignore[arg-type]
        return record if new is None else _checked(new)
    value, expiry = record  # type: ignore[misc]
    new = rewrite(key, value)
    return record if new is None else (_checked(new), expiry)


def _checked(new: object) -> bytes:
    if new.__class__ is not bytes:
        if isinstance(new, (bytearray, memoryview)):
            return bytes(new)
        raise TypeError(f"a value rewriter returned {type(new).__name__}, not bytes or None")
    return new  # type: ignore[return-value]
