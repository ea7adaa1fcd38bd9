"""The batch processor's handle (what ``init`` declares) and ``state`` (what ``process`` is
given: the declared variables by name), and the batch's prefetch of every variable of every
key before ``process`` runs."""

from __future__ import annotations

import json
from typing import Any

from silt.errors import InvalidArgumentError

from ...runtime import _schema
from ...runtime._names import META_DELETED_STATES
from .. import _varkeys
from ._lists import BatchListState
from ._maps import BatchMapState
from ._state import BatchKeys, BatchValueState, BatchVariable
from ._values import HeldValues

_CALLS = {"value": "getValueState({name!r}, schema)", "list": "getListState({name!r}, schema)",
          "map": "getMapState({name!r}, user_key_schema, value_schema)"}


class BatchStates:
    """What ``process`` (and ``expired``) receive as ``state``: the variables ``init``
    declared, by name, and the batch's ``timers``."""

    def __init__(self, handle: BatchHandle, timers: Any = None) -> None:
        self._handle = handle
        #: The batch's timers (a :class:`~silt_spark.operators.batch.BatchTimers`,
        #: the ``timers`` that ``process`` gets): how ``expired`` registers, deletes and lists
        #: timers.
        self.timers = timers

    def _var(self, kind: str, name: str) -> Any:
        var = self._handle._vars.get(name)
        if var is None or var.kind != kind:
            have = "" if var is None else f" (it is a {var.kind} state)"
            raise InvalidArgumentError(
                f"{self._handle._processor} has no {kind} state {name!r}{have}: declare it in "
                f"init with handle.{_CALLS[kind].format(name=name)} (declared: "
                f"{sorted(self._handle._vars)})"
            )
        return var

    def value(self, name: str) -> BatchValueState:
        """The value state variable ``name`` (declared in ``init``)."""
        return self._var("value", name)

    def list(self, name: str) -> BatchListState:
        """The list state variable ``name`` (declared in ``init``)."""
        return self._var("list", name)

    def map(self, name: str) -> BatchMapState:
        """The map state variable ``name`` (declared in ``init``)."""
        return self._var("map", name)


class BatchHandle:
    """What ``init`` receives: declares state variables.

    On the driver (``task=None``) it only records the declarations (name -> ``(kind, key
    schema, value schema, ttl)``); in a task it makes the vectorized variables, their schema
    codecs taken from the operator's registry and their Arrow schemas from the query's.
    """

    def __init__(self, task: Any, processor: str, registry: dict[str, Any] | None = None,
                 arrow_schemas: dict[str, Any] | None = None,
                 arrow_keys: dict[str, Any] | None = None) -> None:
        self._task = task
        self._processor = processor
        self._codecs = _schema.codecs(registry)
        self._arrow = arrow_schemas or {}
        self._arrow_keys = arrow_keys or {}
        #: Driver: what ``init`` declared.
        self.declared: dict[str, tuple[str, Any, Any, Any]] = {}
        self._vars: dict[str, BatchVariable] = {}
        self._keys: Any = None
        self._state: Any = None
        self._values: Any = None
        #: List key -> the sequence number of its next element, once known in this batch.
        self._list_next: dict[bytes, int] = {}
        #: Variables the per-key processor's ``deleteIfExists`` removed with nothing written
        #: since (its manifest meta); a write here takes the variable out of that list.
        self._deleted: set[str] = set()
        if task is not None:
            raw = task.base_meta.get(META_DELETED_STATES) if task.base_meta else None
            self._deleted = set(json.loads(raw)) if raw else set()

    def _declare(self, kind: str, name: str, key_schema: Any, schema: Any, ttl: Any) -> Any:
        """Record a declaration; in a task, the variable (made once)."""
        _varkeys._name_bytes(name)  # a name the layout can hold
        if name in self.declared and self.declared[name][0] != kind:
            raise InvalidArgumentError(
                f"{self._processor} declares state {name!r} as a {self.declared[name][0]} and "
                f"a {kind} state; each name has one kind"
            )
        self.declared[name] = (kind, key_schema, schema, ttl)
        if self._task is None:
            return None
        var = self._vars.get(name)
        if var is None:
            codec = self._codecs.get(name)
            if (codec is None or not codec.typed or codec.kind != kind
                    or name not in self._arrow):
                raise InvalidArgumentError(
                    f"{self._processor} declares {kind} state {name!r} in a task but did not "
                    "when the query started: init must declare the same variables every time"
                )
            ttl_s = _varkeys.ttl_seconds(ttl)
            if kind == "map":
                var = BatchMapState(self, name, codec, self._arrow[name],
                                    self._arrow_keys[name], ttl_s)
            else:
                cls = BatchListState if kind == "list" else BatchValueState
                var = cls(self, name, codec, self._arrow[name], ttl_s)
            self._vars[name] = var
        return var

    def getValueState(self, stateName: str, schema: Any = None,
                      ttlDurationMs: Any = None) -> BatchValueState | None:
        """Declare a value state variable with its schema (a ``StructType`` or DDL string;
        required: ``get`` returns Arrow columns of it). Returns the variable in a task (also
        reachable as ``state.value(stateName)`` in ``process``), ``None`` on the driver."""
        return self._declare("value", stateName, None, schema, ttlDurationMs)

    def getListState(self, stateName: str, schema: Any = None,
                     ttlDurationMs: Any = None) -> BatchListState | None:
        """Declare a list state variable with its element schema (required). Returns the
        variable in a task (also ``state.list(stateName)``), ``None`` on the driver."""
        return self._declare("list", stateName, None, schema, ttlDurationMs)

    def getMapState(self, stateName: str, userKeySchema: Any = None, valueSchema: Any = None,
                    ttlDurationMs: Any = None) -> BatchMapState | None:
        """Declare a map state variable with its user key and value schemas (both required).
        Returns the variable in a task (also ``state.map(stateName)``), ``None`` on the
        driver."""
        return self._declare("map", stateName, userKeySchema, valueSchema, ttlDurationMs)

    def deleteIfExists(self, stateName: str) -> None:
        """Not served by ``transform_batches`` (refused when the query is built): run the query
        once with ``transform_with_state`` to delete a variable."""
        raise InvalidArgumentError(
            f"{self._processor} calls handle.deleteIfExists({stateName!r}): transform_batches "
            "does not serve it; run the query once with transform_with_state to delete the "
            "variable"
        )

    def _bind(self, keys: BatchKeys) -> None:
        """Serve the batch's ``keys``: read every declared variable of every key ahead, value
        variables with one ``multi_get`` (held by key position, ``_values.py``), list and map
        variables with one ``multi_scan`` (timers are not read ahead: ``_timers.py``)."""
        from ...runtime._prefetch import BatchState

        self._keys = keys
        self._state = BatchState(self._task)
        self._values = HeldValues(self._task, keys)
        self._load(keys.prefixes)

    def _add_keys(self, encoded: Any, kgs: Any) -> None:
        """Serve the keys ``encoded`` (a ``_rowcodec.Rows`` of ``enc(key)``) of key groups
        ``kgs`` too (the keys whose timers fire), read ahead as :meth:`_bind` reads the
        batch's."""
        self._load(self._keys.add(encoded, kgs))

    def _load(self, prefixes: list[bytes]) -> None:
        """Read ahead the state of the keys with ``prefixes``: the keys not read yet."""
        if not prefixes:
            return
        values = [v._name for v in self._vars.values() if v.kind == "value"]
        entries = [v._name for v in self._vars.values() if v.kind != "value"]
        if values:
            self._values.load(values)
        if entries:
            self._state.load_ranges([p + n for p in prefixes for n in entries])

    def _wrote(self, name: str, put: bool) -> None:
        """A variable wrote (``put``: wrote a value, not only deleted)."""
        task = self._task
        task.changed = True
        if put and name in self._deleted:
            self._deleted.discard(name)
            task.meta_updates[META_DELETED_STATES] = json.dumps(sorted(self._deleted))
