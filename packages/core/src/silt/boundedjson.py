"""Parsing JSON from stored metadata with limits, so crafted bytes cannot exhaust the parser.

Every JSON document silt stores (manifest bodies, SST properties) has a small, fixed nesting
depth. :func:`loads` refuses, before parsing, a document larger than its size limit or nested
deeper than its depth limit (``json.loads`` would otherwise recurse until ``RecursionError``),
and reports every failure as ``ValueError`` with a short reason; callers turn it into a
:class:`~silt.errors.CorruptionError` naming the object and offset.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: A JSON string literal (possessive, so a damaged document cannot make the scan backtrack).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
#: Opening brackets become 1, closing ones 2, every other byte is dropped.
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\x02\x02")
_OTHER = bytes(b for b in range(256) if b not in b"[{]}")


def depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (brackets inside
    string literals do not count). Linear time; never recurses."""
    brackets = _STRING.sub(b"", data).translate(_BRACKETS, _OTHER)
    if not brackets:
        return 0
    return max(accumulate(1 if b == 1 else -1 for b in brackets))


def loads(data: bytes | memoryview, *, max_bytes: int, max_depth: int) -> Any:
    """``json.loads(data)``, after checking ``len(data) <= max_bytes`` and
    ``depth(data) <= max_depth``. Raises ``ValueError`` (with the reason) for anything that is
    not such a document, including text that is not UTF-8."""
    if len(data) > max_bytes:
        raise ValueError(f"JSON document of {len(data)} bytes exceeds the limit of {max_bytes}")
    data = bytes(data)
    found = depth(data)
    if found > max_depth:
        raise ValueError(f"JSON nested {found} levels deep, more than the {max_depth} allowed")
    try:
        return json.loads(data)
    except RecursionError:  # pragma: no cover - the depth check above comes first
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"JSON text is not UTF-8 ({exc.reason})") from None
