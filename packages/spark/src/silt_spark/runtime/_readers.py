"""How ``read_state``, ``read_changes`` and ``silt inspect`` read an operator's entries: each
operator registers a :class:`StateReader` for its kind (the descriptor's ``operator``), and
``silt_spark/inspect/`` looks the kind up here, never importing an operator.

The built-in operators register when their package is imported. The package above every floor
(``silt_spark/__init__.py``) hands :func:`add_loader` what imports it, and :func:`reader_of`
runs that the first time a kind is asked for, so a reader finds every operator however it was
reached, and nothing here names a floor above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Entries of one shard as ``read_state`` reads them: ``(key, value, expires_at_ms, version)``.
Items = Any


@dataclass(frozen=True)
class StateReader:
    """What ``silt_spark/inspect/`` needs to know of one operator kind's state."""

    #: The descriptor's ``operator``.
    kind: str
    #: ``decode(items, state_columns)``: ``(key tuple, state, map_key, value JSON,
    #: expires_at_ms, version)`` per live entry (the JSON form of every state).
    decode: Callable[[Items, list[list[str]] | None], Any]
    #: The states ``read_state(state_name=...)`` reads typed through :attr:`typed_rows`.
    states: tuple[str, ...] = ()
    #: ``typed_columns(desc, state_name)``: the typed rows' columns after the key columns,
    #: before ``shard_version``.
    typed_columns: Callable[[dict[str, Any], str], list[tuple[str, str]]] | None = None
    #: ``typed_rows(items, desc, root, schema, state_name)``: a pyarrow table of ``schema`` per
    #: entry of that state, or ``None`` when there is none.
    typed_rows: Callable[[Items, dict[str, Any], str, Any, str], Any] | None = None
    #: ``key_columns(desc, state_name)``: the typed rows' key columns ``[name, type]``
    #: (``None``: the query's, the descriptor's ``key_columns``).
    key_columns: Callable[[dict[str, Any], str], list[list[str]]] | None = None
    #: ``decode_typed(items, registry, only)``: a processor's state variables decoded with their
    #: schemas (kinds with user-declared variables only).
    decode_typed: Callable[[Items, Any, str | None], Any] | None = None


_READERS: dict[str, StateReader] = {}
#: What imports the operators that are not registered yet (run once, on the first lookup).
_LOADERS: list[Callable[[], object]] = []


def add_loader(load: Callable[[], object]) -> None:
    """Run ``load`` (once) before the first lookup that finds no reader: it imports operators,
    which register themselves."""
    _LOADERS.append(load)


def _load() -> None:
    while _LOADERS:
        _LOADERS.pop(0)()


def register(reader: StateReader) -> None:
    """Make ``reader`` the one of its kind (an operator module calls it when imported)."""
    _READERS[reader.kind] = reader


def reader_of(kind: str) -> StateReader | None:
    """The reader registered for ``kind``, or ``None`` when no operator has that kind."""
    if kind not in _READERS:
        _load()
    return _READERS.get(kind)


def kinds() -> list[str]:
    """Every registered kind, sorted (for messages)."""
    _load()
    return sorted(_READERS)
