"""``silt``'s command line, parsed: the commands, their options, and the checks on each value.

Every value is checked before anything is read: integers in range, finite numbers of seconds
(``inf``, ``nan`` and negatives are usage errors, status 2), prices, keys given as text or hex,
``--set KEY=VALUE`` against :class:`~silt.settings.Settings`. The parser names the command in
``args.command``; :func:`silt.cli.main` runs it.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import paths
from ..cost import S3_STANDARD, Prices
from ..errors import InvalidArgumentError
from ..settings import MAX_INT, MAX_SECONDS, Settings
from .show import META_WIDTH


def integer(text: str, low: int, high: int) -> int:
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


def positive(text: str) -> int:
    """An integer of at least 1 (a count of versions)."""
    return integer(text, 1, paths.MAX_VERSION)


def non_negative(text: str) -> int:
    """An integer of at least 0."""
    return integer(text, 0, MAX_INT)


def prices(text: str) -> Prices:
    """Request prices, as :meth:`silt.cost.Prices.parse` reads them."""
    try:
        return Prices.parse(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def version_number(text: str) -> int:
    """A version number (0 up to the largest a root can hold)."""
    return integer(text, 0, paths.MAX_VERSION)


def seconds(text: str) -> float:
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


def version_line() -> str:
    """``silt-core 0.1.0 (compiled hot path)`` for ``silt --version``."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import speedups

    try:
        number = version("silt-core")
    except PackageNotFoundError:  # run from a source tree that was never installed
        number = "unknown (not installed)"
    compiled = all(speedups().values())
    return f"silt-core {number} ({'compiled' if compiled else 'pure Python'} hot path)"


def key_arg(text: str | None, is_hex: bool, what: str) -> bytes | None:
    """A key option's bytes: ``text`` as UTF-8 (undecodable bytes kept), or as hex with
    ``is_hex`` (``0x`` optional); ``None`` stays ``None``. ``what`` names the option."""
    if text is None:
        return None
    if not is_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return bytes.fromhex(text.removeprefix("0x"))
    except ValueError:
        raise InvalidArgumentError(f"{what} {text!r} is not hex (given --key-hex)") from None


def _flag(text: str) -> bool:
    """``true``/``false`` (or ``1``/``0``, ``yes``/``no``, any case) as a bool; ``bool(text)``
    would take ``false`` for true."""
    word = text.strip().lower()
    if word in ("true", "1", "yes", "on"):
        return True
    if word in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


def settings_from(args: argparse.Namespace) -> Settings:
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
            changes[key] = _flag(text) if kind is bool else kind(text)
        except ValueError:
            raise InvalidArgumentError(
                f"--set {key}: {text!r} is not a valid {kind.__name__}"
            ) from None
    if args.policy is not None:
        changes["compaction"] = args.policy
    return Settings().replace(**changes)


def build_parser() -> argparse.ArgumentParser:
    """The ``silt`` parser: ``args.command`` names the command, the rest are its options."""
    parser = argparse.ArgumentParser(
        prog="silt",
        description="Look at, read, check and maintain a silt root (only compact, gc and "
                    "checkpoint write).",
        epilog="exit status: 0 ok; 1 error or absent key (get); 2 corruption found or usage error",
    )
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, url: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if url:
            p.add_argument("url", metavar="URL",
                           help="the root, e.g. file:///data/state or s3://bucket/prefix")
        return p

    def version_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--version", type=version_number, metavar="N",
                       help="read version N (default: the latest)")

    p = command("ls", "list committed versions with creation time, SSTs, bytes, requests paid "
                      "(class A/B) and meta")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--wide", action="store_true",
                   help=f"show META whole (cut at {META_WIDTH} characters otherwise)")

    p = command("inspect",
                "show one version's manifest: levels, SSTs, sizes, entries, key ranges, and "
                "what its writer paid in requests")
    version_option(p)
    p.add_argument("--prices", type=prices, default=S3_STANDARD, metavar="KIND=USD,...",
                   help="request prices in US dollars per 1,000 requests, e.g. "
                        "'PUT=0.005,LIST=0.005,GET=0.0004' (default: S3 Standard's)")
    p.add_argument("--tails", action="store_true",
                   help="also read each SST's properties (one ranged GET per SST)")
    p.add_argument("--values", type=non_negative, default=0, metavar="N",
                   help="on a root an installed plugin describes (a silt_spark operator root), "
                        "also show N of its state values, decoded (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("get", "print the value of KEY (raw bytes; on a terminal, one line escaped as "
                       "scan escapes it); exit 1 if it is absent")
    p.add_argument("key", metavar="KEY", help="the key, as UTF-8 text (or hex with --key-hex)")
    version_option(p)
    p.add_argument("--hex", action="store_true", help="print the value as hex")
    p.add_argument("--key-hex", action="store_true", help="KEY is given in hex")

    p = command("scan", "print key<TAB>value lines in key order (non-printable bytes escaped)")
    p.add_argument("--start", metavar="K", help="first key (inclusive)")
    p.add_argument("--end", metavar="K", help="end key (exclusive)")
    p.add_argument("--prefix", metavar="P", help="only keys starting with P")
    p.add_argument("--limit", type=non_negative, metavar="N", help="stop after N entries")
    version_option(p)
    p.add_argument("--hex", action="store_true", help="print keys and values as hex")
    p.add_argument("--key-hex", action="store_true", help="--start/--end/--prefix are hex")

    p = command("verify",
                "read every manifest and every SST block in scope, every checkpoint and every "
                "pending compaction record with its outputs, and check their checksums and that "
                "what they name exists; check every version's identity (fate records, pins, "
                "forks, reservations, references); exit 2 on corruption or missing objects")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--version", type=version_number, metavar="N",
                       help="verify version N (default: the latest)")
    scope.add_argument("--all", action="store_true", help="verify every committed version")
    p.add_argument("--json", action="store_true", help="machine-readable summary")

    p = command("plugins", "list installed plugins and first-party ones to install", url=False)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("compact",
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
    p.add_argument("--interval", type=seconds, default=10.0, metavar="SECONDS",
                   help="pause between passes with --loop (default 10)")
    p.add_argument("--iterations", type=non_negative, default=0, metavar="N",
                   help="with --loop, stop after N passes (default: never)")
    p.add_argument("--json", action="store_true", help="one JSON object per pass")

    defaults = Settings()
    p = command("gc", "delete versions beyond the newest N (except checkpoints), then SSTs and "
                "compaction records no kept version needs that are older than the grace period; "
                "covers every DB under URL")
    p.add_argument("--retain", type=positive, default=defaults.retain_versions, metavar="N",
                   help=f"versions to keep per DB (default {defaults.retain_versions})")
    p.add_argument("--grace", type=seconds, default=defaults.gc_grace_seconds,
                   metavar="SECONDS",
                   help=f"minimum age of a deleted SST or record (default "
                        f"{defaults.gc_grace_seconds:g}); must match the writers' "
                        "Settings.gc_grace_seconds")
    p.add_argument("--dry-run", action="store_true", help="report what would go; delete nothing")
    p.add_argument("--json", action="store_true", help="machine-readable report")

    p = command("checkpoint",
                "pin a committed version under NAME so GC keeps it (names are create-only)")
    p.add_argument("name", metavar="NAME", help="1-128 letters, digits, '.', '_' or '-'")
    p.add_argument("--version", type=version_number, metavar="N",
                   help="the version to pin (default: the latest)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser
