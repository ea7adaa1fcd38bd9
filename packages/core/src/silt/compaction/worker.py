"""The compaction subprocess: background merges run outside the writer's process.

A merge is CPU-bound Python (decode, merge, encode, bloom): run in a thread of the writer, it
holds the GIL for most of its run, and every foreground read that releases the GIL (a block read
from the store) waits up to a switch interval to get it back, so gets slow down several times
while a compaction runs. :func:`run_elsewhere` runs :func:`.compactor.run_compaction` in one
worker process per writer process (a ``python -c`` child started on first need and shared by
every DB the process opens, one task at a time), while the driver's thread only waits for it,
without the GIL. Nothing changes
for adoption: the worker writes the outputs and the record create-only, exactly as the thread
did, and returns the record; the writer adopts it at a commit as before.

Only a DB whose store another process can open the same way (a ``file://`` root; the object
store tiers carry options and credentials that are not in their URL), with the system clock
(a :class:`~silt.clock.ManualClock` lives in this process only) and a task that reads no sibling
DB's SSTs qualifies (:func:`can_run_elsewhere`); the others compact in the driver's thread as
before. The worker's requests are counted into the DB's metrics under ``compaction``.

The same worker reads and checks every block of a leftover compaction's output
(:func:`check_elsewhere`, for :mod:`.leftovers`): a full read of what a large load's compaction
wrote (about a second of CPU per 5M keys), which a writer's thread would run under the GIL right
after a restarted stream's first commit, beside the next shard tasks of the same Python worker.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
import time
from typing import IO, Any

from ..clock import Clock
from ..errors import CorruptionError, NotFoundError, StoreError
from ..manifest import Manifest
from ..metrics import MeteredStore, Metrics
from ..settings import Settings
from ..sst.builder import SstInfo
from ..store import ObjectStore
from ..tiers.file import FileStore
from .record import CompactionRecord
from .task import CompactionTask

#: How much lower the compaction subprocess's scheduling priority is than the writer's
#: (``os.nice``): on a busy host a merge runs on the CPU time foreground work leaves, so a
#: compaction started by a commit does not slow the micro-batches that follow. A merge that falls
#: behind is bounded by the writer's L0 stall (``Settings.l0_stall_trigger``).
NICE = 10
#: How often the worker checks that the writer process still lives.
_PARENT_POLL_SECONDS = 0.2
#: The worker's start: lower its priority first (see NICE: its own start, an interpreter
#: importing silt, is background work too, and a restarted stream's first micro-batch is
#: when it would compete most), take the writer's import path (the first message), then serve.
_BOOT = ("import os\n"
         f"try: os.nice({NICE})\n"
         "except (OSError, AttributeError): pass\n"
         "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
         "from silt.compaction.worker import serve; serve()")

_lock = threading.Lock()  # one task at a time in the one worker; held while it runs
_proc: subprocess.Popen[bytes] | None = None


def _file_root(store: ObjectStore) -> str | None:
    """The root directory of ``store`` when it is a ``file://`` store (through metering)."""
    inner = store.inner if isinstance(store, MeteredStore) else store
    return inner.root if type(inner) is FileStore else None


def can_run_elsewhere(store: ObjectStore, manifest: Manifest, task: CompactionTask,
                      clock: Clock) -> bool:
    """Whether ``task`` can run in the compaction subprocess (see the module docstring)."""
    if type(clock) is not Clock or _file_root(store) is None:
        return False
    ids = set(task.inputs)
    return not any(s.db for s in manifest.all_ssts() if s.id in ids)


def can_check_elsewhere(store: ObjectStore, clock: Clock) -> bool:
    """Whether :func:`check_elsewhere` can check ``store``'s SSTs (a ``file://`` root, the
    system clock: the DBs whose compactions :func:`can_run_elsewhere` may take)."""
    return type(clock) is Clock and _file_root(store) is not None


def _worker() -> subprocess.Popen[bytes]:
    """The running worker, started if there is none (call under ``_lock``). It is a plain
    ``python -c`` child talking pickles over its stdin and stdout: it inherits no other
    descriptor of the writer (a killed writer's pipes reach EOF for whoever reads them) and
    re-imports nothing of the writer's ``__main__`` (a Spark worker's, a notebook's)."""
    global _proc
    if _proc is None or _proc.poll() is not None:
        _proc = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 close_fds=True)
        _send(_proc, list(sys.path))
        atexit.register(_shutdown, _proc)
    return _proc


def _shutdown(proc: subprocess.Popen[bytes]) -> None:
    """At the writer's exit: close the worker's stdin (it ends after its task, or at once
    when idle) and reap it, killing it if it does not end within a second."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=1)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def _send(proc: subprocess.Popen[bytes], message: Any) -> None:
    stdin = proc.stdin
    assert stdin is not None
    pickle.dump(message, stdin, protocol=pickle.HIGHEST_PROTOCOL)
    stdin.flush()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    global _proc
    if _proc is proc:
        _proc = None
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def run_elsewhere(store: ObjectStore, manifest: Manifest, task: CompactionTask,
                  settings: Settings, metrics: Metrics) -> CompactionRecord:
    """:func:`.compactor.run_compaction` of ``task`` in the compaction subprocess; returns its
    record. Call only when :func:`can_run_elsewhere` says so. Errors of the compaction are
    raised here (as the same exception when it can cross the process boundary, else as a
    :class:`~silt.errors.StoreError` naming it); a worker that died is reported as a
    :class:`~silt.errors.StoreError` and replaced on the next call."""
    root = _file_root(store)
    assert root is not None
    kind, payload = _ask(("compact", (root, manifest.encode(), task, settings)), metrics,
                         "the task is picked again by a later commit")
    if kind == "error":
        raise payload
    return CompactionRecord.decode(payload, "compaction subprocess")


def check_elsewhere(store: ObjectStore, key: str, info: SstInfo, metrics: Metrics) -> None:
    """:func:`silt.sst.check.check_sst` of ``key`` against ``info`` with ``blocks`` (every data
    block read and checked), in the compaction subprocess, at its lower priority and outside
    this process's GIL. Raises as ``check_sst`` does: :class:`~silt.errors.CorruptionError`
    (same object name, offset and detail) or :class:`~silt.errors.NotFoundError`; any other
    failure, the worker's death included, as a :class:`~silt.errors.StoreError` (the check
    can be tried again). Call only when :func:`can_check_elsewhere` says so."""
    root = _file_root(store)
    assert root is not None
    kind, payload = _ask(("check", (root, key, info)), metrics,
                         "the check is tried again by a later commit")
    if kind == "corrupt":
        raise CorruptionError(*payload)
    if kind == "missing":
        raise NotFoundError(payload)
    if kind == "error":
        raise payload


def _ask(message: tuple[str, tuple[Any, ...]], metrics: Metrics,
         retry: str) -> tuple[str, Any]:
    """Send one request to the worker (started if need be) and wait for its outcome, without
    the GIL; the worker's requests are added to ``metrics`` under the current purpose. A worker
    that died is stopped (the next request starts another) and reported as a StoreError that
    ends with ``retry``."""
    with _lock:
        proc = _worker()
        try:
            _send(proc, message)
            assert proc.stdout is not None
            outcome = pickle.load(proc.stdout)  # blocks without the GIL
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            _stop(proc)
            raise StoreError(f"the compaction subprocess died ({type(exc).__name__}); "
                             + retry) from None
    kind, payload, requests = outcome
    for (_, op), (count, nbytes) in requests.items():
        entry = metrics.requests[(metrics.current_purpose(), op)]
        entry[0] += count
        entry[1] += nbytes
    return kind, payload


def serve() -> None:
    """The worker's loop: one request per message on stdin (``(kind, arguments)``, a kind of
    :data:`_JOBS`), its outcome on stdout, until stdin
    ends (the writer closed it or is gone). A watchdog ends the worker as soon as the writer
    process is gone, even in the middle of a task (its half-written outputs are garbage that
    GC removes)."""
    inp: IO[bytes] = sys.stdin.buffer
    out: IO[bytes] = sys.stdout.buffer
    sys.stdout = sys.stderr  # the protocol owns stdout
    parent = os.getppid()
    # Background work yields the CPU to the foreground: a merge takes what the writer's own
    # threads and processes (a stream's tasks) leave (NICE, applied by _BOOT before any import).

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="silt-compact-watch", daemon=True).start()
    while True:
        try:
            request = pickle.load(inp)
        except EOFError:
            return
        kind, args = request
        pickle.dump(_JOBS[kind](*args), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


def _compact(root: str, manifest_data: bytes, task: CompactionTask,
             settings: Settings) -> tuple[str, Any, dict[tuple[str, str], list[int]]]:
    """In the worker: run the task against ``root``; ``("ok", record bytes, requests)`` or
    ``("error", exception, requests)``."""
    from .compactor import run_compaction

    metrics = Metrics()
    store = MeteredStore(FileStore(root), metrics)
    try:
        with metrics.purpose("compaction"):
            manifest = Manifest.decode(manifest_data, "manifest from the writer")
            record = run_compaction(store, manifest, task, settings, Clock())
        return "ok", record.encode(), dict(metrics.requests)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            exc = StoreError(f"compaction failed: {type(exc).__name__}: {exc}")
        return "error", exc, dict(metrics.requests)


def _check(root: str, key: str, info: SstInfo) -> tuple[str, Any, dict[tuple[str, str], list[int]]]:
    """In the worker: ``check_sst`` of ``key`` with every block; ``("ok", None, requests)``,
    ``("corrupt", (object name, offset, detail), requests)``, ``("missing", message,
    requests)`` or ``("error", exception, requests)``."""
    from ..sst.check import check_sst

    metrics = Metrics()
    store = MeteredStore(FileStore(root), metrics)
    try:
        with metrics.purpose("compaction"):
            check_sst(store, key, info, blocks=True)
        return "ok", None, dict(metrics.requests)
    except CorruptionError as exc:
        return "corrupt", (exc.object_name, exc.offset, exc.detail), dict(metrics.requests)
    except NotFoundError as exc:
        return "missing", str(exc), dict(metrics.requests)
    except Exception as exc:
        return "error", StoreError(f"check of {key} failed: {type(exc).__name__}: {exc}"), \
            dict(metrics.requests)


#: What the worker runs, by the kind a request names.
_JOBS = {"compact": _compact, "check": _check}
