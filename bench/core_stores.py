"""The stores bench/core_bench.py compares, one small adapter each, so every measuring loop
has the same shape for all of them: silt on ``file://``, plyvel (LevelDB, with a 10-bit bloom
filter and with its defaults) and rocksdict (RocksDB). A peer that is not installed says so
(``Store.available``) and is left out of the run."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any


class Store:
    name = ""
    label = ""
    #: what "make durable" means for this store (printed in the README/JSON)
    durable_means = ""

    def available(self) -> str | None:
        """None when usable, else why not."""
        return None

    def open(self, path: str, create: bool = False) -> Any:
        raise NotImplementedError

    def close(self, db: Any) -> None:
        db.close()

    def put_fn(self, db: Any) -> Callable[[bytes, bytes], Any]:
        return db.put

    def get_fn(self, db: Any) -> Callable[[bytes], Any]:
        return db.get

    def write_batch(self, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        raise NotImplementedError

    def multi_get_fn(self, db: Any) -> Callable[[list[bytes]], list[Any]] | None:
        return None

    #: Whether the store takes a batch as two sequences (keys, values) in one call.
    has_put_many = False

    def put_many(self, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        raise NotImplementedError

    def durable(self, db: Any) -> None:
        """Make every write so far durable (silt: commit)."""
        raise NotImplementedError

    def scan_count(self, db: Any) -> int:
        raise NotImplementedError

    def settle(self, db: Any) -> None:
        """Compact the whole store and wait for it (``--settle``): the reads then see each
        store's fully compacted tree instead of the shape its load left."""
        raise NotImplementedError


class SiltStore(Store):
    name = "silt"
    label = "silt (file://)"
    durable_means = "DB.commit(): flush memtable to SSTs, fsync, create the manifest"

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings_dict = settings or {}

    def available(self) -> str | None:
        try:
            import silt  # noqa: F401
        except ImportError as exc:
            return f"import silt failed: {exc}"
        return None

    def _settings(self) -> Any:
        import silt
        return silt.Settings(**self.settings_dict)

    @staticmethod
    def url(path: str) -> str:
        return "file://" + os.path.abspath(path)

    def open(self, path: str, create: bool = False) -> Any:
        import silt
        return silt.open(self.url(path), settings=self._settings())

    def write_batch(self, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        import silt
        wb = silt.WriteBatch()
        put = wb.put
        for k, v in zip(keys, values):
            put(k, v)
        db.write(wb)

    def multi_get_fn(self, db: Any) -> Callable[[list[bytes]], list[Any]]:
        return db.multi_get

    has_put_many = True

    def put_many(self, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        db.put_many(keys, values)

    def durable(self, db: Any) -> None:
        db.commit()

    def settle(self, db: Any) -> None:
        # Background compactions are adopted at commit: wait for each, commit, until a commit
        # leaves no L0 SST and starts no further compaction.
        for _ in range(100):
            db.wait_for_compaction(3600)
            db.commit()
            st = db.stats()
            if not st["compaction_running"] and st["l0_ssts"] == 0:
                return

    def scan_count(self, db: Any) -> int:
        n = 0
        for _ in db.scan():
            n += 1
        return n


class PlyvelStore(Store):
    durable_means = "one write with sync=True (fsyncs the write-ahead log holding the writes)"

    def __init__(self, bloom_bits: int | None) -> None:
        self.bloom_bits = bloom_bits
        if bloom_bits:
            self.name = f"plyvel_bloom{bloom_bits}"
            self.label = f"plyvel bloom{bloom_bits}"
        else:
            self.name = "plyvel"
            self.label = "plyvel default"

    def available(self) -> str | None:
        try:
            import plyvel  # noqa: F401
        except ImportError as exc:
            return f"import plyvel failed: {exc}"
        return None

    def open(self, path: str, create: bool = False) -> Any:
        import plyvel
        kw: dict[str, Any] = {"create_if_missing": create}
        if self.bloom_bits:
            kw["bloom_filter_bits"] = self.bloom_bits
        return plyvel.DB(path, **kw)

    def write_batch(self, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        with db.write_batch() as wb:
            put = wb.put
            for k, v in zip(keys, values):
                put(k, v)

    def durable(self, db: Any) -> None:
        db.put(b"\xff__bench_sync__", b"", sync=True)

    def settle(self, db: Any) -> None:
        db.compact_range()

    def scan_count(self, db: Any) -> int:
        n = 0
        with db.iterator() as it:
            for _ in it:
                n += 1
        return n


class RocksStore(Store):
    name = "rocksdict"
    label = "rocksdict"
    durable_means = "Rdict.flush(wait=True): memtable to an L0 SST (synced)"

    def available(self) -> str | None:
        try:
            import rocksdict  # noqa: F401
        except ImportError as exc:
            return f"import rocksdict failed: {exc}"
        return None

    def open(self, path: str, create: bool = False) -> Any:
        from rocksdict import Options, Rdict
        opts = Options(raw_mode=True)
        opts.create_if_missing(create)
        return Rdict(path, options=opts)

    def write_batch(self, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        from rocksdict import WriteBatch
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        for k, v in zip(keys, values):
            put(k, v)
        db.write(wb)

    def multi_get_fn(self, db: Any) -> Callable[[list[bytes]], list[Any]]:
        return db.get  # Rdict.get(list) is RocksDB's MultiGet

    def durable(self, db: Any) -> None:
        db.flush(True)

    def settle(self, db: Any) -> None:
        db.compact_range(None, None)

    def scan_count(self, db: Any) -> int:
        n = 0
        for _ in db.items():
            n += 1
        return n


def make_stores(names: list[str], silt_settings: dict[str, Any]) -> list[Store]:
    every: dict[str, Store] = {
        "silt": SiltStore(silt_settings),
        "plyvel_bloom10": PlyvelStore(10),
        "plyvel": PlyvelStore(None),
        "rocksdict": RocksStore(),
    }
    out = []
    for n in names:
        if n not in every:
            raise SystemExit(f"unknown store {n!r}; choose from {', '.join(every)}")
        out.append(every[n])
    return out
