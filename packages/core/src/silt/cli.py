"""The ``silt`` command line: look at, read and check a silt root. Every command only reads.

Commands (``silt COMMAND --help`` for each one's options)::

    silt ls URL                     committed versions: created, SSTs, bytes, meta
    silt inspect URL                one version's manifest: levels, SSTs, sizes, key ranges
    silt get URL KEY                one value (raw bytes on stdout)
    silt scan URL                   key<TAB>value lines in key order
    silt verify URL                 read every manifest and block in scope, check checksums
    silt plugins                    installed plugins and first-party ones not installed

Exit status: 0 success; 1 an error (bad URL, no such version, no tier for the scheme) or, for
``get``, an absent key; 2 damaged data (``verify`` found corruption or a missing SST, or any
command met a checksum failure) or a command-line usage error (argparse's convention).

Expected errors print ``silt: error: <message>`` on stderr, never a traceback.

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

from . import _list_versions, paths, read_manifest
from . import open as open_db
from .db import DB
from .errors import (
    CorruptionError,
    InvalidArgumentError,
    NotFoundError,
    SiltError,
    VersionNotFoundError,
)
from .manifest import Manifest
from .plugins import KNOWN_CACHES, KNOWN_TIERS, get_registry, open_store
from .sst.builder import SstInfo
from .sst.reader import SstReader
from .store import ObjectStore, retrying, split_url

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
            f"{url!r} does not exist: there is no directory {path!r}; check the path "
            "(silt's commands only read and never create a root)"
        )


def _open_store(url: str) -> ObjectStore:
    _check_file_root(url)
    return open_store(url)


def _open_db(url: str, version: int | None) -> tuple[ObjectStore, DB]:
    store = _open_store(url)
    try:
        db = open_db(url, version=version, store=store)
    except BaseException:
        store.close()
        raise
    if db.version is None:
        db.close()
        store.close()
        raise VersionNotFoundError(f"{url!r} has no committed versions")
    return store, db


def _resolve_version(store: ObjectStore, url: str, version: int | None) -> int:
    if version is not None:
        return version
    found = _list_versions(store)
    if not found:
        raise VersionNotFoundError(f"{url!r} has no committed versions")
    return found[-1]


def _read_manifest(store: ObjectStore, url: str, version: int) -> Manifest:
    try:
        return read_manifest(store, version)
    except VersionNotFoundError:
        raise VersionNotFoundError(
            f"version {version} of {url!r} does not exist; 'silt ls {url}' lists the versions"
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


def _sst_summary(manifest: Manifest) -> tuple[int, int]:
    ssts = list(manifest.all_ssts())
    return len(ssts), sum(s.size for s in ssts)


def cmd_ls(args: argparse.Namespace) -> int:
    store = _open_store(args.url)
    status = EXIT_OK
    rows: list[dict[str, Any]] = []
    try:
        for version in _list_versions(store):
            name = paths.manifest_key(version)
            try:
                m = read_manifest(store, version)
            except CorruptionError as exc:
                status = EXIT_CORRUPT
                print(f"silt: error: {exc}", file=sys.stderr)
                rows.append({"version": version, "error": str(exc), "object": name})
                continue
            except VersionNotFoundError:
                continue  # collected between the listing and the read
            count, size = _sst_summary(m)
            rows.append({
                "version": version, "parent": m.parent, "created_ms": m.created_ms,
                "created": _time(m.created_ms), "ssts": count, "bytes": size, "meta": m.meta,
            })
    finally:
        store.close()
    if args.json:
        _print_json(rows)
    elif rows:
        print(_table(
            ["VERSION", "CREATED", "SSTS", "BYTES", "META"],
            [
                [r["version"], "CORRUPT", "-", "-", r["object"]] if "error" in r
                else [r["version"], r["created"], r["ssts"], r["bytes"], _meta(r["meta"])]
                for r in rows
            ],
        ))
    else:
        print(f"silt: {args.url} has no committed versions", file=sys.stderr)
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
    if props is not None:
        d["properties"] = props
    return d


def cmd_inspect(args: argparse.Namespace) -> int:
    store = _open_store(args.url)
    try:
        version = _resolve_version(store, args.url, args.version)
        m = _read_manifest(store, args.url, version)
        props: dict[str, dict[str, Any]] = {}
        if args.tails:
            for info in m.all_ssts():
                reader = SstReader(store, paths.sst_key(info.id), info, None)
                props[info.id] = dict(reader.properties)
        store_stats = store.stats()
    finally:
        store.close()

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
            "meta": m.meta,
            "levels": [
                {"level": name, **totals(ssts),
                 "sst_list": [_sst_json(s, props.get(s.id) if args.tails else None)
                              for s in ssts]}
                for name, ssts in levels
            ],
            "totals": totals(everything),
            "store": store_stats,
        })
        return EXIT_OK

    print(f"version   {m.version}")
    print(f"parent    {'-' if m.parent is None else m.parent}")
    print(f"writer    {m.writer_id}")
    print(f"created   {_time(m.created_ms)}")
    print(f"meta      {_meta(m.meta) or '-'}")
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
            row: list[object] = [s.id, s.size, s.entries, s.tombstones]
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
        print(f"silt: key {show_key(key)!r} not found in version {version} of {args.url}",
              file=sys.stderr)
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


def _check_properties(info: SstInfo, props: dict[str, Any], name: str) -> None:
    """The SST's own properties must agree with what the manifest records about it."""
    expected = {
        "entries": info.entries,
        "tombstones": info.tombstones,
        "smallest": info.smallest.hex(),
        "largest": info.largest.hex(),
    }
    for field, want in expected.items():
        if props.get(field) != want:
            raise CorruptionError(
                name, None, f"properties say {field}={props.get(field)!r} but the manifest "
                f"records {want!r}"
            )


def cmd_verify(args: argparse.Namespace) -> int:
    store = _open_store(args.url)
    problems: list[dict[str, Any]] = []
    counts = {"versions": 0, "manifests_bytes": 0, "ssts": 0, "blocks": 0, "entries": 0,
              "sst_bytes": 0}

    def problem(kind: str, name: str, message: str, offset: int | None = None) -> None:
        problems.append({"kind": kind, "object": name, "offset": offset, "message": message})
        print(f"silt: {kind}: {message}", file=sys.stderr)

    try:
        if args.all:
            versions = _list_versions(store)
            if not versions:
                raise VersionNotFoundError(f"{args.url!r} has no committed versions")
        else:
            versions = [_resolve_version(store, args.url, args.version)]
        ssts: dict[str, tuple[SstInfo, int]] = {}  # id -> (info, first version naming it)
        for version in versions:
            name = paths.manifest_key(version)
            try:
                data = retrying(lambda name=name: store.get(name))  # type: ignore[misc]
            except NotFoundError:
                if args.all:  # collected since the listing
                    continue
                raise VersionNotFoundError(
                    f"version {version} of {args.url!r} does not exist; 'silt ls {args.url}' "
                    "lists the versions"
                ) from None
            counts["versions"] += 1
            counts["manifests_bytes"] += len(data)
            try:
                m = Manifest.decode(data, name)
            except CorruptionError as exc:
                problem("corruption", name, str(exc), exc.offset)
                continue
            for info in m.all_ssts():
                ssts.setdefault(info.id, (info, version))

        listed = {o.key: o.size for o in retrying(lambda: list(store.list(paths.SST_PREFIX)))}
        for sst_id, (info, version) in ssts.items():
            name = paths.sst_key(sst_id)
            counts["ssts"] += 1
            if name not in listed:
                problem("missing", name, f"SST {name!r} referenced by version {version} does not "
                        "exist; restore it from a replica or open a version that does not need it")
                continue
            if listed[name] != info.size:
                problem("corruption", name, str(CorruptionError(
                    name, None, f"object is {listed[name]} bytes but the manifest of version "
                    f"{version} records {info.size}")))
                continue
            reader = SstReader(store, name, info, None)
            try:
                entries = reader.verify()
                _check_properties(info, reader.properties, name)
            except CorruptionError as exc:
                problem("corruption", name, str(exc), exc.offset)
                continue
            except NotFoundError:
                problem("missing", name, f"SST {name!r} referenced by version {version} "
                        "disappeared while being verified")
                continue
            counts["blocks"] += reader.num_blocks
            counts["entries"] += entries
            counts["sst_bytes"] += info.size
    finally:
        store.close()

    total_bytes = counts["manifests_bytes"] + counts["sst_bytes"]
    if args.json:
        _print_json({**counts, "bytes": total_bytes, "ok": not problems, "problems": problems})
    else:
        scope = "all versions" if args.all else f"version {versions[0]}"
        verdict = "OK" if not problems else f"{len(problems)} PROBLEM(S), see above"
        print(f"verified {scope}: {counts['versions']} manifests, {counts['ssts']} SSTs, "
              f"{counts['blocks']} blocks, {counts['entries']} entries, {total_bytes} bytes: "
              f"{verdict}")
    return EXIT_CORRUPT if problems else EXIT_OK


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
        {"distribution": dist, "provides": provides, "install": f"pip install {dist}"}
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
    return EXIT_OK


# --- argument parsing ----------------------------------------------------------------------------


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="silt",
        description="Look at, read and check a silt root (every command only reads).",
        epilog="exit status: 0 ok; 1 error or absent key (get); 2 corruption found or usage error",
    )
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
        p.add_argument("--version", type=_non_negative, metavar="N",
                       help="read version N (default: the latest)")

    p = command("ls", cmd_ls, "list committed versions with creation time, SSTs, bytes and meta")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("inspect", cmd_inspect,
                "show one version's manifest: levels, SSTs, sizes, entries, key ranges")
    version_option(p)
    p.add_argument("--tails", action="store_true",
                   help="also read each SST's properties (one ranged GET per SST)")
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
                "read every manifest and every SST block in scope and check their checksums; "
                "exit 2 on corruption or missing SSTs")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--version", type=_non_negative, metavar="N",
                       help="verify version N (default: the latest)")
    scope.add_argument("--all", action="store_true", help="verify every committed version")
    p.add_argument("--json", action="store_true", help="machine-readable summary")

    p = command("plugins", cmd_plugins, "list installed plugins and first-party ones to install",
                url=False)
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
        raise


__all__ = ["build_parser", "escape", "main", "show_key"]
