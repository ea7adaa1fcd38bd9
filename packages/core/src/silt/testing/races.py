"""Create-only races for the conformance suite: contenders released together on
``put_if_absent``, round after round, in threads and in processes.

A ``put_if_absent`` that checks and then writes (``if not exists: put``) loses a race only when
two contenders fall into the gap between check and write. One round of a few threads hits that
gap by luck; so each race here runs many rounds, each on a fresh key, with every contender held
at a barrier until all are ready, and the suite runs it both in threads and in processes (a
lock taken inside one process hides the gap from its threads, not from another process).

A race stops at the first round that had other than one winner (the barrier's action, run once
all contenders are back, checks it), so a broken tier fails in a round or two while a correct
one plays every round.

No pytest here: a contender process imports this module only. ``outcome`` turns the results
into a report that shows every wrong round (which contenders won, what the key holds).
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..store import ObjectStore

#: Seconds a contender waits at a barrier, or the suite for a contender process, before the
#: race is declared stuck.
WAIT_SECONDS = 120.0


def payload(contender: int, round_: int) -> bytes:
    """What contender ``contender`` writes in round ``round_``: distinct for every writer and of
    different lengths, so the stored bytes name the writer whose object survived."""
    return f"contender-{contender}-round-{round_}|".encode() * (1 + contender % 4)


class _Rounds:
    """What the contenders share: wins per round, and whether to stop. ``wins`` and ``stop``
    are lists in threads, shared arrays between processes."""

    def __init__(self, wins: Any, stop: Any, lock: Any) -> None:
        self.wins, self.stop, self.lock = wins, stop, lock
        self.round = 0

    def check(self) -> None:
        """The barrier's action, run by one contender once all are back: stop after a round
        without exactly one winner."""
        if self.round and self.wins[self.round - 1] != 1:
            self.stop[0] = 1

    def play(self, store: ObjectStore, keys: Sequence[str], i: int, barrier: Any,
             report: Any) -> list[Any]:
        """Contender ``i``'s rounds: wait at ``barrier``, stop if told, else one
        ``put_if_absent``; ``report(exc)`` is what an exception is recorded as."""
        got: list[Any] = []
        for r, key in enumerate(keys):
            self.round = r
            barrier.wait(WAIT_SECONDS)
            if self.stop[0]:
                break
            try:
                won = store.put_if_absent(key, payload(i, r))
            except Exception as exc:  # reported by outcome(), with the round
                got.append(report(exc))
                continue
            got.append(won)
            if won is True:
                with self.lock:
                    self.wins[r] += 1
        return got


def _rows(by_contender: list[list[Any]]) -> list[list[Any]]:
    """``results[round][contender]`` for the rounds every contender played."""
    played = min(len(got) for got in by_contender)
    return [[got[r] for got in by_contender] for r in range(played)]


def race_in_threads(store: ObjectStore, keys: Sequence[str], contenders: int
                    ) -> list[list[Any]]:
    """``contenders`` threads each call ``put_if_absent(keys[r], payload(i, r))`` in round
    ``r``, all released together by a barrier. Returns ``results[r][i]``: what contender ``i``
    got in round ``r`` (the return value, or the exception raised), for the rounds played."""
    shared = _Rounds([0] * len(keys), [0], threading.Lock())
    barrier = threading.Barrier(contenders, action=shared.check)

    def contend(i: int) -> list[Any]:
        try:
            return shared.play(store, keys, i, barrier, lambda exc: exc)
        except BaseException:
            barrier.abort()
            raise

    with ThreadPoolExecutor(contenders, thread_name_prefix="silt-race") as pool:
        return _rows(list(pool.map(contend, range(contenders))))


def _contend_in_process(source: Any, i: int, keys: Sequence[str], barrier: Any,
                        shared: _Rounds, conn: Any) -> None:
    """A contender process: the store (pickled, or inherited through ``fork``), then its
    rounds, results sent back through ``conn``."""
    try:
        store = pickle.loads(source) if isinstance(source, bytes) else source
        got = shared.play(store, keys, i, barrier, lambda exc: f"{type(exc).__name__}: {exc}")
        conn.send(("ok", got))
        if isinstance(source, bytes):
            store.close()
    except BaseException:
        barrier.abort()
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _context() -> Any:
    """``fork`` where the platform has it (a contender starts in milliseconds and may use the
    parent's store as inherited), else ``spawn``."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def race_in_processes(store: ObjectStore, keys: Sequence[str], contenders: int
                      ) -> list[list[Any]]:
    """As :func:`race_in_threads`, with each contender a process of its own.

    The store goes to each process pickled when it pickles (a fresh client there: how a Spark
    task gets one); otherwise a forked process uses the store it inherited, so a tier whose
    handles must not cross a ``fork`` (a SQLite connection, a pool of sockets) either pickles
    or opens new ones in a new process (it compares ``os.getpid()``). Raises ``RuntimeError``
    with the contender's traceback if one failed outside ``put_if_absent``."""
    ctx = _context()
    try:
        source: Any = pickle.dumps(store)
    except Exception as exc:
        if ctx.get_start_method() != "fork":
            raise RuntimeError(
                f"{store!r} cannot be pickled ({exc}), and without fork it cannot reach another "
                "process: make it picklable, or declare shared_across = 'process'"
            ) from exc
        source = store
    shared = _Rounds(ctx.Array("i", len(keys), lock=False), ctx.Array("b", 1, lock=False),
                     ctx.Lock())
    barrier = ctx.Barrier(contenders, action=shared.check)
    pipes = [ctx.Pipe(duplex=False) for _ in range(contenders)]
    procs = [ctx.Process(target=_contend_in_process, args=(source, i, keys, barrier, shared, send),
                         daemon=True) for i, (_, send) in enumerate(pipes)]
    for proc in procs:
        proc.start()
    answers: list[Any] = []
    try:
        for i, (recv, send) in enumerate(pipes):
            send.close()
            if not recv.poll(WAIT_SECONDS + 30):
                raise RuntimeError(f"contender process {i} sent nothing in {WAIT_SECONDS:g} s")
            answers.append(recv.recv())
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    errors = [f"contender process {i}:\n{text}" for i, (kind, text) in enumerate(answers)
              if kind == "error"]
    if errors:
        raise RuntimeError("a contender process failed:\n" + "\n".join(errors))
    return _rows([got for _, got in answers])


def outcome(store: ObjectStore, keys: Sequence[str], results: list[list[Any]]) -> list[str]:
    """The wrong rounds of a race, one line each (empty when every round had exactly one
    winner, every other contender got ``False`` and the key holds the winner's bytes; a race
    that stopped early also says how many rounds it played)."""
    wrong = []
    for r, (key, got) in enumerate(zip(keys[:len(results)], results, strict=True)):
        winners = [i for i, value in enumerate(got) if value is True]
        odd = {i: value for i, value in enumerate(got) if value is not True and value is not False}
        try:
            stored: Any = store.get(key)
        except Exception as exc:
            stored = f"{type(exc).__name__}: {exc}"
        expected = payload(winners[0], r) if len(winners) == 1 else None
        if len(winners) != 1 or odd or stored != expected:
            holder = [i for i in range(len(got)) if stored == payload(i, r)]
            wrong.append(
                f"round {r}, key {key!r}: put_if_absent returned True to contenders {winners} "
                f"(exactly one must win){f'; other answers {odd}' if odd else ''}; the key "
                f"holds {stored!r}" + (f" (contender {holder[0]}'s bytes)" if holder else "")
            )
    if wrong and len(results) < len(keys):
        wrong.append(f"(the race stopped after {len(results)} of {len(keys)} rounds)")
    return wrong


__all__ = ["WAIT_SECONDS", "outcome", "payload", "race_in_processes", "race_in_threads"]
