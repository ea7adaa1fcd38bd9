"""The ``silt`` command line: look at, read, check and maintain a silt root.

Commands (``silt COMMAND --help`` for each one's options)::

    silt ls URL                     committed versions: created, SSTs, bytes, requests paid
                                    (class A/B), meta (for a root of DBs: each DB's versions)
    silt inspect URL                one version's manifest: levels, SSTs, sizes, key ranges, plus
                                    compaction state, pending compaction records, checkpoints,
                                    the GC horizon and the requests its writer paid with their
                                    estimated cost (for a root of DBs: one line per DB)
    silt get URL KEY                one value (raw bytes on stdout)
    silt scan URL                   key<TAB>value lines in key order
    silt verify URL                 read every manifest and block in scope, every checkpoint and
                                    compaction record (with its outputs), check checksums and
                                    that what they name exists, and that every version number
                                    names one state (no fork, rollback or lost pinned version);
                                    each DB of a root of several DBs. The check is
                                    :func:`silt.verify`; this prints its report
    silt plugins                    installed plugins and first-party ones not installed
    silt compact URL [--loop]       external compactor: run the policy's next task, write its
                                    record under compaction/ (never a manifest)
    silt gc URL                     delete old versions and unreferenced objects (all DBs under URL)
    silt checkpoint URL NAME        pin a version under NAME so GC keeps it

``ls``, ``inspect``, ``get``, ``scan``, ``verify`` and ``plugins`` only read. ``compact`` writes
new SSTs and a compaction record, ``gc`` deletes (nothing with ``--dry-run``), ``checkpoint``
creates one small object; none of them ever changes an existing object.

Exit status: 0 success; 1 an error (bad URL, no such version, no tier for the scheme) or, for
``get``, an absent key; 2 damaged data (``verify`` found corruption or a missing SST, or any
command met a checksum failure) or a command-line usage error (argparse's convention).

Expected errors print ``silt: error: <message>`` on stderr, never a traceback. Numeric options
are checked before anything is read: an integer, a finite number of seconds (``inf``, ``nan``
and negatives are usage errors, status 2). An unexpected failure (a bug in silt or in a plugin)
prints one ``silt: error: unexpected <type>: <first line>`` line with what to do, status 1.

A ``file://`` root that does not exist is an error here (a mistyped path would otherwise look
like an empty root).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from itertools import islice
from typing import Any
from urllib.parse import unquote

from . import open as open_db
from . import paths
from .clock import Clock
from .compaction.external import compact_once
from .compaction.record import CompactionRecord, read_records
from .cost import S3_STANDARD, Prices, recorded_requests, request_classes, summary, user_meta
from .db import DB
from .errors import (
    CorruptionError,
    InvalidArgumentError,
    SiltError,
    VersionNotFoundError,
)
from .manifest import Manifest
from .plugins import KNOWN_CACHES, KNOWN_TIERS, describe_root, get_registry, open_store
from .roots import child_dbs, compaction_state, inspect_root, version_rows
from .settings import MAX_INT, MAX_SECONDS, Settings
from .siblings import SiblingStores
from .sst.builder import SstInfo
from .store import ObjectStore, split_url
from .tierkit import public_url
from .verify import Problem, VerifyReport, verify
from .versions import read_manifest
from .versions import versions as committed_versions

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CORRUPT = 2

# --- formatting ----------------------------------------------------------------------------------


def escape(data: bytes) -> str:
    """``data`` as one line of text: UTF-8 where printable, escapes for everything else.

    Backslash becomes ``\\\\``; bytes that are not valid UTF-8 become ``\\xNN``; non-printable
    characters (tab, newline, controls) become ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``, so the
    result never contains a tab or newline and can be decoded back without ambiguity.
    """
    out = []
    for ch in data.decode("utf-8", "surrogateescape"):
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        elif o < 0x80:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return "".join(out)


def show_key(key: bytes) -> str:
    """A key for people: the text itself when it is printable UTF-8, else ``0x`` and hex."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text and text.isprintable():
        return text
    return "0x" + key.hex()


def _time(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _meta(meta: dict[str, str]) -> str:
    return " ".join(f"{escape(k.encode())}={escape(v.encode())}" for k, v in sorted(meta.items()))


#: ``silt ls`` cuts its META column here (``--wide`` shows it whole).
META_WIDTH = 60


def _short(text: str, wide: bool) -> str:
    """``text`` cut to :data:`META_WIDTH` characters with ``...`` unless ``wide``."""
    return text if wide or len(text) <= META_WIDTH else text[:META_WIDTH - 3] + "..."


def _classes(requests: dict[str, int]) -> str:
    """``A5/B3``: a version's recorded requests by class (``-`` when none were recorded)."""
    if not requests:
        return "-"
    c = request_classes(requests)
    return f"A{c['class_a']}/B{c['class_b']}"


def _cost_line(requests: dict[str, int], prices: Prices) -> str:
    if not requests:
        return "- (not recorded by this version's writer)"
    c = summary(requests, prices)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(requests.items()))
    return (f"{kinds} since the writer's previous commit: class A {c['class_a']}, class B "
            f"{c['class_b']}, est. ${c['usd']:.6f} at {prices.name} prices")


def _table(header: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "") -> str:
    """Columns padded to their widest cell; numbers right-aligned, the last column left ragged."""
    cells = [list(header), *([str(c) for c in row] for row in rows)]
    numeric = [all(str(r[i]).isdigit() for r in cells[1:]) for i in range(len(header))]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = []
        for i, cell in enumerate(r):
            if i == len(r) - 1 and not numeric[i]:
                parts.append(cell)
            else:
                parts.append(cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i]))
        lines.append(indent + "  ".join(parts).rstrip())
    return "\n".join(lines)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


# --- opening -------------------------------------------------------------------------------------


def _check_file_root(url: str) -> None:
    """Refuse a ``file://`` root that does not exist (opening it would create it)."""
    scheme, location, _options = split_url(url)
    if scheme != "file":
        return
    if location.lower().startswith("localhost/"):
        location = location[len("localhost"):]
    if not location.startswith("/"):
        return  # not an absolute path: the file tier explains what is wrong
    path = unquote(location)
    if not os.path.isdir(path):
        raise InvalidArgumentError(
            f"{public_url(url)!r} does not exist: there is no directory {path!r}; check the path "
            "(silt's commands only read and never create a root)"
        )


def _check_memory_root(url: str, store: ObjectStore | None = None) -> None:
    """Refuse a ``memory://`` root that holds nothing in this process: such roots live only in
    the process that wrote them, so ``silt`` run as its own command can never see one (it
    would report an empty root and succeed, hiding the mistake)."""
    if split_url(url)[0] != "memory":
        return
    probe = store if store is not None else open_store(url)
    try:
        empty = next(iter(probe.list("")), None) is None
    finally:
        if store is None:
            probe.close()
    if empty:
        raise InvalidArgumentError(
            f"{public_url(url)!r} holds nothing in this process: a memory:// root lives only "
            "in the process that wrote it, and the silt command runs in its own; give a "
            "file:// or object-store root"
        )


def _open_store(url: str) -> ObjectStore:
    _check_file_root(url)
    store = open_store(url)
    try:
        _check_memory_root(url, store)
    except BaseException:
        store.close()
        raise
    return store


def _open_db(url: str, version: int | None) -> tuple[ObjectStore, DB]:
    store = _open_store(url)
    try:
        db = open_db(url, version=version, store=store)
    except BaseException:
        store.close()
        raise
    if db.version is None:
        db.close()
        try:
            dbs = child_dbs(store)
        finally:
            store.close()
        if dbs:
            base, _, query = url.partition("?")
            example = public_url(f"{base.rstrip('/')}/{dbs[0].rstrip('/')}"
                                 + (f"?{query}" if query else ""))
            raise InvalidArgumentError(
                f"{public_url(url)!r} is a root of {len(dbs)} DBs (such as a silt_spark "
                f"operator's shards: {_name_list(dbs)}), not one DB; get and scan read one DB: "
                f"give its URL, e.g. {example!r} (silt ls lists them all)")
        raise VersionNotFoundError(f"{public_url(url)!r} has no committed versions")
    return store, db


def _name_list(names: list[str]) -> str:
    """``a, b, c`` (at most three names, then how many more)."""
    shown = ", ".join(n.rstrip("/") for n in names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} more"


def _resolve_version(store: ObjectStore, url: str, version: int | None) -> int:
    if version is not None:
        return version
    found = committed_versions(store)
    if not found:
        raise VersionNotFoundError(f"{public_url(url)!r} has no committed versions")
    return found[-1]


def _read_manifest(store: ObjectStore, url: str, version: int) -> Manifest:
    try:
        return read_manifest(store, version)
    except VersionNotFoundError:
        raise VersionNotFoundError(
            f"version {version} of {public_url(url)!r} does not exist; "
            f"'silt ls {public_url(url)}' lists the versions"
        ) from None


def _key_arg(text: str | None, is_hex: bool, what: str) -> bytes | None:
    if text is None:
        return None
    if not is_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return bytes.fromhex(text.removeprefix("0x"))
    except ValueError:
        raise InvalidArgumentError(f"{what} {text!r} is not hex (given --key-hex)") from None


# --- commands ------------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    store = _open_store(args.url)
    try:
        rows = version_rows(store)
        dbs = child_dbs(store) if not rows else []
        for db in dbs:  # a root of DBs: each DB's versions
            rows += version_rows(store, db)
    finally:
        store.close()
    status = EXIT_OK
    for r in rows:
        if "error" in r:  # reported, and the listing goes on
            status = EXIT_CORRUPT
            print(f"silt: error: {r['error']}", file=sys.stderr)
    if args.json:
        _print_json([r if "error" in r else {**r, "created": _time(r["created_ms"])}
                     for r in rows])
    elif rows:
        header = ["VERSION", "CREATED", "SSTS", "BYTES", "REQUESTS", "META"]
        print(_table(
            ["DB", *header] if dbs else header,
            [
                ([r["db"]] if dbs else [])
                + ([r["version"], "CORRUPT", "-", "-", "-", r["object"]] if "error" in r
                   else [r["version"], _time(r["created_ms"]), r["ssts"], r["bytes"],
                         _classes(r["requests"]), _short(_meta(r["meta"]), args.wide)])
                for r in rows
            ],
        ))
    else:
        print(f"silt: {public_url(args.url)} has no committed versions", file=sys.stderr)
    return status


def _sst_json(info: SstInfo, props: dict[str, Any] | None) -> dict[str, Any]:
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


def _record_json(name: str, rec: CompactionRecord | CorruptionError) -> dict[str, Any]:
    if isinstance(rec, CorruptionError):
        return {"object": name, "error": str(rec)}
    return {
        "object": name, "id": rec.id, "base_version": rec.base_version,
        "created_ms": rec.created_ms, "created": _time(rec.created_ms), "mode": rec.task.mode,
        "target_level": rec.task.target_level, "drop_tombstones": rec.task.drop_tombstones,
        "inputs": len(rec.task.inputs), "outputs": len(rec.outputs),
        "input_bytes": rec.input_bytes, "output_bytes": sum(o.size for o in rec.outputs),
        "reason": rec.task.reason,
    }


def _print_described(described: dict[str, Any]) -> None:
    """What a plugin's root inspector said (:func:`silt.plugins.describe_root`)."""
    print(f"{described.get('kind', 'application state')} "
          f"(described by plugin {described.get('inspector')!r})")
    fields = described.get("fields") or {}
    width = max((len(str(k)) for k in fields), default=0)
    for label, value in fields.items():
        print(f"  {str(label).ljust(width)}  {'-' if value is None else value}")
    for table in described.get("tables") or []:
        print(f"{table.get('title', '')}:")
        rows = [["-" if cell is None else cell for cell in row] for row in table.get("rows") or []]
        if rows:
            print(_table(table.get("columns") or [], rows, indent="  "))
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
        _print_json({"root": url, "dbs": rows, "cost": total,
                     **({"application": described} if described is not None else {})})
        return EXIT_OK
    if described is not None:
        _print_described(described)
    print(f"root {public_url(url)}: {len(rows)} DBs")
    print(_table(
        ["DB", "VERSION", "VERSIONS", "L0", "READ_AMP", "BYTES", "REQUESTS", "PENDING",
         "HORIZON", "CHECKPOINTS"],
        [[r["db"], r["version"], r["versions"], r["l0_ssts"], r["read_amplification"],
          r["bytes"], _classes(r["requests"]), r["pending_compactions"], r["gc_horizon"] or "-",
          " ".join(f"{k}={v}" for k, v in sorted(r["checkpoints"].items())) or "-"]
         for r in rows],
    ))
    print(f"requests of these versions: class A {total['class_a']}, class B {total['class_b']}, "
          f"est. ${total['usd']:.6f} at {prices.name} prices")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from .gc import horizon, read_checkpoints

    store = _open_store(args.url)
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
        version = _resolve_version(store, args.url, args.version)
        m = _read_manifest(store, args.url, version)
        props: dict[str, dict[str, Any]] = {}
        siblings = SiblingStores(args.url, store)
        siblings.add_inline(m.inline, paths.manifest_key(m.version))
        if args.tails:
            for info in m.all_ssts():
                props[info.id] = dict(siblings.reader(info).properties)
        records = [_record_json(name, rec) for name, rec in read_records(store)]
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
        _print_json({
            "version": m.version,
            "parent": m.parent,
            "writer_id": m.writer_id,
            "created_ms": m.created_ms,
            "created": _time(m.created_ms),
            "meta": user_meta(m.meta),
            "requests": recorded_requests(m.meta),
            "cost": summary(recorded_requests(m.meta), args.prices),
            "levels": [
                {"level": name, **totals(ssts),
                 "sst_list": [_sst_json(s, props.get(s.id) if args.tails else None)
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
    print(f"created   {_time(m.created_ms)}")
    print(f"meta      {_meta(user_meta(m.meta)) or '-'}")
    print(f"requests  {_cost_line(recorded_requests(m.meta), args.prices)}")
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
        print(_table(header, rows, indent="  "))
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
        print(_table(
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


def cmd_get(args: argparse.Namespace) -> int:
    key = _key_arg(args.key, args.key_hex, "KEY")
    assert key is not None
    store, db = _open_db(args.url, args.version)
    try:
        value = db.get(key)
        version = db.version
    finally:
        db.close()
        store.close()
    if value is None:
        print(f"silt: key {show_key(key)!r} not found in version {version} of "
              f"{public_url(args.url)}", file=sys.stderr)
        return EXIT_ERROR
    if args.hex:
        print(value.hex())
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()
    return EXIT_OK


def cmd_scan(args: argparse.Namespace) -> int:
    start = _key_arg(args.start, args.key_hex, "--start")
    end = _key_arg(args.end, args.key_hex, "--end")
    prefix = _key_arg(args.prefix, args.key_hex, "--prefix")
    fmt: Callable[[bytes], str] = bytes.hex if args.hex else escape
    store, db = _open_db(args.url, args.version)
    try:
        items = db.scan(start, end, prefix=prefix)
        if args.limit is not None:
            items = islice(items, args.limit)
        write = sys.stdout.write
        for key, value in items:
            write(f"{fmt(key)}\t{fmt(value)}\n")
    finally:
        db.close()
        store.close()
    return EXIT_OK


def _print_verify_log(report: VerifyReport, db: str = "") -> None:
    """Problems and notes on stderr, in the order found (``db``: the DB's name, for a root of
    several DBs)."""
    where = f"{db}: " if db else ""
    for item in report.log:
        kind = item.kind if isinstance(item, Problem) else "note"
        print(f"silt: {kind}: {where}{item.message}", file=sys.stderr)


def _verify_line(report: VerifyReport) -> str:
    """``silt verify``'s summary of one DB."""
    counts, identity = report.counts, report.identity
    scope = "all versions" if report.all_versions else f"version {report.versions[0]}"
    problems = len(report.problems)
    verdict = "OK" if not problems else f"{problems} PROBLEM(S), see above"
    # Withdrawn versions and reservations are normal: counted, never problems.
    extra = "".join(
        f", {len(vs)} {what} ({_version_list(vs)})"
        for what, vs in (("withdrawn", identity.withdrawn),
                         ("reservations", identity.reservations)) if vs)
    inline = counts["inline_ssts"]
    ssts = f"{counts['ssts'] + inline} SSTs" + (f" ({inline} inline)" if inline else "")
    return (f"verified {scope}: {counts['versions']} manifests, {ssts}, "
            f"{counts['blocks']} blocks, {counts['entries']} entries, {report.bytes} bytes, "
            f"{counts['checkpoints']} checkpoints, {counts['records']} compaction records"
            f"{extra}: {verdict}")


def cmd_verify(args: argparse.Namespace) -> int:
    _check_file_root(args.url)
    _check_memory_root(args.url)
    report = verify(args.url, version=args.version, all_versions=args.all)
    if report.dbs:
        for db, r in report.dbs.items():
            _print_verify_log(r, db)
    else:
        _print_verify_log(report)
    if args.json:
        _print_json(report.to_json())
    elif report.dbs:
        for db, r in report.dbs.items():
            print(f"{db}: {_verify_line(r)}")
        bad = sum(not r.ok for r in report.dbs.values())
        verdict = "OK" if not bad else f"{bad} DB(S) WITH PROBLEMS, see above"
        print(f"root {public_url(args.url)}: {len(report.dbs)} DBs: {verdict}")
    else:
        print(_verify_line(report))
    return EXIT_OK if report.ok else EXIT_CORRUPT


def _version_list(versions: list[int]) -> str:
    """``1, 4, 9`` (at most five numbers, then how many more)."""
    shown = ", ".join(str(v) for v in versions[:5])
    return shown if len(versions) <= 5 else f"{shown} and {len(versions) - 5} more"


def cmd_plugins(args: argparse.Namespace) -> int:
    registry = get_registry()
    installed = [
        {"name": p.name, "distribution": p.distribution, "version": p.version,
         "provides": list(p.provides)}
        for p in registry.plugins.values()
    ]
    missing: dict[str, list[str]] = {}  # distribution -> what it would provide
    for scheme, dist in KNOWN_TIERS.items():
        if scheme not in registry.tiers:
            missing.setdefault(dist, []).append(f"tier {scheme}")
    for cache, dist in KNOWN_CACHES.items():
        if cache not in registry.caches:
            missing.setdefault(dist, []).append(f"cache {cache}")
    not_installed = [
        {"distribution": dist, "provides": provides, "install": f"pip install {dist}",
         "from_checkout": f"pip install ./packages/{dist.removeprefix('silt-')}"}
        for dist, provides in sorted(missing.items())
    ]
    if args.json:
        _print_json({"installed": installed, "not_installed": not_installed})
        return EXIT_OK
    print(_table(
        ["PLUGIN", "DISTRIBUTION", "VERSION", "PROVIDES"],
        [[p["name"], p["distribution"] or "-", p["version"] or "-",
          ", ".join(p["provides"]) or "-"] for p in installed],
    ))
    if not_installed:
        print("\nfirst-party plugins not installed:")
        print(_table(
            ["PROVIDES", "INSTALL WITH"],
            [[", ".join(n["provides"]), n["install"]] for n in not_installed],
            indent="  ",
        ))
        print("  (until they are on PyPI: pip install ./packages/<folder> from a silt checkout, "
              "or the wheels nox -s build writes into dist/)")
    return EXIT_OK


def _settings_from(args: argparse.Namespace) -> Settings:
    """Settings for ``compact``: defaults, then ``--set KEY=VALUE`` items, then ``--policy``."""
    fields = Settings().to_dict()
    changes: dict[str, Any] = {}
    for item in args.set or ():
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise InvalidArgumentError(
                f"--set takes KEY=VALUE with KEY one of {', '.join(sorted(fields))}; got {item!r}"
            )
        kind = type(fields[key])
        try:
            changes[key] = kind(text)
        except ValueError:
            raise InvalidArgumentError(
                f"--set {key}: {text!r} is not a valid {kind.__name__}"
            ) from None
    if args.policy is not None:
        changes["compaction"] = args.policy
    return Settings().replace(**changes)


def _compact_once(store: ObjectStore, url: str, settings: Settings, policy: Any,
                  clock: Clock) -> dict[str, Any]:
    """One pass of the external compactor (:func:`silt.compaction.external.compact_once`), as
    the JSON ``silt compact --json`` prints."""
    done = compact_once(store, url, settings, policy, clock)
    result: dict[str, Any] = {"status": done.status, "version": done.version}
    if done.waiting_for is not None:
        result["record"] = done.waiting_for
    if done.record is not None:
        result.update(_record_json(paths.compaction_key(done.record.id), done.record))
    return result


def cmd_compact(args: argparse.Namespace) -> int:
    import signal
    import time

    from .compaction.task import make_policy

    settings = _settings_from(args)
    policy = make_policy(settings.compaction, settings)
    if policy is None:
        raise InvalidArgumentError("--policy none compacts nothing; name a policy")
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, on_term) if args.loop else None
    store = _open_store(args.url)
    clock = Clock()
    passes = 0
    try:
        while True:
            try:
                result = _compact_once(store, args.url, settings, policy, clock)
            except (CorruptionError, InvalidArgumentError):
                raise
            except SiltError as exc:
                if not args.loop:
                    raise
                result = {"status": "failed", "error": str(exc)}
                print(f"silt: warning: compaction pass failed (retried next pass): {exc}",
                      file=sys.stderr)
            passes += 1
            if args.json:
                print(json.dumps(result, sort_keys=True), flush=True)
            else:
                print(_compact_line(args.url, result), flush=True)
            if not args.loop or stop or (args.iterations and passes >= args.iterations):
                break
            deadline = time.monotonic() + args.interval
            while not stop and time.monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if stop:
                break
    except KeyboardInterrupt:
        if not args.loop:
            raise
    finally:
        store.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def _compact_line(url: str, r: dict[str, Any]) -> str:
    at = f"{public_url(url)} version {r.get('version')}"
    if r["status"] == "empty":
        return f"{public_url(url)}: no committed versions, nothing to compact"
    if r["status"] == "idle":
        return f"{at}: nothing to compact"
    if r["status"] == "waiting":
        return f"{at}: waiting for the writer to adopt {r['record']}"
    if r["status"] == "failed":
        return f"{public_url(url)}: pass failed: {r['error']}"
    return (f"{at}: {r['mode']} {r['inputs']} SSTs ({r['input_bytes']} bytes) -> "
            f"{r['outputs']} SSTs ({r['output_bytes']} bytes): {r['reason']}; wrote {r['object']}")


def cmd_gc(args: argparse.Namespace) -> int:
    from .gc import collect_garbage

    store = _open_store(args.url)
    try:
        report = collect_garbage(store, retain_versions=args.retain, grace_seconds=args.grace,
                                 dry_run=args.dry_run)
    finally:
        store.close()
    if args.json:
        _print_json({
            "dry_run": report.dry_run,
            "dbs": [db.rstrip("/") for db in report.dbs],
            "kept_versions": {db.rstrip("/"): v for db, v in report.kept_versions.items()},
            "horizons": {db.rstrip("/"): h for db, h in report.horizons.items()},
            "deleted_manifests": report.deleted_manifests,
            "deleted_ssts": report.deleted_ssts,
            "deleted_records": report.deleted_records,
            "deleted_bytes": report.deleted_bytes,
        })
        return EXIT_OK
    verb = "would delete" if report.dry_run else "deleted"
    for db in report.dbs:
        kept = report.kept_versions.get(db, [])
        shown = ", ".join(map(str, kept)) if len(kept) <= 12 else (
            f"{kept[0]}..{kept[-1]} ({len(kept)} versions)")
        print(f"{db.rstrip('/') or '.'}: keeps versions {shown or '-'}, horizon "
              f"{report.horizons.get(db, '-')}")
    print(f"gc of {public_url(args.url)}: {verb} {len(report.deleted_manifests)} manifests, "
          f"{len(report.deleted_ssts)} SSTs ({report.deleted_bytes} bytes), "
          f"{len(report.deleted_records)} compaction records")
    return EXIT_OK


def cmd_checkpoint(args: argparse.Namespace) -> int:
    store, db = _open_db(args.url, args.version)
    try:
        version = db.checkpoint(args.name)
    finally:
        db.close()
        store.close()
    if args.json:
        _print_json({"name": args.name, "version": version,
                     "object": paths.checkpoint_key(args.name)})
    else:
        print(f"checkpoint {args.name!r} pins version {version} of {public_url(args.url)}")
    return EXIT_OK


# --- argument parsing ----------------------------------------------------------------------------


def _integer(text: str, low: int, high: int) -> int:
    """``text`` as an int in ``low..high``, else an argparse usage error saying why."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(
            f"{text!r} is negative" if low == 0 else f"{text!r} must be at least {low}"
        )
    if value > high:
        raise argparse.ArgumentTypeError(f"{text!r} is larger than the maximum {high}")
    return value


def _positive(text: str) -> int:
    return _integer(text, 1, paths.MAX_VERSION)


def _non_negative(text: str) -> int:
    return _integer(text, 0, MAX_INT)


def _prices(text: str) -> Prices:
    try:
        return Prices.parse(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _version(text: str) -> int:
    return _integer(text, 0, paths.MAX_VERSION)


def _seconds(text: str) -> float:
    """A finite number of seconds in ``0..MAX_SECONDS`` (``inf`` and ``nan`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is more than the maximum {MAX_SECONDS} seconds")
    return value


def _version_line() -> str:
    """``silt-core 0.1.0 (compiled hot path)`` for ``silt --version``."""
    from importlib.metadata import PackageNotFoundError, version

    from . import speedups

    try:
        number = version("silt-core")
    except PackageNotFoundError:  # run from a source tree that was never installed
        number = "unknown (not installed)"
    compiled = all(speedups().values())
    return f"silt-core {number} ({'compiled' if compiled else 'pure Python'} hot path)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="silt",
        description="Look at, read, check and maintain a silt root (only compact, gc and "
                    "checkpoint write).",
        epilog="exit status: 0 ok; 1 error or absent key (get); 2 corruption found or usage error",
    )
    parser.add_argument("--version", action="version", version=_version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,
                url: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        if url:
            p.add_argument("url", metavar="URL",
                           help="the root, e.g. file:///data/state or s3://bucket/prefix")
        return p

    def version_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--version", type=_version, metavar="N",
                       help="read version N (default: the latest)")

    p = command("ls", cmd_ls, "list committed versions with creation time, SSTs, bytes, "
                              "requests paid (class A/B) and meta")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--wide", action="store_true",
                   help=f"show META whole (cut at {META_WIDTH} characters otherwise)")

    p = command("inspect", cmd_inspect,
                "show one version's manifest: levels, SSTs, sizes, entries, key ranges, and "
                "what its writer paid in requests")
    version_option(p)
    p.add_argument("--prices", type=_prices, default=S3_STANDARD, metavar="KIND=USD,...",
                   help="request prices in US dollars per 1,000 requests, e.g. "
                        "'PUT=0.005,LIST=0.005,GET=0.0004' (default: S3 Standard's)")
    p.add_argument("--tails", action="store_true",
                   help="also read each SST's properties (one ranged GET per SST)")
    p.add_argument("--values", type=_non_negative, default=0, metavar="N",
                   help="on a root an installed plugin describes (a silt_spark operator root), "
                        "also show N of its state values, decoded (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("get", cmd_get, "print the value of KEY (raw bytes); exit 1 if it is absent")
    p.add_argument("key", metavar="KEY", help="the key, as UTF-8 text (or hex with --key-hex)")
    version_option(p)
    p.add_argument("--hex", action="store_true", help="print the value as hex")
    p.add_argument("--key-hex", action="store_true", help="KEY is given in hex")

    p = command("scan", cmd_scan,
                "print key<TAB>value lines in key order (non-printable bytes escaped)")
    p.add_argument("--start", metavar="K", help="first key (inclusive)")
    p.add_argument("--end", metavar="K", help="end key (exclusive)")
    p.add_argument("--prefix", metavar="P", help="only keys starting with P")
    p.add_argument("--limit", type=_non_negative, metavar="N", help="stop after N entries")
    version_option(p)
    p.add_argument("--hex", action="store_true", help="print keys and values as hex")
    p.add_argument("--key-hex", action="store_true", help="--start/--end/--prefix are hex")

    p = command("verify", cmd_verify,
                "read every manifest and every SST block in scope, every checkpoint and every "
                "pending compaction record with its outputs, and check their checksums and that "
                "what they name exists; check every version's identity (fate records, pins, "
                "forks, reservations, references); exit 2 on corruption or missing objects")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--version", type=_version, metavar="N",
                       help="verify version N (default: the latest)")
    scope.add_argument("--all", action="store_true", help="verify every committed version")
    p.add_argument("--json", action="store_true", help="machine-readable summary")

    p = command("plugins", cmd_plugins, "list installed plugins and first-party ones to install",
                url=False)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("compact", cmd_compact,
                "external compactor: pick the policy's next task from the latest version, merge "
                "its SSTs into new ones and write a record under compaction/ for the writer to "
                "adopt (the writer uses compaction_mode='external'); never writes a manifest")
    p.add_argument("--policy", metavar="NAME",
                   help="compaction policy (default: Settings.compaction, 'leveled')")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a Settings field, e.g. --set l0_compaction_trigger=4 (repeatable); use "
                        "the writer's values")
    p.add_argument("--loop", action="store_true",
                   help="keep compacting until interrupted (SIGINT/SIGTERM)")
    p.add_argument("--interval", type=_seconds, default=10.0, metavar="SECONDS",
                   help="pause between passes with --loop (default 10)")
    p.add_argument("--iterations", type=_non_negative, default=0, metavar="N",
                   help="with --loop, stop after N passes (default: never)")
    p.add_argument("--json", action="store_true", help="one JSON object per pass")

    defaults = Settings()
    p = command("gc", cmd_gc,
                "delete versions beyond the newest N (except checkpoints), then SSTs and "
                "compaction records no kept version needs that are older than the grace period; "
                "covers every DB under URL")
    p.add_argument("--retain", type=_positive, default=defaults.retain_versions, metavar="N",
                   help=f"versions to keep per DB (default {defaults.retain_versions})")
    p.add_argument("--grace", type=_seconds, default=defaults.gc_grace_seconds,
                   metavar="SECONDS",
                   help=f"minimum age of a deleted SST or record (default "
                        f"{defaults.gc_grace_seconds:g}); must match the writers' "
                        "Settings.gc_grace_seconds")
    p.add_argument("--dry-run", action="store_true", help="report what would go; delete nothing")
    p.add_argument("--json", action="store_true", help="machine-readable report")

    p = command("checkpoint", cmd_checkpoint,
                "pin a committed version under NAME so GC keeps it (names are create-only)")
    p.add_argument("name", metavar="NAME", help="1-128 letters, digits, '.', '_' or '-'")
    p.add_argument("--version", type=_version, metavar="N",
                   help="the version to pin (default: the latest)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``silt`` command line with ``argv`` (default ``sys.argv[1:]``); return the status.

    Never raises for expected failures: errors are printed to stderr and turned into the exit
    status described in the module docstring.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        return args.func(args)
    except CorruptionError as exc:
        print(f"silt: error: {exc}", file=sys.stderr)
        return EXIT_CORRUPT
    except SiltError as exc:
        print(f"silt: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # e.g. `silt scan URL | head`: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        import pluggy

        if isinstance(exc, pluggy.PluginValidationError):  # a broken plugin is installed
            print(f"silt: error: a plugin failed to load: {exc}", file=sys.stderr)
            return EXIT_ERROR
        # Never a traceback: one line naming the failure, and what to do about it.
        detail = str(exc).splitlines()[0][:300] if str(exc) else ""
        print(
            f"silt: error: unexpected {type(exc).__name__}"
            f"{': ' + detail if detail else ''}. This is a bug in silt or an installed plugin; "
            "please report it with the command that caused it (`silt plugins` lists versions)",
            file=sys.stderr,
        )
        return EXIT_ERROR


__all__ = ["build_parser", "escape", "main", "show_key"]
