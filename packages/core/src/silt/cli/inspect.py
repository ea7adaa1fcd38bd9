"""``silt inspect``: one version's manifest, or one line per DB of a root of DBs.

For a root that an installed plugin describes (a silt_spark operator root), what the plugin's
root inspector says (:func:`silt.plugins.describe_root`) is printed first.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .. import paths
from ..compaction.record import read_records
from ..cost import Prices, recorded_requests, summary, user_meta
from ..errors import InvalidArgumentError, VersionNotFoundError
from ..gc import horizon, read_checkpoints
from ..plugins import describe_root
from ..roots import child_dbs, compaction_state, inspect_root
from ..siblings import SiblingStores
from ..sst.builder import SstInfo
from ..tierkit import public_url
from .opening import manifest_of, open_root, resolve_version
from .show import (
    classes,
    cost_line,
    meta_text,
    print_json,
    record_json,
    show_key,
    table,
    time_text,
)
from .status import EXIT_OK


def sst_json(info: SstInfo, props: dict[str, Any] | None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": info.id,
        "object": paths.sst_key(info.id),
        "size": info.size,
        "entries": info.entries,
        "tombstones": info.tombstones,
        "expiring": info.expiring,
        "smallest": info.smallest.hex(),
        "largest": info.largest.hex(),
        "smallest_text": show_key(info.smallest),
        "largest_text": show_key(info.largest),
    }
    if info.seq:
        d["seq"] = info.seq
    if info.inline:
        d["object"] = None  # carried by the manifest (silt.inline)
        d["inline"] = True
    if info.db:
        d["object"] = f"../{info.db}/{d['object']}"
        d["db"] = info.db
    if info.clipped:
        d["clip"] = [None if b is None else b.hex() for b in (info.clip_start, info.clip_end)]
    if props is not None:
        d["properties"] = props
    return d



def _print_described(described: dict[str, Any]) -> None:
    """What a plugin's root inspector said (:func:`silt.plugins.describe_root`)."""
    print(f"{described.get('kind', 'application state')} "
          f"(described by plugin {described.get('inspector')!r})")
    fields = described.get("fields") or {}
    width = max((len(str(k)) for k in fields), default=0)
    for label, value in fields.items():
        print(f"  {str(label).ljust(width)}  {'-' if value is None else value}")
    for part in described.get("tables") or []:
        print(f"{part.get('title', '')}:")
        rows = [["-" if cell is None else cell for cell in row] for row in part.get("rows") or []]
        if rows:
            print(table(part.get("columns") or [], rows, indent="  "))
        else:
            print("  (none)")


def _print_root(url: str, rows: list[dict[str, Any]], as_json: bool, prices: Prices,
                described: dict[str, Any] | None = None) -> int:
    """``silt inspect`` of a root that holds DBs (e.g. a Spark operator's shards), with what
    an installed plugin says of it (``described``)."""
    for r in rows:
        r["cost"] = summary(r["requests"], prices)
    total = summary({k: sum(r["requests"].get(k, 0) for r in rows)
                     for k in {k for r in rows for k in r["requests"]}}, prices)
    if as_json:
        print_json({"root": url, "dbs": rows, "cost": total,
                     **({"application": described} if described is not None else {})})
        return EXIT_OK
    if described is not None:
        _print_described(described)
    print(f"root {public_url(url)}: {len(rows)} DBs")
    print(table(
        ["DB", "VERSION", "VERSIONS", "L0", "READ_AMP", "BYTES", "REQUESTS", "PENDING",
         "HORIZON", "CHECKPOINTS"],
        [[r["db"], r["version"], r["versions"], r["l0_ssts"], r["read_amplification"],
          r["bytes"], classes(r["requests"]), r["pending_compactions"], r["gc_horizon"] or "-",
          " ".join(f"{k}={v}" for k, v in sorted(r["checkpoints"].items())) or "-"]
         for r in rows],
    ))
    print(f"requests of these versions: class A {total['class_a']}, class B {total['class_b']}, "
          f"est. ${total['usd']:.6f} at {prices.name} prices")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    """``silt inspect``: a version's levels, SSTs, range deletes, compaction state, pending
    records, checkpoints, GC horizon and request costs (``--json`` for all of it)."""
    store = open_root(args.url)
    try:
        dbs = child_dbs(store)
        if dbs:
            rows = inspect_root(store, dbs, args.version)
            if not rows and args.version is not None:
                raise VersionNotFoundError(
                    f"no DB under {public_url(args.url)!r} has version {args.version}; "
                    "run `silt ls` to list the committed versions")
            described = describe_root(store, args.url, args.version, args.values)
            if args.values and described is None:
                raise InvalidArgumentError(
                    f"--values decodes an application's state, and no installed plugin "
                    f"describes {public_url(args.url)!r}; `silt scan` shows raw values")
            return _print_root(args.url, rows, args.json, args.prices, described)
        if args.values:
            raise InvalidArgumentError(
                "--values decodes an application's state under a root of DBs (such as a "
                "silt_spark operator root); for one DB, `silt scan` shows its values")
        version = resolve_version(store, args.url, args.version)
        m = manifest_of(store, args.url, version)
        props: dict[str, dict[str, Any]] = {}
        siblings = SiblingStores(args.url, store)
        siblings.add_inline(m.inline, paths.manifest_key(m.version))
        if args.tails:
            for info in m.all_ssts():
                props[info.id] = dict(siblings.reader(info).properties)
        records = [record_json(name, rec) for name, rec in read_records(store)]
        checkpoints = read_checkpoints(store)
        gc_horizon = horizon(store)
        store_stats = store.stats()
        siblings.close()
    finally:
        store.close()
    compaction = {**compaction_state(m), "pending_records": records}

    levels = [("L0", m.l0)] + [(f"L{i}", lv) for i, lv in enumerate(m.levels, start=1)]

    def totals(ssts: Sequence[SstInfo]) -> dict[str, int]:
        return {
            "ssts": len(ssts),
            "bytes": sum(s.size for s in ssts),
            "entries": sum(s.entries for s in ssts),
            "tombstones": sum(s.tombstones for s in ssts),
        }

    everything = list(m.all_ssts())
    if args.json:
        print_json({
            "version": m.version,
            "parent": m.parent,
            "writer_id": m.writer_id,
            "created_ms": m.created_ms,
            "created": time_text(m.created_ms),
            "meta": user_meta(m.meta),
            "requests": recorded_requests(m.meta),
            "cost": summary(recorded_requests(m.meta), args.prices),
            "levels": [
                {"level": name, **totals(ssts),
                 "sst_list": [sst_json(s, props.get(s.id) if args.tails else None)
                              for s in ssts]}
                for name, ssts in levels
            ],
            "totals": totals(everything),
            "range_deletes": {
                "seq": m.seq,
                "tombstones": [{"start": lo.hex(), "end": hi.hex(), "seq": seq,
                                "start_text": show_key(lo), "end_text": show_key(hi)}
                               for lo, hi, seq in m.range_tombstones.fragments],
            },
            "store": store_stats,
            "compaction": compaction,
            "checkpoints": checkpoints,
            "gc_horizon": gc_horizon,
        })
        return EXIT_OK

    print(f"version   {m.version}")
    print(f"parent    {'-' if m.parent is None else m.parent}")
    print(f"writer    {m.writer_id}")
    print(f"created   {time_text(m.created_ms)}")
    print(f"meta      {meta_text(user_meta(m.meta)) or '-'}")
    print(f"requests  {cost_line(recorded_requests(m.meta), args.prices)}")
    header = ["ID", "SIZE", "ENTRIES", "TOMBSTONES"]
    if args.tails:
        header += ["BLOCKS", "COMPRESSION", "BLOOM"]
    header.append("KEYS")
    for name, ssts in levels:
        t = totals(ssts)
        print(f"{name}: {t['ssts']} SSTs, {t['bytes']} bytes, {t['entries']} entries, "
              f"{t['tombstones']} tombstones")
        if not ssts:
            continue
        rows = []
        for s in ssts:
            row: list[object] = [s.id + (" (inline)" if s.inline else ""), s.size, s.entries,
                                 s.tombstones]
            if args.tails:
                p = props[s.id]
                row += [p.get("blocks", "?"), p.get("compression", "?"),
                        p.get("bloom_bits_per_key", "?")]
            row.append(f"{show_key(s.smallest)} .. {show_key(s.largest)}")
            rows.append(row)
        print(table(header, rows, indent="  "))
    t = totals(everything)
    print(f"total: {t['ssts']} SSTs, {t['bytes']} bytes, {t['entries']} entries, "
          f"{t['tombstones']} tombstones")
    if m.seq:
        print(f"range deletes: {len(m.range_tombstones)} range tombstones, counter {m.seq}")
        for lo, hi, seq in m.range_tombstones.fragments[:20]:
            print(f"  [{show_key(lo)} .. {show_key(hi)})  seq {seq}")
        if len(m.range_tombstones) > 20:
            print(f"  ... {len(m.range_tombstones) - 20} more (--json lists all)")
    levels_text = " ".join(f"L{i}={b}" for i, b in enumerate(compaction["level_bytes"], 1))
    print(f"compaction: L0 {compaction['l0_ssts']} SSTs, read amplification "
          f"{compaction['read_amplification']}, level bytes {levels_text or '-'}")
    if compaction["inline_ssts"]:
        print(f"inline deltas: {compaction['inline_ssts']} SSTs, {compaction['inline_bytes']} "
              "bytes carried by the manifest")
    print(f"pending compaction records: {len(records)}")
    if records:
        print(table(
            ["ID", "BASE", "MODE", "INPUTS", "OUTPUTS", "IN_BYTES", "OUT_BYTES", "REASON"],
            [[r["object"], "-", "CORRUPT", "-", "-", "-", "-", r["error"]] if "error" in r
             else [r["id"], r["base_version"], r["mode"], r["inputs"], r["outputs"],
                   r["input_bytes"], r["output_bytes"], r["reason"]] for r in records],
            indent="  ",
        ))
    print("checkpoints: " + (" ".join(f"{k}={v}" for k, v in sorted(checkpoints.items()))
                             or "-"))
    print(f"gc horizon: {gc_horizon or '-'}")
    if store_stats:
        print("store: " + " ".join(f"{k}={v}" for k, v in sorted(store_stats.items())))
    return EXIT_OK



__all__ = ["cmd_inspect", "sst_json"]
