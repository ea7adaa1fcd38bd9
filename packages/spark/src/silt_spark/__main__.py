"""``python -m silt_spark``: maintenance commands for silt_spark operator state roots.

The command line parses and prints; the work is done by the public API
(:func:`silt_spark.drop_state`). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from silt.errors import SiltError


def _drop_state(args: argparse.Namespace) -> int:
    from . import drop_state

    if not args.yes and not args.dry_run:
        n = drop_state(args.url, dry_run=True)
        print(f"drop-state would delete {n} object(s) under {args.url}; stop the query first, "
              "then run again with --yes", file=sys.stderr)
        return 2
    n = drop_state(args.url, dry_run=args.dry_run)
    if args.dry_run:
        print(f"would delete {n} object(s) under {args.url}")
    else:
        print(f"deleted {n} object(s) under {args.url}; the next run of the query starts this "
              "operator with empty state")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m silt_spark", description="Maintain silt_spark operator state roots.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "drop-state", help="delete an operator's state on purpose",
        description="Delete every object of an operator's state root (stop its query first) "
                    "and mark it as empty on purpose, so the query's next run starts the "
                    "operator with empty state at whatever micro-batch its checkpoint is at.",
    )
    p.add_argument("url", metavar="URL", help="the operator's state_url")
    p.add_argument("--yes", action="store_true", help="really delete")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.set_defaults(func=_drop_state)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (SiltError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
