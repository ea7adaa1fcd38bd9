"""The ``silt`` command line: look at, read, check and maintain a silt root.

Commands (``silt COMMAND --help`` for each one's options)::

    silt ls URL                     committed versions: created, SSTs, bytes, requests paid
                                    (class A/B), meta (for a root of DBs: each DB's versions)
    silt inspect URL                one version's manifest: levels, SSTs, sizes, key ranges, plus
                                    compaction state, pending compaction records, checkpoints,
                                    the GC horizon and the requests its writer paid with their
                                    estimated cost (for a root of DBs: one line per DB)
    silt get URL KEY                one value (raw bytes on stdout; on a terminal one line,
                                    escaped as scan escapes it)
    silt scan URL                   key<TAB>value lines in key order (backslash, undecodable
                                    bytes and non-printable characters escaped)
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

``verify``, ``compact`` and ``gc`` draw progress bars on stderr while it is a terminal (never
when it is piped or redirected).

The package: :mod:`~silt.cli.args` parses, :mod:`~silt.cli.show` formats,
:mod:`~silt.cli.opening` opens the root named, :mod:`~silt.cli.read`,
:mod:`~silt.cli.inspect` and :mod:`~silt.cli.maintain` hold the commands,
:mod:`~silt.cli.progress` draws progress; the work itself is the core's.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from ..errors import CorruptionError, SiltError
from .args import build_parser
from .inspect import cmd_inspect
from .maintain import cmd_checkpoint, cmd_compact, cmd_gc
from .read import cmd_get, cmd_ls, cmd_plugins, cmd_scan, cmd_verify
from .show import escape, show_key
from .status import EXIT_CORRUPT, EXIT_ERROR, EXIT_OK

#: Each command of :func:`~silt.cli.args.build_parser`, and what runs it.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "ls": cmd_ls,
    "inspect": cmd_inspect,
    "get": cmd_get,
    "scan": cmd_scan,
    "verify": cmd_verify,
    "plugins": cmd_plugins,
    "compact": cmd_compact,
    "gc": cmd_gc,
    "checkpoint": cmd_checkpoint,
}


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
        return COMMANDS[args.command](args)
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


__all__ = ["COMMANDS", "EXIT_CORRUPT", "EXIT_ERROR", "EXIT_OK", "build_parser", "escape", "main",
           "show_key"]
