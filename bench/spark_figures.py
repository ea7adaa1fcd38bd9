"""What bench/spark_bench.py reads back after a run: silt's metrics (requests, join buffers,
shard task times), the shards' manifests (commit and open times), Spark's checkpoint (the
files its own store wrote) and what the requests cost.

Import it after the checkout's packages are on ``sys.path`` (bench/spark_bench.py puts them
there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import silt_spark


def join_figures(query_id: str) -> dict[str, float]:
    """silt join's buffered rows per side after the last batch (summed over shards) and its
    eviction time per batch (slowest shard, mean over batches), from silt_spark.metrics."""
    records = [r for r in silt_spark.metrics(query_id) if "buffered_left" in r]
    if not records:
        return {}
    last = max(r["batch_id"] for r in records)
    per_batch: dict[int, float] = {}
    for r in records:
        per_batch[r["batch_id"]] = max(per_batch.get(r["batch_id"], 0.0), r.get("evict_ms", 0.0))
    return {
        "buffered_left": sum(r["buffered_left"] for r in records if r["batch_id"] == last),
        "buffered_right": sum(r["buffered_right"] for r in records if r["batch_id"] == last),
        "evicted": sum(r["evicted_left"] + r["evicted_right"] for r in records),
        "evict_ms": float(np.mean(list(per_batch.values()))),
        "evict_ms_by_batch": [round(per_batch[b], 1) for b in sorted(per_batch)],
    }


def silt_request_totals(query_id: str) -> dict[str, int]:
    """Every object-store request silt made for the query's shard tasks, by kind (the shard
    DBs' and the operator root's: watermark markers, lifecycle records)."""
    out: dict[str, int] = {}
    for r in silt_spark.metrics(query_id):
        for kind, c in r["requests"].items():
            out[kind] = out.get(kind, 0) + c["count"]
    return out


def state_files(chk: Path) -> int:
    """Files Spark's own state store wrote under the checkpoint's ``state/`` folder (each is
    at least one PUT on an object store; nothing is deleted this early: its maintenance keeps
    the last 100 versions)."""
    root = chk / "state"
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def cost_per_million(requests: dict[str, int], rows: int) -> dict[str, float]:
    """Class A and B requests and dollars (S3 Standard list prices) per 1M input rows."""
    from silt.cost import S3_STANDARD, request_classes

    classes = request_classes(requests)
    scale = 1e6 / rows if rows else 0.0
    return {"class_a": classes["class_a"] * scale, "class_b": classes["class_b"] * scale,
            "usd": S3_STANDARD.cost(requests) * scale}


def requests_per_task(query_id: str) -> dict[str, dict[str, float]]:
    """silt's object-store requests per task (one shard, one micro-batch), by kind: all of
    them, and the event-time watermark's share (purpose ``watermark``); and by purpose
    (``purposes``: ``read``, ``refill``, ``compaction``, ...; the requests a handle's background
    threads made between two of its tasks count in the later one)."""
    records = silt_spark.metrics(query_id)
    out: dict[str, dict[str, float]] = {"all": {}, "watermark": {}, "purposes": {}}
    if not records:
        return out
    for r in records:
        for kind, c in r["requests"].items():
            out["all"][kind] = out["all"].get(kind, 0) + c["count"]
        for kind, c in r["requests_by_purpose"].get("watermark", {}).items():
            out["watermark"][kind] = out["watermark"].get(kind, 0) + c["count"]
        for purpose, kinds in r["requests_by_purpose"].items():
            n = sum(c["count"] for c in kinds.values())
            out["purposes"][purpose] = out["purposes"].get(purpose, 0) + n
    return {k: {kind: n / len(records) for kind, n in sorted(v.items())}
            for k, v in out.items()}


def silt_commit_ms(state_url: str, skip: int = 1) -> dict[str, float]:
    """silt's per-batch state commit and open times, from the shards' manifests: for each
    micro-batch the slowest shard (shards commit in parallel), then the mean over batches
    after the first ``skip`` (the first batch, or with ``--fill`` the fill batches).
    A commit's duration is its manifest's creation time minus the task's start, open and
    processing time (docs/spark.md, Metrics)."""
    import silt

    root = Path(state_url[len("file://"):])
    commits: dict[int, float] = {}
    opens: dict[int, float] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("kg-")):
        store = silt.open_store(d.as_uri())
        try:
            for v in silt.versions(d.as_uri()):
                m = silt.read_manifest(store, v)
                meta = m.meta
                if "spark.task_start_ms" not in meta or meta.get("spark.batch_id") != str(v):
                    continue
                c = m.created_ms - int(meta["spark.task_start_ms"]) - float(
                    meta["spark.open_ms"]) - float(meta["spark.process_ms"])
                commits[v] = max(commits.get(v, 0.0), c)
                opens[v] = max(opens.get(v, 0.0), float(meta["spark.open_ms"]))
        finally:
            store.close()
    batches = sorted(commits)
    last = batches[-1] if batches else None
    steady = batches[skip:-1] or batches  # the restart's batch is reported on its own
    return {
        "commit_ms_by_batch": [round(commits[b], 1) for b in batches],
        "commit_ms": float(np.mean([commits[b] for b in steady])) if steady else 0.0,
        "open_ms": float(np.mean([opens[b] for b in steady])) if steady else 0.0,
        "restart_open_ms": opens.get(last, 0.0) if last is not None else 0.0,
        "restart_commit_ms": commits.get(last, 0.0) if last is not None else 0.0,
    }


def task_times(query_id: str, batch_id: int) -> dict[str, float]:
    """The slowest ``open_ms``, ``process_ms`` and ``commit_ms`` of silt's shard tasks in one
    micro-batch, and ``span_ms`` from the first task's start to the last one's end (empty
    for a query without silt operators)."""
    records = silt_spark.metrics(query_id, batch_id)
    if not records:
        return {}
    out = {k: max(r[k] for r in records) for k in ("open_ms", "process_ms", "commit_ms")}
    ends = [r["task_start_ms"] + r["open_ms"] + r["process_ms"] + r["commit_ms"]
            for r in records]
    out["span_ms"] = max(ends) - min(r["task_start_ms"] for r in records)
    return out


def du(path: Path) -> int:
    """Bytes of the files under ``path`` (0 if it is missing)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def per_kind(kinds: dict[str, float]) -> str:
    """``{"GET": 1.5, ...}`` as ``"GET 1.50, ..."`` (requests per kind, for the printed table)."""
    return ", ".join(f"{k} {n:.2f}" for k, n in kinds.items())
