"""Running code as a fresh Spark Python worker would: a new interpreter with this one's import
path, handed an Arrow table as an IPC stream on its stdin (as a worker reads its batches, so
no array is built from Python objects or numpy before the code runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pyarrow as pa


def run_fresh(code: str, table: pa.Table) -> Any:
    """Run ``code`` in a fresh interpreter with ``table`` as an Arrow stream on stdin; fail the
    test with its stderr if it fails; return the JSON its last line of output holds."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         input=sink.getvalue().to_pybytes(), timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout.decode().strip().splitlines()[-1])
