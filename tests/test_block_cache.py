"""The block cache's eviction order (CLOCK, second chance) and its accounting.

Run under both twins (``SILT_NO_EXTENSIONS=1`` and ``SILT_REQUIRE_EXTENSIONS=1``);
tests/test_twins.py runs both side by side on random operations.
"""

from __future__ import annotations

import random
import threading

from silt.cache import BlockCache


def full(*names: str, charge: int = 30) -> BlockCache:
    """A cache holding exactly ``names`` (put in that order), with no room to spare."""
    cache = BlockCache(charge * len(names))
    for name in names:
        cache.put(name, name.upper(), charge)
    return cache


def held(cache: BlockCache, names: str) -> str:
    return "".join(n for n, h in zip(names, cache.holds(list(names))) if h)


def test_marked_entries_are_passed_over_in_queue_order_not_by_recency() -> None:
    cache = full("a", "b", "c")
    for name in "cba":  # every entry hit; a last (most recently used)
        assert cache.get(name) == name.upper()
    cache.put("d", "D", 30)
    # The hand unmarks a, b and c in their queue order and evicts a, the oldest: a hit marks
    # an entry, it does not move it (least recently used would have evicted c).
    assert held(cache, "abcd") == "bcd"
    assert cache.evictions == 1


def test_unmarked_entries_go_first_oldest_first() -> None:
    cache = full("a", "b", "c", "d")
    cache.get("a")
    cache.get_many(["c"])
    cache.put("e", "E", 60)  # needs two entries' room: b, then d (a and c had a hit)
    assert held(cache, "abcde") == "ace"
    cache.put("f", "F", 30)  # a and c were unmarked by that pass: a, the oldest, goes
    assert held(cache, "abcdef") == "cef"
    assert (cache.used, len(cache), cache.evictions) == (120, 3, 3)


def test_a_look_marks_nothing_and_counts_nothing() -> None:
    cache = full("a", "b")
    assert cache.holds(["a", "b", "x"]) == [True, True, False]
    assert (cache.hits, cache.misses) == (0, 0)
    cache.put("c", "C", 30)  # a was only looked at: it is evicted as if never touched
    assert held(cache, "abc") == "bc"


def test_a_new_entry_makes_room_before_it_is_queued() -> None:
    cache = BlockCache(100)
    cache.put("a", "A", 40)
    cache.get("a")
    cache.put("b", "B", 70)  # a has its second chance, then goes: b is never the victim
    assert held(cache, "ab") == "b"
    cache.put("c", "C", 100)  # as large as the whole cache: everything else goes
    assert held(cache, "abc") == "c" and cache.used == 100
    cache.put("d", "D", 101)  # larger than the cache: not cached, nothing evicted
    assert held(cache, "cd") == "c" and cache.evictions == 2


def test_a_put_of_a_cached_key_replaces_it_in_place_and_marks_it() -> None:
    cache = full("a", "b", "c")
    cache.put("a", "A2", 10)  # re-charged, keeps its place, marked
    assert cache.used == 70 and len(cache) == 3
    cache.put("d", "D", 60)  # a has its second chance: b and c go
    assert held(cache, "abcd") == "ad" and cache.get("a") == "A2"
    cache.put("a", "A3", 60)  # grows past the capacity: the others make room
    assert held(cache, "ad") == "a" and cache.used == 60


def test_resize_evicts_in_the_same_order() -> None:
    cache = full("a", "b", "c")
    for name in "cba":
        cache.get(name)
    cache.resize(30)
    assert held(cache, "abc") == "c"  # a, then b: the queue's order once all are unmarked
    assert (cache.capacity, cache.used, cache.evictions) == (30, 30, 2)
    cache.resize(0)
    assert len(cache) == 0 and cache.used == 0
    cache.resize(90)
    cache.put("x", "X", 30)
    cache.clear()
    assert (len(cache), cache.used, cache.holds(["x"])) == (0, 0, [False])
    cache.put("y", "Y", 90)  # the queue is empty after a clear too
    assert held(cache, "xy") == "y"


def test_used_is_the_charge_of_what_is_held_under_random_use() -> None:
    rng = random.Random(3)
    cache = BlockCache(1000)
    charges: dict[int, int] = {}
    for _ in range(20_000):
        key = rng.randrange(200)
        r = rng.random()
        if r < 0.45:
            charge = rng.randrange(0, 300)
            cache.put(key, key, charge)
            if charge <= cache.capacity:
                charges[key] = charge
        elif r < 0.99:
            got = cache.get(key)
            assert got is None or got == key
        else:
            cache.resize(rng.randrange(0, 1500))
        # after every step (this test took over test_sst's bounds check under random use)
        keys = list(charges)
        live = [k for k, h in zip(keys, cache.holds(keys)) if h]
        assert cache.used == sum(charges[k] for k in live) <= cache.capacity
        assert len(cache) == len(live)


def test_threads_share_one_cache() -> None:
    cache = BlockCache(50 * 64)
    gets = [0] * 4
    puts = [0] * 4
    errors: list[BaseException] = []

    def work(t: int) -> None:
        rng = random.Random(t)
        try:
            for _ in range(20_000):
                key = ("sst", rng.randrange(200))
                if cache.get(key) is None:
                    cache.put(key, key[1], 64)
                    puts[t] += 1
                gets[t] += 1
                if rng.random() < 0.001:
                    cache.get_many([("sst", i) for i in range(0, 200, 7)])
                    gets[t] += 29
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert cache.hits + cache.misses == sum(gets)
    held_now = sum(cache.holds([("sst", i) for i in range(200)]))
    assert len(cache) == held_now == 50 and cache.used == 50 * 64
    assert 0 < cache.evictions <= sum(puts) - len(cache)  # a racing put of one key replaces


def test_block_keys_are_ints_unique_across_ssts_and_shared_by_readers() -> None:
    from silt.cache import BLOCK_INDEX_BITS, block_key, block_key_base

    a, b = block_key_base("01ARZ3NDEKTSV4RRFFQ69G5FAV"), block_key_base("01ARZ3NDEKTSV4RRFF")
    assert type(a) is int and a == block_key_base("01ARZ3NDEKTSV4RRFFQ69G5FAV")  # shared
    assert a != b and a % (1 << BLOCK_INDEX_BITS) == 0 == b % (1 << BLOCK_INDEX_BITS)
    last = (1 << BLOCK_INDEX_BITS) - 1
    keys_a = {block_key(a, 0), block_key(a, last)}
    keys_b = {block_key(b, 0), block_key(b, last)}
    assert not keys_a & keys_b  # an SST's whole index range stays below the next base
    for bad in (-1, 1 << BLOCK_INDEX_BITS):
        try:
            block_key(a, bad)
        except IndexError:
            pass
        else:  # pragma: no cover - the check failed
            raise AssertionError(f"block index {bad} was accepted")


def test_a_forgotten_name_gets_a_new_base_never_an_old_one(monkeypatch) -> None:
    from silt import cache as cache_mod

    monkeypatch.setattr(cache_mod, "BASES_KEPT", 3)
    seen = [cache_mod.block_key_base(f"sst-{i}") for i in range(10)]
    assert len(set(seen)) == 10  # names forgotten on the way: still no base given twice
    again = cache_mod.block_key_base("sst-0")
    assert again not in seen


def test_get_block_is_get_of_base_plus_index_step_for_step() -> None:
    """``get_block(base, index)`` answers, marks and counts as ``get(base + index)``, and the
    session's twin keeps the pure twin's contents step for step under random use: int keys
    the compiled twin's int index holds (over a thousand of them live, so it grows and its
    deletions shift colliding slots back), ints it does not (past 2**62, or ``base + index``
    crossing it) and keys that are not ints, with replacements, resizes and clears."""
    from silt.cache import BlockCache_py

    rng = random.Random(8)
    # block keys' bases, and random ones: keys spread at random collide in the index (a
    # run of consecutive keys hardly does), so that its probing and shifting are exercised
    bases = [0, 1 << 32, 5 << 32, (1 << 62) - 3, 1 << 64]
    bases += [rng.randrange(1 << 62) for _ in range(40)]
    caches = [BlockCache_py(6000), BlockCache(6000)]

    def key() -> tuple[int, int] | tuple[str, int]:
        if rng.random() < 0.05:
            return ("t", rng.randrange(50))  # type: ignore[return-value]
        return rng.choice(bases), rng.randrange(60)

    def flat(k: tuple) -> object:
        return k if k[0] == "t" else k[0] + k[1]

    peak = 0
    for step in range(40_000):
        r = rng.random()
        k = key()
        if r < 0.45:
            charge = rng.randrange(1, 5)
            outs = [c.put(flat(k), (k, step), charge) for c in caches]
        elif r < 0.7 and k[0] != "t":
            outs = [c.get_block(*k) for c in caches]
        elif r < 0.9:
            outs = [c.get(flat(k)) for c in caches]
        elif r < 0.995:
            ks = [flat(key()) for _ in range(5)]
            outs = [c.get_many(ks) for c in caches]
        elif r < 0.9995:
            cap = rng.randrange(0, 9000)
            outs = [c.resize(cap) for c in caches]
        else:
            outs = [c.clear() for c in caches]
        assert outs[0] == outs[1], step
        pure, twin = ((len(c), c.used, c.hits, c.misses, c.evictions) for c in caches)
        assert pure == twin, step
        peak = max(peak, len(caches[1]))
        if step % 2000 == 0:
            universe = [b + i for b in bases for i in range(60)] + [("t", n) for n in range(50)]
            assert caches[0].holds(universe) == caches[1].holds(universe)
    assert peak > 600  # the int index grew past its first 1,024 slots (at 513 int keys)
