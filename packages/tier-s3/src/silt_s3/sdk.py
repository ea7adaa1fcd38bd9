"""One botocore data loader per process, and one client per configuration, shared by every
store this tier opens.

Building an S3 client reads and decodes botocore's service model and endpoint rules (several
MB of JSON): about 0.25 s of CPU each time, which botocore caches per *session*. silt opens a
store per root it touches: a query's build on the driver opens its root several times, and each
Spark task opening a shard on a fresh worker opens one. With a new boto3 session per store, each
of those paid the decoding again (measured: four opens in a restarted query's build, 1.07 s of
its 1.46 s on S3). Sessions made here share one :class:`botocore.loaders.Loader`, whose cache
holds the decoded models, so only a process's first client pays it; each session keeps its own
credentials, profile and region. The models are read-only to botocore (its own session shares
them between all its clients in the same way).

Even with the models decoded, building a client costs about 0.1 s of CPU (its endpoint rules,
event handlers and request signer), and a Spark worker opened two per shard task on a fresh
process (the root's origin check, then the shard): measured on S3 behind a 20 ms proxy, 0.7 to
1.8 s of a restarted worker's first task went to its first stores. :func:`shared_client` keeps
one client per *configuration* for the process: the options that shape the client (endpoint,
region, profile, credentials named in the options, timeouts, retries, pool size, checksums,
TLS verification) and every ``AWS_*`` environment variable (the standard credential chain
reads them), so stores that would have built identical clients get the same one. botocore's
clients are thread-safe, and their connection pool (``max_pool_connections``) is then shared by
those stores. The key is a SHA-256 digest, so the table holds no secret. A forked child never
uses its parent's clients (their sockets belong to the parent): it starts an empty table, with
new locks (a fork while another thread builds a client, as a Spark task's origin check does on
a thread, would otherwise leave the child a lock no thread of it can release).
Closing a store leaves a shared client open for the process's other stores;
:func:`forget_clients` closes them all.

A ``boto3.Session`` or client given in code (``S3Store(session=...)``, ``client=``) is used as it
is and never shared.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from typing import Any

import botocore.loaders
import botocore.session

_lock = threading.Lock()
_loader: botocore.loaders.Loader | None = None
#: Clients by configuration digest (:func:`shared_client`), and the process they belong to.
_clients: dict[str, Any] = {}
_clients_pid = os.getpid()
#: Guards the table (its own lock: building a client takes :data:`_lock` for the loader).
_clients_lock = threading.Lock()


def _after_fork() -> None:
    """In a forked child: new locks and an empty table (see the module docstring); the
    loader's decoded models are the parent's, read-only, and kept."""
    global _lock, _clients_lock, _clients_pid
    _lock = threading.Lock()
    _clients_lock = threading.Lock()
    _clients.clear()
    _clients_pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork)


def shared_loader() -> botocore.loaders.Loader:
    """The process's botocore data loader (made on first use)."""
    global _loader
    with _lock:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
        return _loader


def session(profile: str | None) -> botocore.session.Session:
    """A new botocore session (the standard credential and config chain, ``profile`` if
    given) that loads service models through :func:`shared_loader`."""
    made = botocore.session.Session(profile=profile)
    made.register_component("data_loader", shared_loader())
    return made


def region(made: Any) -> str | None:
    """The region a session's configuration names (environment, profile), if any."""
    return made.get_config_variable("region")


def environment() -> tuple[tuple[str, str], ...]:
    """Every ``AWS_*`` environment variable (name, value), sorted: what the standard credential
    and configuration chain may read, so part of a shared client's configuration."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))


def configuration_digest(parts: tuple[Any, ...]) -> str:
    """The SHA-256 of ``parts`` (a client's configuration, secrets included) and of
    :func:`environment`: the key of :func:`shared_client`'s table."""
    return hashlib.sha256(repr((parts, environment())).encode()).hexdigest()


def shared_client(digest: str, make: Callable[[], Any]) -> Any:
    """The process's client for configuration ``digest`` (:func:`configuration_digest`), made
    by ``make`` the first time (under a lock: concurrent first opens build it once). In a
    forked child the parent's clients are dropped unclosed (their sockets are the parent's)."""
    global _clients_pid
    with _clients_lock:
        if _clients_pid != os.getpid():
            _clients.clear()
            _clients_pid = os.getpid()
        client = _clients.get(digest)
        if client is None:
            client = _clients[digest] = make()
        return client


def is_shared(client: Any) -> bool:
    """Whether ``client`` is in this process's table (a store must not close it)."""
    with _clients_lock:
        return _clients_pid == os.getpid() and any(c is client for c in _clients.values())


def forget_clients() -> None:
    """Close and drop this process's shared clients (stores still open keep theirs, and their
    next request opens new connections); the next store builds a new one."""
    with _clients_lock:
        mine = _clients_pid == os.getpid()
        clients = list(_clients.values())
        _clients.clear()
    if mine:
        for client in clients:
            client.close()
