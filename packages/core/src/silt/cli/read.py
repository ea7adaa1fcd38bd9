"""``silt ls``, ``get``, ``scan``, ``verify`` and ``plugins``: commands that only read.

Each takes the parsed arguments, prints, and returns the exit status (:mod:`silt.cli.status`);
expected failures are raised as :class:`~silt.errors.SiltError` for :func:`silt.cli.main`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from itertools import islice

from ..plugins import KNOWN_CACHES, KNOWN_TIERS, get_registry
from ..roots import child_dbs, version_rows
from ..tierkit import public_url
from ..verify import Problem, VerifyReport, verify
from .args import key_arg
from .opening import check_file_root, check_memory_root, open_one_db, open_root
from .progress import bars, is_terminal
from .show import (
    classes,
    escape,
    meta_text,
    print_json,
    short,
    show_key,
    table,
    time_text,
    version_list,
)
from .status import EXIT_CORRUPT, EXIT_ERROR, EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    """``silt ls``: each committed version (of each DB under a root of DBs) as a table or
    JSON; a version whose manifest is damaged is reported and the listing goes on (status 2)."""
    store = open_root(args.url)
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
        print_json([r if "error" in r else {**r, "created": time_text(r["created_ms"])}
                     for r in rows])
    elif rows:
        header = ["VERSION", "CREATED", "SSTS", "BYTES", "REQUESTS", "META"]
        print(table(
            ["DB", *header] if dbs else header,
            [
                ([r["db"]] if dbs else [])
                + ([r["version"], "CORRUPT", "-", "-", "-", r["object"]] if "error" in r
                   else [r["version"], time_text(r["created_ms"]), r["ssts"], r["bytes"],
                         classes(r["requests"]), short(meta_text(r["meta"]), args.wide)])
                for r in rows
            ],
        ))
    else:
        print(f"silt: {public_url(args.url)} has no committed versions", file=sys.stderr)
    return status


def cmd_get(args: argparse.Namespace) -> int:
    """``silt get``: one value, as raw bytes (or hex) into a pipe or file and as one line
    escaped by :func:`escape` on a terminal; status 1 when the key is absent."""
    key = key_arg(args.key, args.key_hex, "KEY")
    assert key is not None
    store, db = open_one_db(args.url, args.version, read_only=True)
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
    elif is_terminal(sys.stdout):  # for people: one line, escaped as scan escapes it
        print(escape(value))
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()
    return EXIT_OK


def cmd_scan(args: argparse.Namespace) -> int:
    """``silt scan``: ``key<TAB>value`` lines in key order, escaped by :func:`escape` (or hex)."""
    start = key_arg(args.start, args.key_hex, "--start")
    end = key_arg(args.end, args.key_hex, "--end")
    prefix = key_arg(args.prefix, args.key_hex, "--prefix")
    fmt: Callable[[bytes], str] = bytes.hex if args.hex else escape
    store, db = open_one_db(args.url, args.version, read_only=True)
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
        f", {len(vs)} {what} ({version_list(vs)})"
        for what, vs in (("withdrawn", identity.withdrawn),
                         ("reservations", identity.reservations)) if vs)
    inline = counts["inline_ssts"]
    ssts = f"{counts['ssts'] + inline} SSTs" + (f" ({inline} inline)" if inline else "")
    return (f"verified {scope}: {counts['versions']} manifests, {ssts}, "
            f"{counts['blocks']} blocks, {counts['entries']} entries, {report.bytes} bytes, "
            f"{counts['checkpoints']} checkpoints, {counts['records']} compaction records"
            f"{extra}: {verdict}")


def cmd_verify(args: argparse.Namespace) -> int:
    """``silt verify``: :func:`silt.verify`'s report (problems on stderr, a summary line per
    DB on stdout); status 2 when anything is damaged. Draws progress on a terminal."""
    check_file_root(args.url)
    check_memory_root(args.url)
    with bars("verify") as progress:
        report = verify(args.url, version=args.version, all_versions=args.all,
                        progress=progress)
    if report.dbs:
        for db, r in report.dbs.items():
            _print_verify_log(r, db)
    else:
        _print_verify_log(report)
    if args.json:
        print_json(report.to_json())
    elif report.dbs:
        for db, r in report.dbs.items():
            print(f"{db}: {_verify_line(r)}")
        bad = sum(not r.ok for r in report.dbs.values())
        verdict = "OK" if not bad else f"{bad} DB(S) WITH PROBLEMS, see above"
        print(f"root {public_url(args.url)}: {len(report.dbs)} DBs: {verdict}")
    else:
        print(_verify_line(report))
    return EXIT_OK if report.ok else EXIT_CORRUPT



def cmd_plugins(args: argparse.Namespace) -> int:
    """``silt plugins``: installed plugins, and first-party ones not installed with how to
    install them."""
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
        print_json({"installed": installed, "not_installed": not_installed})
        return EXIT_OK
    print(table(
        ["PLUGIN", "DISTRIBUTION", "VERSION", "PROVIDES"],
        [[p["name"], p["distribution"] or "-", p["version"] or "-",
          ", ".join(p["provides"]) or "-"] for p in installed],
    ))
    if not_installed:
        print("\nfirst-party plugins not installed:")
        print(table(
            ["PROVIDES", "INSTALL WITH"],
            [[", ".join(n["provides"]), n["install"]] for n in not_installed],
            indent="  ",
        ))
        print("  (until they are on PyPI: pip install ./packages/<folder> from a silt checkout, "
              "or the wheels nox -s build writes into dist/)")
    return EXIT_OK



__all__ = ["cmd_get", "cmd_ls", "cmd_plugins", "cmd_scan", "cmd_verify"]
