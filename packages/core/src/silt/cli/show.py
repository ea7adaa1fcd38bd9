"""How ``silt`` prints: bytes as one line of text, times, tables, JSON, short lists.

Nothing here reads a root; every function turns values into text for stdout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..compaction.record import CompactionRecord
from ..cost import Prices, request_classes, summary
from ..errors import CorruptionError

#: ``silt ls`` cuts its META column here (``--wide`` shows it whole).
META_WIDTH = 60


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


def time_text(ms: int) -> str:
    """``ms`` since the epoch as ``2023-11-14T22:13:20.000Z``."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def meta_text(meta: dict[str, str]) -> str:
    """A version's meta as ``k=v k=v``, sorted, both sides escaped by :func:`escape`."""
    return " ".join(f"{escape(k.encode())}={escape(v.encode())}" for k, v in sorted(meta.items()))


def short(text: str, wide: bool) -> str:
    """``text`` cut to :data:`META_WIDTH` characters with ``...`` unless ``wide``."""
    return text if wide or len(text) <= META_WIDTH else text[:META_WIDTH - 3] + "..."


def classes(requests: dict[str, int]) -> str:
    """``A5/B3``: a version's recorded requests by class (``-`` when none were recorded)."""
    if not requests:
        return "-"
    c = request_classes(requests)
    return f"A{c['class_a']}/B{c['class_b']}"


def cost_line(requests: dict[str, int], prices: Prices) -> str:
    """What a version's writer paid in requests, and their estimated cost at ``prices``."""
    if not requests:
        return "- (not recorded by this version's writer)"
    c = summary(requests, prices)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(requests.items()))
    return (f"{kinds} since the writer's previous commit: class A {c['class_a']}, class B "
            f"{c['class_b']}, est. ${c['usd']:.6f} at {prices.name} prices")


def table(header: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "") -> str:
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


def print_json(obj: Any) -> None:
    """``obj`` on stdout as indented JSON with sorted keys."""
    print(json.dumps(obj, indent=2, sort_keys=True))


def name_list(names: list[str]) -> str:
    """``a, b, c`` (at most three names, then how many more)."""
    shown = ", ".join(n.rstrip("/") for n in names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} more"


def version_list(versions: list[int]) -> str:
    """``1, 4, 9`` (at most five numbers, then how many more)."""
    shown = ", ".join(str(v) for v in versions[:5])
    return shown if len(versions) <= 5 else f"{shown} and {len(versions) - 5} more"


def record_json(name: str, rec: CompactionRecord | CorruptionError) -> dict[str, Any]:
    """A compaction record (or why object ``name`` could not be read as one), as JSON."""
    if isinstance(rec, CorruptionError):
        return {"object": name, "error": str(rec)}
    return {
        "object": name, "id": rec.id, "base_version": rec.base_version,
        "created_ms": rec.created_ms, "created": time_text(rec.created_ms), "mode": rec.task.mode,
        "target_level": rec.task.target_level, "drop_tombstones": rec.task.drop_tombstones,
        "inputs": len(rec.task.inputs), "outputs": len(rec.outputs),
        "input_bytes": rec.input_bytes, "output_bytes": sum(o.size for o in rec.outputs),
        "reason": rec.task.reason,
    }


__all__ = [
    "META_WIDTH", "classes", "cost_line", "escape", "meta_text", "name_list", "print_json",
    "record_json", "short", "show_key", "table", "time_text", "version_list",
]
