"""A TCP fault proxy for tests: sits between an SDK and its server and breaks requests on cue.

It forwards bytes, nothing more, so it works for any HTTP/1.1 SDK and server (boto3 and moto,
google-cloud-storage and fake-gcs-server, azure-storage-blob and Azurite) and passes interim
answers such as ``100 Continue`` through as they come::

    with FaultProxy(server_url) as proxy:          # proxy.url -> http://127.0.0.1:<port>
        proxy.fault("truncate", match=b"GET ", keep=2000)    # next GET: cut the response
        proxy.fault("lose_response", match=b"If-None-Match") # next conditional write
        proxy.fault("reset", times=3)                        # next three requests
        proxy.fault("blackhole", times=None)                 # every request from now on
        proxy.latency = 0.05; proxy.bandwidth = 1_000_000    # every response
        proxy.clear()

Per-request faults (``fault(mode, ...)``), checked in the order added; the first rule whose
``match`` occurs in the request's first bytes (request line and headers) fires and uses up one
of its ``times`` (``None``: unlimited):

* ``reset``: the request never reaches the server; the client's connection is reset (RST).
* ``lose_response``: the request reaches the server, which acts on it; when its answer starts
  coming back the client's connection is reset instead. This is what makes a create-only
  write ambiguous.
* ``truncate``: the first ``keep`` bytes of the answer (status line and headers included) reach
  the client, then the connection is closed (``rst=True`` resets it instead of a clean close).
* ``blackhole``: the request is swallowed and never answered; the connection stays open until
  the client gives up or the proxy stops.
* ``delay``: the answer is held back ``seconds`` before it is forwarded.

Connection-wide settings: ``latency`` (seconds added before each answer), ``tail``
(``(probability, seconds)``: that many seconds more before an answer, with that probability: a
latency tail) and ``bandwidth`` (bytes per second in each direction, 0 = unlimited).

Simplified on purpose: a request is recognised by a chunk from the client that starts with an
HTTP method (``GET``, ``PUT``, ...); a request body that happens to start with one would be
taken for a request (no test body does). Requests are not pipelined by any SDK used here.

Thread safety: the proxy runs one accept thread and two threads per connection; ``fault``,
``clear`` and the counters may be used from any thread.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MODES = ("reset", "lose_response", "truncate", "blackhole", "delay")
_METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ", b"PATCH ", b"OPTIONS ")
_CHUNK = 64 * 1024


@dataclass
class Rule:
    """One scheduled fault. ``fired`` counts how often it fired."""

    mode: str
    match: bytes | Callable[[bytes], bool] | None
    times: int | None
    keep: int = 0
    rst: bool = False
    seconds: float = 0.0
    fired: int = 0

    def matches(self, head: bytes) -> bool:
        if self.match is None:
            return True
        if callable(self.match):
            return bool(self.match(head))
        return self.match in head


@dataclass(eq=False)
class _Conn:
    client: socket.socket
    upstream: socket.socket
    response_rule: Rule | None = None
    swallowing: bool = False
    sent: int = 0
    closed: threading.Event = field(default_factory=threading.Event)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST instead of a FIN.

    ``SHUT_RD`` first wakes the other pump thread blocked in ``recv`` on this socket (on Linux a
    plain ``close`` would wait for that call, and neither RST nor FIN would be sent meanwhile);
    it sends nothing to the peer. The last close, with a zero linger time, sends the RST.
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def _close(sock: socket.socket) -> None:
    """Close ``sock`` cleanly (FIN), waking any thread blocked on it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class FaultProxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream`` (``"http://host:port"`` or ``(host, port)``)
    and inject the faults a test schedules. See the module docstring."""

    def __init__(self, upstream: str | tuple[str, int], *, host: str = "127.0.0.1") -> None:
        if isinstance(upstream, str):
            parts = urlsplit(upstream)
            if not parts.hostname or not parts.port:
                raise ValueError(f"upstream URL needs a host and a port, got {upstream!r}")
            upstream = (parts.hostname, parts.port)
        self.upstream = upstream
        self.host = host
        self.latency = 0.0
        self.bandwidth = 0
        #: ``(probability, seconds)``: each answer is held back ``seconds`` more with this
        #: probability (a latency tail; drawn from ``tail_random``, seedable).
        self.tail: tuple[float, float] = (0.0, 0.0)
        self.tail_random = random.Random(0)
        #: Requests seen, faults fired per mode, connections accepted.
        self.counts: Counter[str] = Counter()
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.port = 0

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(128)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close every open connection."""
        self._stopping.set()
        if self._listener is not None:
            _close(self._listener)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._drop(conn)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start() if self._listener is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- scheduling ----------------------------------------------------------------------------

    def fault(
        self,
        mode: str,
        *,
        match: bytes | str | Callable[[bytes], bool] | None = None,
        times: int | None = 1,
        keep: int = 0,
        rst: bool = False,
        seconds: float = 0.0,
    ) -> Rule:
        """Schedule ``mode`` for the next ``times`` requests whose head contains ``match``."""
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r}; expected one of {MODES}")
        if isinstance(match, str):
            match = match.encode()
        rule = Rule(mode, match, times, keep=keep, rst=rst, seconds=seconds)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every scheduled fault and connection-wide setting; cut live connections so
        that a swallowed request does not linger."""
        with self._lock:
            self._rules.clear()
            conns = [c for c in self._conns if c.swallowing]
        self.latency = 0.0
        self.bandwidth = 0
        for conn in conns:
            self._drop(conn)

    def _take(self, head: bytes) -> Rule | None:
        with self._lock:
            self.counts["requests"] += 1
            for rule in self._rules:
                if rule.matches(head):
                    rule.fired += 1
                    self.counts[rule.mode] += 1
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times <= 0:
                            self._rules.remove(rule)
                    return rule
        return None

    # --- machinery -----------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client, upstream)
            with self._lock:
                self.counts["connections"] += 1
                self._conns.add(conn)
            threading.Thread(target=self._pump_requests, args=(conn,), daemon=True).start()
            threading.Thread(target=self._pump_responses, args=(conn,), daemon=True).start()

    def _drop(self, conn: _Conn, *, reset: bool = False) -> None:
        if conn.closed.is_set():
            return
        conn.closed.set()
        with self._lock:
            self._conns.discard(conn)
        (_reset if reset else _close)(conn.client)
        _close(conn.upstream)

    def _throttle(self, size: int) -> None:
        if self.bandwidth > 0:
            time.sleep(size / self.bandwidth)

    def _pump_requests(self, conn: _Conn) -> None:
        """Client -> server: spot request starts and apply the matching rule."""
        try:
            while not conn.closed.is_set():
                data = conn.client.recv(_CHUNK if not self.bandwidth else 16 * 1024)
                if not data:
                    with contextlib.suppress(OSError):
                        conn.upstream.shutdown(socket.SHUT_WR)
                    return
                if data.startswith(_METHODS):
                    conn.swallowing = False
                    rule = self._take(data)
                    if rule is not None and rule.mode == "reset":
                        self._drop(conn, reset=True)
                        return
                    if rule is not None and rule.mode == "blackhole":
                        conn.swallowing = True
                    conn.response_rule = rule
                    conn.sent = 0
                if conn.swallowing:
                    continue
                self._throttle(len(data))
                conn.upstream.sendall(data)
        except OSError:
            self._drop(conn)

    def _pump_responses(self, conn: _Conn) -> None:
        """Server -> client: pass interim answers, then fault or forward the final answer."""
        try:
            while not conn.closed.is_set():
                data = conn.upstream.recv(_CHUNK if not self.bandwidth else 16 * 1024)
                if not data:
                    with contextlib.suppress(OSError):
                        conn.client.shutdown(socket.SHUT_WR)
                    return
                rule = conn.response_rule
                while rule is not None and conn.sent == 0 and data.startswith(b"HTTP/1.1 1"):
                    # Interim answers (100 Continue; werkzeug sends two) go through untouched.
                    end = data.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    conn.client.sendall(data[: end + 4])
                    data = data[end + 4 :]
                if not data:
                    continue
                if rule is not None and rule.mode == "lose_response":
                    self._drop(conn, reset=True)
                    return
                if rule is not None and rule.mode == "truncate":
                    room = rule.keep - conn.sent
                    if room > 0:
                        conn.sent += min(room, len(data))  # before sending, as below
                        conn.client.sendall(data[:room])
                    if conn.sent >= rule.keep:
                        self._drop(conn, reset=rule.rst)
                        return
                    continue
                if conn.sent == 0:
                    delay = self.latency + (rule.seconds if rule and rule.mode == "delay" else 0)
                    share, extra = self.tail
                    if share:
                        with self._lock:
                            slow = self.tail_random.random() < share
                        delay += extra if slow else 0.0
                    if delay:
                        time.sleep(delay)
                self._throttle(len(data))
                # Counted before it is sent: once the client has the whole answer it may send its
                # next request, whose pump resets ``sent`` to 0; counting after ``sendall`` could
                # land after that reset and let the next answer skip its fault.
                conn.sent += len(data)
                conn.client.sendall(data)
        except OSError:
            self._drop(conn)
