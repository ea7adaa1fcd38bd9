"""Finding the latest version not greater than a number from an open DB's version, with GETs
instead of a LIST when that can be proved right (:meth:`silt.DB.advance`,
:meth:`silt.DB.advance_newer`, :meth:`silt.DB.catch_up`).

A listing of ``manifest/`` answers "the latest live version ``<= at_most``" for any root
(:func:`latest_at_most`: one LIST of manifests, one GET per fate record, one of the manifest).
A handle that already holds version ``v`` and knows the GC markers (:mod:`silt.markers`, read by
its last commit) can often answer with GETs (:func:`probe_at_most`, :func:`probe_latest`), in
rounds whose requests go out at once (``gather``: on the DB's read pool for a remote store):
three when ``manifest/<at_most>`` is live, one more when it is missing, more only when a
manifest found was withdrawn (below):

1. the manifests of ``at_most``, ``at_most - 1``, ... down to ``v + 1``, at most :data:`PROBES`
   numbers: ``manifest/<at_most>`` alone first (a shard is usually behind by one batch another
   process committed, and this keeps that case at one GET), then, when it is missing, all the
   other numbers at once. A number inside a range a reservation skipped, or one never
   committed, has no manifest. A manifest the caller read already (``seen``:
   :meth:`silt.DB.catch_up` reads ``v``'s successor first, to learn whether anything is newer
   at all) is not read again;
2. the fate record (:mod:`silt.versions`) of the greatest manifest found, judged exactly as a
   listing judges it: a withdrawn version (or a manifest a settled record of another token
   withdraws) is skipped, a reservation (``skip_to``) is a version with its base's state; not
   withdrawn, it is the answer. With :func:`probe_latest`, in the same round, the name of its
   ``next_version`` (a 1-byte ranged GET): missing, it proves that nothing was committed after
   the answer (see :meth:`silt.commit.Committer.nothing_after`: every commit on top of a
   version creates that name first, a commit that skips numbers by reserving it). When it is
   withdrawn (rare), the next manifest found is judged the same way (a round more each), then
   the numbers not probed yet, and nothing is proved about versions after the answer (a
   withdrawn manifest is after it: list);
3. when no live manifest is found and every number down to ``v + 1`` was probed, the answer is
   ``v`` itself, once its fate record shows it was not withdrawn since (its GET, and with
   :func:`probe_latest` the GET of ``v``'s ``next_version`` name when that is above
   ``at_most``; below it, round 1 already found it missing);
4. last, one GET of the next GC epoch's name (:func:`silt.markers.unchanged`): while it does not
   exist no GC pass has begun its last listing of manifests since the markers were read, so a
   missing manifest, name or fate record in the rounds before was never created, not
   collected; and nothing was deleted during them.

A round's requests may complete in any order; the next round starts when all have returned.

Why the order of the requests is safe. Every object read here is create-only, and while the
epoch GET, issued after every other request has returned, finds no new epoch, nothing under
``manifest/`` was deleted since the markers were read (before any request here): in that
window a name seen existing exists for the rest of it, and a name seen missing was missing at
every earlier moment of it. So:

* a fate record is read only after its manifest was seen (round 2 after round 1; ``v``'s own
  was seen when the handle installed it): a writer withdraws a version by creating its fate
  record after its manifest exists, so a missing record read after the manifest was seen
  means the manifest was not withdrawn at the moment it was seen, or later up to that read.
  Read at once with the manifest, the record could be missed and the manifest then created
  and withdrawn before the manifest's GET returned;
* the ``next_version`` name of the answer is read only after the answer's manifest was seen
  (the same round as its fate record: the two do not depend on each other). At the earlier of
  the two reads' moments, the answer existed (seen before), was not withdrawn (its record was
  missing then or later) and had no successor (missing then or later): so the answer
  ``(version, nothing after it)`` held at that one moment, whatever the moments of the probes
  of round 1. Read at once with the manifest, the name could be missing because the answer
  itself did not exist yet;
* manifests of different numbers are probed at once: each probe says what a listing would say
  of that name at that moment (a listing's own entries are no more simultaneous). When the
  answer is proved latest, the point above covers every number above it anyway;
* the epoch GET comes last: GC deletes a withdrawn manifest, then its fate record, only after
  bumping the epoch; an epoch read before another GET would not cover a deletion seen by it.

Why a GC pass still running (or one that crashed and never wrote ``.done``) does not stop
the probes. The epoch argument above covers a pass that *begins* deleting after the markers were
read. A pass that had begun before may be deleting now, and it bumps the epoch again only when
it is done (:func:`silt.gc.collect_garbage`): while it runs, an unchanged epoch does not say
that nothing is being deleted, which is why these probes once refused to answer while any pass
marker lacked its ``.done`` (and a crashed pass, whose marker is dropped only after
:data:`silt.gc.ABANDONED_PASS_MS`, so made every advance list for a week). But such a pass
deletes, under ``manifest/``, only manifests and fate records of numbers below its horizon, and
it writes its horizon marker (or finds a greater one, which is never deleted) and then bumps the
epoch before it deletes anything. The markers list ``gc/`` after reading the epoch: a pass whose
bump the markers' epoch includes had written its horizon marker before that listing, so the
known horizon is at least the pass's; a pass whose bump they do not include is the epoch case
above. Every number read here is ``v`` or above it, and ``v`` is at least the known horizon
(else no answer): no pass whose marker was seen deletes any of them. So a running or dead pass
costs nothing here; the one listing that follows a GC pass is the advance that finds the epoch
moved, which also reads the markers again (:meth:`silt.commit.Committer.relearn_markers`), so
the next advance probes again.

It answers nothing (so the caller lists) when it cannot prove the answer: the GC markers are
not known, ``v`` is below the GC horizon (GC may be collecting around it), ``at_most`` is below
``v``, more than :data:`PROBES` numbers would need a probe, ``v`` was withdrawn, or the epoch
moved. A commit from the version found then runs the same checks after it as any other
(:mod:`silt.commit`): the horizon, rollback and the base's SSTs.

What the DB's methods pay (:func:`follow` does their work; the DB installs what it finds):

* :meth:`~silt.DB.advance`: on a handle that committed before (so it knows the GC markers) and
  whose answer lies at most :data:`PROBES` numbers above its version, GETs only: the manifest
  and fate record of each number probed from ``at_most`` down (one GET when absent), or of the
  handle's own version when nothing newer exists, and one GET of the next GC epoch's name,
  which proves that GC changed nothing meanwhile; otherwise, or when any of that does not
  hold, one LIST as :func:`silt.open`. On a remote store, GETs that do not depend on one
  another go out at once (on the read pool): three round trips when ``manifest/<at_most>`` is
  live (it; its fate record; the epoch), at most one more when it is missing (the other
  numbers at once). Requests count under the purpose ``open``; the metrics ``advances`` and
  ``advances_listed`` count the calls and those that listed.
* :meth:`~silt.DB.advance_newer`: on the GETs path of ``advance``, one ranged GET more, in the
  same round as the fate record of the version found (so no more round trips): of the name the
  version after it would take, whose absence, under the same epoch GET, proves that nothing
  is newer. A stream processor's shard that another worker process moved past by one batch so
  pays 4 requests in 3 round trips (``manifest/<at_most>``; its fate record and
  ``manifest/<at_most + 1>``; the epoch) where ``advance`` then ``newer_versions`` paid 5 in 5.
  One LIST, which answers both, when ``advance`` lists; one LIST for the versions after it
  when that name exists (something newer, or withdrawn, does).
* :meth:`~silt.DB.catch_up`: when nothing is newer than the handle's version (``<= at_most``),
  the handle stays and the answer is ``(version, [])`` as :meth:`~silt.DB.proved_latest`
  proves it: the name the next version would take is missing, then the next GC epoch is (2
  GETs of missing objects, one after the other). As there, the version's own fate record is
  not read: a handle that committed the version resolved that commit itself (its writer's
  withdrawal would have raised there); a withdrawal of a version it moved to, by that
  version's writer since, is not seen here, exactly as ``proved_latest`` does not see it
  (``advance_newer`` reads the record). Otherwise the answer is ``advance_newer``'s, proved
  the same way, and the request that shows another writer moved on is the first read of the
  advance, not one more before it: another process committed the version after it, which is
  ``at_most``: 4 GETs in 3 round trips, where ``proved_latest`` then ``advance_newer`` pay 5
  in 4. A handle that never committed lists (it knows no GC markers); the metric
  ``advances`` counts the calls that did not stay.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from . import handoff, paths
from .errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from .gather import Gather, serially
from .manifest import Manifest
from .markers import GcMarkers, unchanged
from .store import ObjectStore, retrying
from .versions import list_versions, read_fate, read_manifest

if TYPE_CHECKING:
    from .commit import Committer
    from .graces import Announcer
    from .metrics import Metrics
    from .state import TreeState

#: Version numbers below ``at_most`` a warm advance probes with GETs (two each when the
#: manifest exists, one when it does not) before it lists instead. A stream processor's shard
#: is usually behind by one or two batches of another worker process; idle batches leave gaps.
PROBES = 3


def check_at_most(at_most: Any) -> None:
    """Refuse an ``at_most`` that is not an int in ``-1..paths.MAX_VERSION`` (-1: nothing)."""
    if isinstance(at_most, bool) or not isinstance(at_most, int):
        raise InvalidTypeError(f"at_most must be an int version, got {type(at_most).__name__}")
    if not -1 <= at_most <= paths.MAX_VERSION:
        raise InvalidArgumentError(
            f"at_most must be between -1 (open empty) and {paths.MAX_VERSION}, got {at_most}"
        )


class Following:
    """The version following of one DB (:meth:`silt.DB.advance`, :meth:`silt.DB.advance_newer`,
    :meth:`silt.DB.catch_up`, :meth:`silt.DB.newer_versions`, :meth:`silt.DB.proved_latest`),
    and the handoff of its warm state to another process (:meth:`silt.DB.handoff`,
    :meth:`silt.DB.take_handoff`, :func:`silt.resume`: :mod:`silt.handoff`, no request)
    over its state ``state`` (:class:`silt.state.TreeState`), its commit protocol's GC markers
    and lineage ``committer`` and its ``gather``; ``url`` names the DB in messages. The DB's
    writer lock serializes :meth:`advance` and the handoffs; the others only read."""

    def __init__(self, state: TreeState, url: str, store: ObjectStore, metrics: Metrics,
                 committer: Committer, gather: Gather, announce: Announcer) -> None:
        self._state = state
        self._announce = announce
        self._url = url
        self._store = store
        self._metrics = metrics
        self._committer = committer
        self._gather = gather

    def proved_latest(self) -> bool:
        """Whether two GETs prove that nothing is newer than the base version."""
        base = self._state.manifest
        return base is not None and self._committer.nothing_after(base)

    def newer_versions(self) -> list[int]:
        """The committed versions after the base, ascending: none when
        :meth:`proved_latest`, else one LIST."""
        if self.proved_latest():
            return []
        base = self._state.manifest
        return [v for v in list_versions(self._store).versions
                if base is None or v > base.version]

    def advance(self, at_most: int, *, newer: bool, stay: bool = False) -> list[int] | None:
        """Move the state to the latest committed version ``<= at_most`` that :func:`follow`
        finds, keeping the open readers of the SSTs both versions share; return the committed
        versions after it when known (always with ``newer``). Refuses a state that holds
        uncommitted writes (memtable, parts, a range delete numbered after its base),
        references or an unresolved commit."""
        check_at_most(at_most)
        self._check_settled("advance()")
        state, committer = self._state, self._committer
        base = state.manifest
        found, after = follow(self._store, self._metrics, committer, base, at_most,
                              self._gather, newer=newer, stay=stay)
        if found is not base:
            state.move_to(found)
        return after

    def _settled(self) -> bool:
        """Whether the state holds no uncommitted writes (memtable, parts, a range delete
        numbered after its base), references or an unresolved commit or withdrawal."""
        state, committer = self._state, self._committer
        base, view = state.manifest, state.view
        return not (len(view.mem) or view.parts or state.refs
                    or committer.uncertain is not None or committer.withdrawing is not None
                    or state.seq > (base.seq if base is not None else 0))

    def _check_settled(self, what: str) -> None:
        if not self._settled():
            raise InvalidArgumentError(
                f"{self._url!r} has uncommitted writes (or a commit whose outcome is not "
                f"known yet): {what} would drop them. Commit first, or close the DB and "
                "open it again"
            )

    def handoff(self, url: str, scope: str) -> bytes | None:
        """The record of this handle's warm state (:mod:`silt.handoff`) for the DB at ``url``
        in ``scope``; ``None`` unless the handle committed its base itself, its checks passed
        and nothing is pending (the record's safety argument rests on that)."""
        base, committer = self._state.manifest, self._committer
        if (base is None or committer.markers is None or committer.confirmed != base.version
                or committer.fenced is not None or not self._settled()
                or (committer.lineage, committer.next) != (base.version, base.next_version)):
            return None
        own = self._announce
        known = own.announced or own.grace_ms in committer.markers.graces
        return handoff.encode(url, scope, base, committer.markers,
                              own.grace_ms if known else None)

    def take_handoff(self, url: str, data: Any, version: int, scope: str) -> bool:
        """Install the record ``data`` of ``version`` of ``url`` in ``scope`` (no request):
        ``False``, the handle unchanged, when :func:`silt.handoff.decode` refuses it, the
        handle is fenced, or the GC markers it knows put the version below the horizon.
        Refuses a handle with uncommitted writes as :meth:`advance` does."""
        self._check_settled("take_handoff()")
        try:
            handed = handoff.decode(data, url, scope, version)
        except handoff.Refused:
            self._metrics.add("handoffs_refused")
            return False
        known = self._committer.markers
        if self._committer.fenced is not None or (known is not None
                                                  and known.horizon > version):
            return False  # a fenced handle never commits; a version GC may collect: list
        self.install(handed)
        return True

    def install(self, handed: handoff.Handed) -> None:
        """Base the (settled) state on a verified record's version, with its GC markers when
        they are newer than the handle's own, the version checked as a base, and the writer
        grace the record says is announced (:mod:`silt.handoff`, "The writer grace")."""
        committer = self._committer
        if handed.grace is not None:
            self._announce.seen((handed.grace,))
        self._state.move_to(handed.manifest)
        if committer.markers is None or handed.markers.epoch >= committer.markers.epoch:
            committer.markers = handed.markers
        committer.base_checked = handed.manifest.version
        self._metrics.add("handoffs")


def follow(store: ObjectStore, metrics: Metrics, committer: Committer, base: Manifest | None,
           at_most: int, gather: Gather, *, newer: bool,
           stay: bool = False) -> tuple[Manifest | None, list[int] | None]:
    """The manifest of the latest committed version ``<= at_most`` seen from a handle at
    ``base`` (``None``: there is none), and the committed versions after it, ascending, when
    known (always with ``newer``). With ``stay``, first whether ``base`` is still the newest
    (``base, []``). The costs are in the module docstring."""
    markers = committer.markers
    seen: Manifest | None = None
    moved = False  # the GC epoch moved: GETs cannot prove anything, list
    if stay and base is not None and markers and markers.horizon <= base.version <= at_most:
        # proved_latest's two GETs, the first one reading the whole manifest when it
        # exists, as the advance's round 1 would
        with metrics.purpose("open"):
            seen = successor(store, base)
            if seen is None:
                if unchanged(store, markers):
                    return base, []  # nothing after it
                moved = True
    metrics.add("advances")
    after: list[int] | None = None  # the versions after the one found, when known
    with metrics.purpose("open"):
        probed: tuple[Manifest, bool] | None = None
        if base is not None and at_most >= 0 and not moved:
            if newer:
                probed = probe_latest(store, base, markers, at_most, gather, seen)
            else:
                got = probe_at_most(store, base, markers, at_most, gather)
                probed = None if got is None else (got, False)
        if probed is None:
            metrics.add("advances_listed")
            found, listed = latest_at_most(store, at_most, committer, gather)
            after = [v for v in listed if found is None or v > found.version]
        else:
            found, latest = probed
            if latest:
                after = []
            elif newer:  # a name after it exists: list what is newer
                after = [v for v in list_versions(store).versions if v > found.version]
    return found, after


def latest_at_most(store: ObjectStore, at_most: int | None,
                   committer: Committer | None = None,
                   gather: Gather = serially) -> tuple[Manifest | None, list[int]]:
    """The manifest of the latest live version ``<= at_most`` (any with ``None``), or ``None``
    when there is none, and every live version the listing found: one LIST, then the
    manifest and its fate record, at once through ``gather`` (the listing showed the manifest
    before the record is read: :func:`silt.versions.read_manifest`), so two round trips on
    a remote store. With the ``committer`` of a handle that knows the GC markers, they are
    read again when they changed (:meth:`~silt.commit.Committer.relearn_markers`), at once
    with the LIST: the next advance's probes need them read before *their* requests (the
    epoch GET that ends each probe vouches for what changed since), not before this listing."""
    def latest() -> tuple[Manifest | None, list[int]]:
        listed = list_versions(store).versions
        found = listed if at_most is None else [v for v in listed if v <= at_most]
        return (read_manifest(store, found[-1], listed=gather) if found else None), listed

    if committer is None:
        return latest()
    return gather([latest, committer.relearn_markers])[0]


def probe_at_most(store: ObjectStore, base: Manifest, markers: GcMarkers | None,
                  at_most: int, gather: Gather = serially) -> Manifest | None:
    """The manifest of the latest live version ``<= at_most``, found with GETs from ``base``
    (the handle's version, live when it was installed) and the GC markers ``markers`` known to
    the handle; ``None`` when that cannot be proved (then list: :func:`latest_at_most`). See
    the module docstring; ``gather`` runs the requests of one round."""
    landed = _probe(store, base, markers, at_most, gather, after=False)
    return None if landed is None else landed[0]


def probe_latest(store: ObjectStore, base: Manifest, markers: GcMarkers | None,
                 at_most: int, gather: Gather = serially,
                 seen: Manifest | None = None) -> tuple[Manifest, bool] | None:
    """As :func:`probe_at_most`, and whether no version after the one found exists (proved
    by the missing ``next_version`` name, in the same rounds, under the same epoch GET);
    ``False`` means "maybe": list to know. ``None`` when the version cannot be proved.

    ``seen``: the manifest named ``base.next_version``, read by the caller after ``markers``
    were read (:func:`successor`), which round 1 then takes instead of reading it again: its
    fate record and next name are still read after it was seen, the epoch last."""
    return _probe(store, base, markers, at_most, gather, after=True, seen=seen)


def successor(store: ObjectStore, base: Manifest) -> Manifest | None:
    """The manifest named ``base.next_version`` (one GET), not judged yet; ``None`` when it
    does not exist. The first request of :meth:`silt.DB.catch_up`: missing, and the GC epoch
    unchanged after it, nothing after ``base`` exists (as
    :meth:`silt.commit.Committer.nothing_after`, which reads one byte of it); present, it is
    round 1's read of its number."""
    return _manifest_or_none(store, base.next_version)


def _manifest_or_none(store: ObjectStore, version: int) -> Manifest | None:
    """The manifest of ``version`` (one GET), not judged yet; ``None`` when it has none."""
    name = paths.manifest_key(version)
    try:
        return Manifest.decode(retrying(lambda: store.get(name)), name)
    except NotFoundError:
        return None


def _exists(store: ObjectStore, version: int) -> bool:
    """Whether ``manifest/<version>`` exists (one 1-byte ranged GET, as
    :meth:`silt.commit.Committer.nothing_after`)."""
    name = paths.manifest_key(version)
    try:
        retrying(lambda: store.get_range(name, 0, 1))
    except NotFoundError:
        return False
    return True


def _read(store: ObjectStore, numbers: list[int], seen: tuple[int, Manifest] | None,
          gather: Gather) -> list[tuple[int, Manifest]]:
    """The numbers of ``numbers`` (descending) whose manifest exists, in that order, with it,
    read at once; ``seen`` (a number and its manifest, read before) is not read again."""
    todo = [n for n in numbers if seen is None or n != seen[0]]
    got = dict(zip(todo, gather([partial(_manifest_or_none, store, n) for n in todo])))
    if seen is not None and seen[0] in numbers:
        got[seen[0]] = seen[1]
    return [(n, m) for n, m in ((n, got[n]) for n in numbers) if m is not None]


def _probe(store: ObjectStore, base: Manifest, markers: GcMarkers | None, at_most: int,
           gather: Gather, *, after: bool,
           seen: Manifest | None = None) -> tuple[Manifest, bool] | None:
    v = base.version
    if markers is None or at_most < v or v < markers.horizon:
        return None  # a pass still running does not matter (module docstring)
    lowest = max(v + 1, at_most - PROBES + 1)
    pending = list(range(at_most, lowest - 1, -1))
    landed: Manifest | None = None
    above = False  # a manifest (withdrawn) exists above the answer: nothing proved after it
    latest = False
    size = 1  # at_most alone, then the rest at once
    while pending and landed is None:
        batch, pending = pending[:size], pending[size:]
        size = len(pending)
        for n, m in _read(store, batch, None if seen is None else (base.next_version, seen),
                          gather):
            # after the manifest was seen: its fate record, and its next name at once
            check_next = after and not above
            calls = [partial(read_fate, store, n)]
            if check_next:
                calls.append(partial(_exists, store, m.next_version))
            out = gather(calls)
            above = True
            if out[0] is None or not out[0].withdraws(m):
                landed = m
                latest = check_next and not out[-1]
                break
    if landed is None:
        if lowest > v + 1:
            return None  # numbers left unprobed
        # v itself: its manifest was seen when the handle installed it. Its next name, when
        # not above at_most, was probed (missing) in round 1, after that.
        nxt = base.next_version
        check_next = after and not above and nxt > at_most
        calls = [partial(read_fate, store, v)]
        if check_next:
            calls.append(partial(_exists, store, nxt))
        out = gather(calls)
        if out[0] is not None and out[0].withdraws(base):
            return None
        landed = base
        latest = after and not above and not (check_next and out[-1])
    return (landed, latest) if unchanged(store, markers) else None
