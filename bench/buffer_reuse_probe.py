"""Would recycling evicted block buffers make a block-cache miss cheaper? (CPU time, one process)

    python bench/buffer_reuse_probe.py [FILE] [--rounds 3]

Reads 8,600 bytes at 200k random offsets of ``FILE`` (a 64 MiB file of random bytes, made at
``/tmp/silt-buffer-reuse-probe`` when not given; in the OS page cache after the first pass) and
reports CPU us per read for four ways of holding the results:

* ``new_each``: each read's result replaces the oldest of 60k kept results (what a full block
  cache does: every miss allocates a new buffer and an eviction frees one read long ago);
* ``reuse_evicted``: the same ring, but each read lands in the evicted result's own buffer
  (``os.preadv``): the recycling of evicted buffers, with no allocation or free at all;
* ``dropped``: each result freed at once (the allocator hands the same, CPU-cached, memory back);
* ``hot_buffer``: every read into one buffer (``os.preadv``): the floor of ``reuse_evicted``'s
  call.

If ``reuse_evicted`` is no cheaper than ``new_each`` while ``dropped`` is, what a kept block
costs is the copy into memory that is not in the CPU cache, not the allocator.
"""

from __future__ import annotations

import argparse
import os
import random
import time

SIZE = 64 << 20
BLOCK = 8_600
RING = 60_000
READS = 200_000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?", default="/tmp/silt-buffer-reuse-probe")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if not os.path.exists(args.file):
        with open(args.file, "wb") as f:
            f.write(random.Random(0).randbytes(SIZE))
    fd = os.open(args.file, os.O_RDONLY)
    size = os.fstat(fd).st_size
    rnd = random.Random(1)
    offs = [rnd.randrange(size - BLOCK) for _ in range(READS + RING)]
    head, tail = offs[:RING], offs[RING:]
    cpu = time.process_time
    pread, preadv = os.pread, os.preadv

    def new_each() -> float:
        ring = [pread(fd, BLOCK, o) for o in head]
        t = cpu()
        for i, o in enumerate(tail):
            ring[i % RING] = pread(fd, BLOCK, o)
        return (cpu() - t) / READS * 1e6

    def reuse_evicted() -> float:
        ring = [bytearray(pread(fd, BLOCK, o)) for o in head]
        t = cpu()
        for i, o in enumerate(tail):
            preadv(fd, [ring[i % RING]], o)
        return (cpu() - t) / READS * 1e6

    def dropped() -> float:
        t = cpu()
        for o in tail:
            pread(fd, BLOCK, o)
        return (cpu() - t) / READS * 1e6

    def hot_buffer() -> float:
        b = bytearray(BLOCK)
        t = cpu()
        for o in tail:
            preadv(fd, [b], o)
        return (cpu() - t) / READS * 1e6

    for r in range(args.rounds):
        load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else "?"
        figures = {fn.__name__: fn() for fn in (new_each, reuse_evicted, dropped, hot_buffer)}
        print(f"round {r + 1} (load {' '.join(load)}): "
              + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()), flush=True)
    os.close(fd)


if __name__ == "__main__":
    main()
