"""``silt compact``, ``gc`` and ``checkpoint``: the commands that write.

``compact`` writes new SSTs and a compaction record (never a manifest), ``gc`` deletes (nothing
with ``--dry-run``), ``checkpoint`` creates one small object; none changes an existing object.
``compact`` and ``gc`` draw progress on a terminal (:mod:`silt.cli.progress`).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from .. import paths
from ..clock import Clock
from ..compaction.external import compact_once
from ..compaction.task import make_policy
from ..errors import CorruptionError, InvalidArgumentError, SiltError
from ..gc import collect_garbage
from ..progress import Progress
from ..settings import Settings
from ..store import ObjectStore
from ..tierkit import public_url
from .args import settings_from
from .opening import open_one_db, open_root
from .progress import bars
from .show import print_json, record_json
from .status import EXIT_OK


def _compact_once(store: ObjectStore, url: str, settings: Settings, policy: Any,
                  clock: Clock, progress: Progress | None = None) -> dict[str, Any]:
    """One pass of the external compactor (:func:`silt.compaction.external.compact_once`), as
    the JSON ``silt compact --json`` prints."""
    done = compact_once(store, url, settings, policy, clock, progress)
    result: dict[str, Any] = {"status": done.status, "version": done.version}
    if done.waiting_for is not None:
        result["record"] = done.waiting_for
    if done.record is not None:
        result.update(record_json(paths.compaction_key(done.record.id), done.record))
    return result


def cmd_compact(args: argparse.Namespace) -> int:
    """``silt compact``: one pass of the external compactor, or passes until interrupted with
    ``--loop`` (a failed pass is reported and retried next pass); a line or JSON per pass."""
    settings = settings_from(args)
    policy = make_policy(settings.compaction, settings)
    if policy is None:
        raise InvalidArgumentError("--policy none compacts nothing; name a policy")
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, on_term) if args.loop else None
    store = open_root(args.url)
    clock = Clock()
    passes = 0
    try:
        while True:
            try:
                with bars("compact") as progress:
                    result = _compact_once(store, args.url, settings, policy, clock, progress)
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
    """One compaction pass, for people."""
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
    """``silt gc``: one GC pass over every DB under the root; what it kept and deleted."""
    store = open_root(args.url)
    try:
        with bars("gc") as progress:
            report = collect_garbage(store, retain_versions=args.retain,
                                     grace_seconds=args.grace, dry_run=args.dry_run,
                                     progress=progress)
    finally:
        store.close()
    if args.json:
        print_json({
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
    """``silt checkpoint``: pin a version under a name, so GC keeps it."""
    store, db = open_one_db(args.url, args.version)
    try:
        version = db.checkpoint(args.name)
    finally:
        db.close()
        store.close()
    if args.json:
        print_json({"name": args.name, "version": version,
                     "object": paths.checkpoint_key(args.name)})
    else:
        print(f"checkpoint {args.name!r} pins version {version} of {public_url(args.url)}")
    return EXIT_OK


__all__ = ["cmd_checkpoint", "cmd_compact", "cmd_gc"]
