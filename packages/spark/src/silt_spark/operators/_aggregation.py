"""Partial aggregates (count, sum, min, max, avg) as fixed-width state records, shared by
keyed aggregation (``aggregate``) and window aggregation (``window_aggregate``).

State record per key, fixed width so a whole batch decodes with one ``np.frombuffer``::

    value: format:u8 (=1)  rows:i64le  then per aggregated column: n:i64le sum min max
           (sum/min/max are i64le for integral columns, f64le for floating ones)

``n`` is the column's non-null count; sum/min/max are meaningless while ``n == 0``.

The aggregated columns and their order are the descriptor's ``state_columns``. A restart may
append columns (a new aggregate over a column not aggregated before): records written before
are shorter, and read as if the new columns had only seen nulls (``n == 0``), see
:func:`evolve_columns`. Removing a column or changing its type is refused when the query starts.

Here: the plan (:func:`plan`, on the driver), the partial aggregation before the shuffle
(:func:`partial_aggregate`), reading, combining and emitting records in the shard's task
(:func:`read_records`, :func:`combine`, :func:`output_arrays`), and the records' typed and JSON
forms for ``read_state`` (:func:`typed_columns`, :func:`running_parts`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not
from typing import TYPE_CHECKING, Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ..runtime import _keys
from ..runtime._arrowcompute import cast
from ..runtime._ndarrays import from_numpy, to_numpy
from ._groupby import group_by

if TYPE_CHECKING:
    from ..runtime._root import OperatorSpec

def _public(url: str) -> str:
    """``silt.tierkit.public_url(url)``, imported when a message needs it: the partial stage
    before the shuffle imports this module in every fresh worker, and never the tier kit."""
    from silt.tierkit import public_url

    return public_url(url)


AGG_TAG = _keys.AGG_TAG


STATE_FORMAT = 1


FUNCTIONS = ("count", "sum", "min", "max", "avg")


_EXPR = re.compile(r"^\s*(\w+)\s*\(\s*(.*?)\s*\)\s*$")


@dataclass(frozen=True)
class Agg:
    """One output column: ``func`` over ``column`` (``None``: count of rows)."""

    name: str
    func: str
    column: str | None


def parse_aggs(aggs: Sequence[str] | Mapping[str, str]) -> list[Agg]:
    """``["count", "sum(amount)"]`` or ``{"n": "count(*)", "total": "sum(amount)"}`` -> Aggs.

    Output names default to the expression, as Spark names them (``count`` for a row count).
    """
    items = list(aggs.items()) if isinstance(aggs, Mapping) else [(None, a) for a in aggs]
    if not items:
        raise InvalidArgumentError(
            "aggs must name at least one aggregate, e.g. ['count', 'sum(x)']")
    out = []
    for name, expr in items:
        if not isinstance(expr, str):
            raise InvalidTypeError(f"an aggregate is a str such as 'sum(amount)', got {expr!r}")
        text = expr.strip()
        if text.lower() == "count":
            func, column = "count", None
        else:
            m = _EXPR.match(text)
            if not m:
                raise InvalidArgumentError(
                    f"cannot parse aggregate {expr!r}: use e.g. 'sum(amount)'")
            func, column = m.group(1).lower(), m.group(2)
            if func == "mean":
                func = "avg"
            if func not in FUNCTIONS:
                raise InvalidArgumentError(
                    f"unsupported aggregate {func!r} in {expr!r}; use {FUNCTIONS}")
            if column in ("*", "1"):
                if func != "count":
                    raise InvalidArgumentError(f"{func}(*) is not an aggregate; use a column")
                column = None
            column = column.strip("`") if column else None
        if name is None:
            name = "count" if text.lower() in ("count", "count(*)", "count(1)") else text
        out.append(Agg(name, func, column))
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"aggregate output names must be unique, got {names}")
    return out


@dataclass(frozen=True)
class AggPlan:
    """Derived from the input schema on the driver; shipped to tasks (plain data)."""

    key_columns: tuple[str, ...]
    aggs: tuple[Agg, ...]
    value_columns: tuple[str, ...]
    floating: tuple[bool, ...]  # per value column: f64 state (else i64)
    partial_schema: Any  # pyarrow.Schema
    output_schema: Any  # pyarrow.Schema


def plan(
    df_schema: Any, key_columns: Sequence[str], aggs: list[Agg],
    previous: list[list[str]] | None = None, root: str = "",
) -> tuple[AggPlan, Any, Any]:
    """The plan plus the Spark schemas of the partial and the output DataFrames.

    ``previous``: the state columns the root's records hold (its descriptor's
    ``state_columns``), kept first and in their order (see :func:`evolve_columns`)."""
    import pyarrow as pa
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    fields = {f.name: f for f in df_schema.fields}
    for c in key_columns:
        if c not in fields:
            raise InvalidArgumentError(
                f"key column {c!r} is not in the DataFrame ({sorted(fields)})")
    value_columns: list[str] = []
    floating: list[bool] = []
    for a in aggs:
        if a.column is None or a.column in value_columns:
            continue
        if a.column not in fields:
            raise InvalidArgumentError(f"aggregated column {a.column!r} is not in the DataFrame")
        t = fields[a.column].dataType
        if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            floating.append(False)
        elif isinstance(t, (T.FloatType, T.DoubleType)):
            floating.append(True)
        else:
            raise InvalidTypeError(
                f"column {a.column!r} has type {t.simpleString()}; silt_spark aggregates "
                "integral and floating-point columns"
            )
        value_columns.append(a.column)
    if previous is not None:
        value_columns, floating = evolve_columns(previous, value_columns, floating, root)

    def num(j: int) -> T.DataType:
        return T.DoubleType() if floating[j] else T.LongType()

    partial = T.StructType([fields[c] for c in key_columns])
    partial.add("__rows", T.LongType(), False)
    for j in range(len(value_columns)):
        partial.add(f"__n{j}", T.LongType(), False)
        for part in ("s", "mn", "mx"):
            partial.add(f"__{part}{j}", num(j), True)
    output = T.StructType([fields[c] for c in key_columns])
    for a in aggs:
        if a.func == "count":
            output.add(a.name, T.LongType(), True)
        elif a.func == "avg":
            output.add(a.name, T.DoubleType(), True)
        elif a.func == "sum":
            output.add(a.name, num(value_columns.index(a.column)), True)
        else:
            output.add(a.name, fields[a.column].dataType, True)
    p = AggPlan(
        tuple(key_columns), tuple(aggs), tuple(value_columns), tuple(floating),
        to_arrow_schema(partial, timezone="UTC"), to_arrow_schema(output, timezone="UTC"),
    )
    assert isinstance(p.partial_schema, pa.Schema)
    return p, partial, output


def state_columns(p: AggPlan) -> list[list[str]]:
    """The descriptor's ``state_columns`` of ``p``: ``[column, "i64" | "f64"]`` pairs."""
    return [[c, "f64" if f else "i64"] for c, f in zip(p.value_columns, p.floating)]


def evolve_columns(
    previous: list[list[str]], wanted: list[str], floating: list[bool], root: str
) -> tuple[list[str], list[bool]]:
    """The state columns of a restart: the ``previous`` ones in their order, then the newly
    aggregated ones of ``wanted`` (with their ``floating`` flags) appended.

    Appending is the one change old records survive: a record written before has fewer
    columns, and reads as if the new ones had seen only nulls (count 0, sum/min/max/avg
    null until the key's first value after the restart; Spark's result for a group whose
    values were all null). Output columns may be added, dropped or reordered freely as long
    as every previous column stays aggregated with its type. Raises
    :class:`~silt_spark.errors.LayoutMismatchError` naming the change otherwise."""
    from ..errors import LayoutMismatchError

    kinds = dict(zip(wanted, floating))
    names = {False: "integral (i64)", True: "floating-point (f64)"}
    removed = [c for c, _ in previous if c not in kinds]
    if removed:
        raise LayoutMismatchError(
            f"the state root {_public(root)!r} keeps aggregates of column(s) "
            f"{', '.join(map(repr, removed))}, which the aggregates no longer use: a running "
            "query's aggregated columns can only be added to (old state needs them). Keep an "
            "aggregate over each of them, or use another state_url"
        )
    for c, t in previous:
        if kinds[c] != (t == "f64"):
            raise LayoutMismatchError(
                f"column {c!r} changed type in the state root {_public(root)!r}: its state "
                f"is {names[t == 'f64']}, the column is now {names[kinds[c]]}; cast it back "
                "(e.g. .withColumn(...).cast(...)) or use another state_url"
            )
    known = [c for c, _ in previous]
    added = [c for c in wanted if c not in known]
    return known + added, [t == "f64" for _, t in previous] + [kinds[c] for c in added]


def previous_columns(spec: OperatorSpec, kind: str) -> list[list[str]] | None:
    """The ``state_columns`` of the root's descriptor when it holds a ``kind`` operator (what
    :func:`plan` evolves from), else ``None`` (a new root, or one
    :func:`~silt_spark.runtime._shard.ensure_descriptor` refuses)."""
    from ..runtime import _root

    have = _root.read_descriptor(spec.root, spec.storage_options)
    return have.get("state_columns") if have and have.get("operator") == kind else None


def record_columns(spec: OperatorSpec, previous: list[list[str]] | None,
                   p: AggPlan) -> None:
    """Record appended state columns in the root's descriptor (driver side, at start)."""
    from ..runtime import _root

    if previous is not None and previous != state_columns(p):
        _root.update_descriptor(spec.root, {"state_columns": state_columns(p)},
                                 spec.storage_options)


def partial_aggregate(batches: Iterator[Any], p: AggPlan) -> Iterator[Any]:
    """Before the shuffle: one row per distinct key of this input partition."""
    import pyarrow as pa

    batches = list(batches)
    if not any(b.num_rows for b in batches):
        return
    t = pa.Table.from_batches(batches)
    cols = {c: t[c] for c in p.key_columns}
    specs: list[tuple[Any, str]] = [([], "count_all")]
    for j, c in enumerate(p.value_columns):
        cols[f"__v{j}"] = cast(t[c], pa.float64() if p.floating[j] else pa.int64())
        specs += [(f"__v{j}", "count"), (f"__v{j}", "sum"), (f"__v{j}", "min"),
                  (f"__v{j}", "max")]
    g = group_by(pa.table(cols), p.key_columns, specs)
    out = [g[c] for c in p.key_columns] + [g["count_all"]]
    for j in range(len(p.value_columns)):
        out += [g[f"__v{j}_count"], g[f"__v{j}_sum"], g[f"__v{j}_min"], g[f"__v{j}_max"]]
    yield from pa.Table.from_arrays(out, schema=p.partial_schema).to_batches()


def state_dtype(p: AggPlan, columns: int | None = None) -> Any:
    """The record of ``p`` (of its first ``columns`` value columns: a record written before
    columns were appended)."""
    import numpy as np

    fields: list[tuple[str, str]] = [("fmt", "u1"), ("rows", "<i8")]
    for j, fl in enumerate(p.floating[:columns]):
        t = "<f8" if fl else "<i8"
        fields += [(f"n{j}", "<i8"), (f"s{j}", t), (f"mn{j}", t), (f"mx{j}", t)]
    return np.dtype(fields)


# -- the arithmetic, shared with window aggregation (window.py) ----------------------------------
def merge_specs(p: AggPlan) -> list[tuple[str, str]]:
    """``group_by(...).aggregate(...)`` specs that merge partial rows (see :func:`combine`)."""
    specs: list[tuple[str, str]] = [("__rows", "sum")]
    for j in range(len(p.value_columns)):
        specs += [(f"__n{j}", "sum"), (f"__s{j}", "sum"), (f"__mn{j}", "min"),
                  (f"__mx{j}", "max")]
    return specs


def read_records(values: list[bytes | None], p: AggPlan, url: str) -> Any:
    """State records for ``multi_get`` results, zeros where a key has no state yet.

    Without a Python step per value: the present values are joined into one buffer (C loops:
    ``compress``, ``map(len)``, ``bytearray.join``) and read with ``np.frombuffer``, records of each
    width (a record written before columns were appended is shorter) gathered by offset."""
    import numpy as np

    dt = state_dtype(p)
    values = values if isinstance(values, list) else list(values)
    n = len(values)
    old = np.zeros(n, dt)
    absent = values.count(None)
    if absent == n:
        return old
    if absent:
        mask = list(map(is_not, values, repeat(None)))
        present = list(compress(values, mask))
        rows = np.flatnonzero(np.fromiter(mask, bool, n))
    else:
        present, rows = values, None
    lengths = np.fromiter(map(len, present), np.int64, len(present))
    data = np.frombuffer(bytearray().join(present), np.uint8)  # writable: no copy
    # (np.unique would import numpy.ma in a fresh worker: 10-20 ms)
    widths = np.flatnonzero(np.bincount(lengths)).tolist()
    columns = {w: _columns_of(w, len(p.value_columns), url) for w in widths}
    if widths == [dt.itemsize]:  # every record of the latest layout: one buffer, one view
        raw = data.view(dt)
        if (raw["fmt"] != STATE_FORMAT).any():
            raise ValueError(f"unknown aggregation state format in {_public(url)!r}")
        if rows is None:
            return raw
        whole = np.dtype((np.void, dt.itemsize))  # each record copied as one opaque field
        old.view(whole)[rows] = raw.view(whole)
        return old
    offsets = np.zeros(len(present), np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    everywhere = np.arange(n) if rows is None else rows
    for width in widths:
        part = state_dtype(p, columns[width])
        sel = np.flatnonzero(lengths == width)
        raw = data[offsets[sel][:, None] + np.arange(width)].reshape(-1).view(part)
        if (raw["fmt"] != STATE_FORMAT).any():
            raise ValueError(f"unknown aggregation state format in {_public(url)!r}")
        idx = everywhere[sel]
        if columns[width] == len(p.value_columns):
            old[idx] = raw
        else:  # written before columns were appended: those start empty (n == 0)
            for name in part.names:
                old[name][idx] = raw[name]
    return old


#: Bytes of a record's head (format, rows) and of each value column (n, sum, min, max).
_HEAD_BYTES, _COLUMN_BYTES = 9, 32


def _columns_of(width: int, most: int, url: str) -> int:
    """How many value columns a record of ``width`` bytes holds (at most ``most``)."""
    columns, rest = divmod(width - _HEAD_BYTES, _COLUMN_BYTES)
    if rest or not 0 <= columns <= most:
        raise ValueError(
            f"an aggregation state record of {width} bytes in {_public(url)!r} does not "
            f"match the root's {most} aggregated column(s)"
        )
    return columns


def combine(old: Any, g: Any, p: AggPlan) -> Any:
    """``old`` state records merged with ``g``, a table of partials grouped with
    :func:`merge_specs` (one row per record, same order)."""
    import numpy as np

    dt = old.dtype
    new = np.empty(len(old), dt)
    new["fmt"] = STATE_FORMAT
    new["rows"] = old["rows"] + to_numpy(g["__rows_sum"])

    def col(name: str, fill: Any) -> Any:
        return to_numpy(g[name], fill)

    for j, fl in enumerate(p.floating):
        zero = 0.0 if fl else 0
        bn = col(f"__n{j}_sum", 0)
        on = old[f"n{j}"]
        new[f"n{j}"] = on + bn
        new[f"s{j}"] = old[f"s{j}"] + col(f"__s{j}_sum", zero)
        for part, fn in (("mn", np.minimum), ("mx", np.maximum)):
            b = col(f"__{part}{j}_{'min' if part == 'mn' else 'max'}", zero)
            o = old[f"{part}{j}"]
            new[f"{part}{j}"] = np.where(on == 0, b, np.where(bn == 0, o, fn(o, b)))
    return new


def output_arrays(new: Any, p: AggPlan) -> list[Any]:
    """One Arrow array per aggregate of ``p`` from state records ``new``."""
    import numpy as np
    import pyarrow as pa

    arrays = []
    for a in p.aggs:
        if a.column is None:
            arrays.append(from_numpy(new["rows"], pa.int64()))
            continue
        j = p.value_columns.index(a.column)
        cnt = np.ascontiguousarray(new[f"n{j}"])
        empty = cnt == 0
        if a.func == "count":
            arr = from_numpy(cnt, pa.int64())
        elif a.func == "avg":
            with np.errstate(divide="ignore", invalid="ignore"):
                arr = from_numpy(new[f"s{j}"] / np.where(empty, 1, cnt), pa.float64(), mask=empty)
        else:
            field = {"sum": "s", "min": "mn", "max": "mx"}[a.func]
            arr = from_numpy(new[f"{field}{j}"], mask=empty)
        arrays.append(cast(arr, p.output_schema.field(a.name).type))
    return arrays


def running_parts(state_columns: list[list[str]] | None) -> Callable[[bytes], dict[str, Any]]:
    """A function from a state record (``state_dtype``) to its running parts as ``read_state``
    shows them: ``{"rows": n, column: {"n", "sum", "min", "max"}}`` (``state_columns``: the
    descriptor's ``[name, "i64" | "f64"]`` pairs). Shared with ``_window``."""
    import numpy as np

    cols = [c for c, _ in state_columns or []]
    p = AggPlan((), (), tuple(cols), tuple(t == "f64" for _, t in state_columns or []), None,
                None)
    def parts(value: bytes) -> dict[str, Any]:
        held = _columns_of(len(value), len(cols), "")
        rec = np.frombuffer(value, state_dtype(p, held))[0]
        out: dict[str, Any] = {"rows": int(rec["rows"])}
        for j, c in enumerate(cols):
            n = int(rec[f"n{j}"]) if j < held else 0  # appended after this record: empty
            out[c] = {"n": n, **({
                "sum": rec[f"s{j}"].item(), "min": rec[f"mn{j}"].item(),
                "max": rec[f"mx{j}"].item(),
            } if n else {})}
        return out

    return parts


#: The descriptor's field naming the aggregates the query emits (set at every start, for the
#: typed ``read_state``): ``[[output name, function, column or null, Spark type], ...]``.
OUTPUTS = "outputs"


def outputs(p: AggPlan, output_struct: Any) -> list[list[Any]]:
    """The descriptor's :data:`OUTPUTS` of plan ``p`` (``output_struct``: its Spark schema)."""
    types = {f.name: f.dataType.simpleString() for f in output_struct.fields}
    return [[a.name, a.func, a.column, types[a.name]] for a in p.aggs]


def _recorded(desc: dict[str, Any]) -> list[list[Any]]:
    """The root's :data:`OUTPUTS`; for a root written before they were recorded, ``count``
    plus ``count``, ``sum``, ``min``, ``max`` and ``avg`` of each aggregated column."""
    recorded = desc.get(OUTPUTS)
    if recorded is not None:
        return recorded
    out: list[list[Any]] = [["count", "count", None, "bigint"]]
    for c, t in desc.get("state_columns") or []:
        num = "double" if t == "f64" else "bigint"
        out += [[f"{f}({c})", f, c, {"count": "bigint", "avg": "double"}.get(f, num)]
                for f in ("count", "sum", "min", "max", "avg")]
    return out


def typed_columns(desc: dict[str, Any]) -> list[tuple[str, str]]:
    """``read_state``'s typed columns for this operator's state, after the key columns and
    before ``shard_version``: the aggregates, named and typed as the operator emits them."""
    return [(str(o[0]), str(o[3])) for o in _recorded(desc)]


def stored_plan(desc: dict[str, Any], output_schema: Any) -> AggPlan:
    """The plan the root's descriptor records, emitting ``output_schema`` (a pyarrow schema
    made on the driver from :func:`typed_columns`): what reads the state back typed."""
    cols = desc.get("state_columns") or []
    keys = desc.get("key_columns") or [["key", "string"]]
    return AggPlan(
        tuple(n for n, _ in keys), tuple(Agg(o[0], o[1], o[2]) for o in _recorded(desc)),
        tuple(c for c, _ in cols), tuple(t == "f64" for _, t in cols), None, output_schema,
    )
