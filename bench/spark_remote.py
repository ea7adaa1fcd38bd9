"""spark_bench.py's cases with their state on S3 (moto's server behind a latency proxy), each
beside the same case on ``file://`` (``--s3-latency-ms``; not a test).

The aggregate runs in every place (file://, S3, S3 with the SSD cache, S3 without the cache
refill after compactions); the per-key Arrow processor (``FastCount``) and the stream-stream
join (inner and left outer, on the join's input: ``--join-buffered N --join-step-rows R``
fills the buffers with two batches, then the step batches' rows/s are compared) on file://
and plain S3. Every result carries the requests the proxy saw (``proxied_requests``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import silt_spark
from spark_counts import FastCount
from spark_drivers import Runner, generated, once
from spark_inputs import join_batches, make_input, make_join_input
from spark_session import RemoteState

#: ``measure(session, name, build, src, work, keys, rows, args, state, **query)`` of
#: spark_bench.py: one case run (when this process runs it) and its result, or None.
Measure = Callable[..., "dict | None"]


class RemoteCases:
    """The S3 cases of one benchmark run; the S3 server and its proxy start when the first
    case that needs them runs (a driver running only file:// cases starts none)."""

    def __init__(self, args: argparse.Namespace, runner: Runner, measure: Measure) -> None:
        self.args = args
        self.runner = runner
        self.measure = measure
        self.remote: RemoteState | None = None

    def _remote(self) -> RemoteState:
        if self.remote is None:
            self.remote = RemoteState(self.args.s3_latency_ms)
        return self.remote

    def stop(self) -> None:
        """Stop the S3 server and its proxy, if they started."""
        if self.remote is not None:
            self.remote.stop()

    def run(self, session: dict, work: Path, rep: int, keys: int,
            join_range: tuple[str, str]) -> list[dict]:
        """Every S3 case (and its file:// twin) this process runs at ``keys``, repeat ``rep``."""
        args = self.args
        import silt

        src = generated(work / f"remote-{keys}", lambda: make_input(
            work / f"remote-{keys}", args.batches, args.rows, keys, seed=keys))
        ms = f"{args.s3_latency_ms:g} ms"
        where: dict[str, Callable[[str], str]] = {  # label -> the state's URL for a case tag
            "file://": lambda tag: (work / f"state-remote-{tag}-{keys}").as_uri(),
            f"s3 +{ms}": lambda tag: self._remote().url(f"{tag}-{keys}-{rep}"),
            f"s3 +{ms}, ssd cache": lambda tag: self._remote().url(
                f"{tag}-ssd-{keys}-{rep}", cache_dir=work / f"ssd-{tag}-{keys}"),
            # the cache refill after compactions off (silt.refill): what it saves
            f"s3 +{ms}, no refill": lambda tag: self._remote().url(
                f"{tag}-norefill-{keys}-{rep}"),
        }
        kinds = {
            "silt aggregate": lambda url, opts: lambda df: silt_spark.aggregate(
                df, ["key"], ["count", "sum(amount)"], state_url=url,
                num_shards=args.shards, settings=opts),
            "silt StatefulProcessor (arrow)": lambda url, opts: lambda df: (
                silt_spark.transform_with_state(
                    df, FastCount(), ["key"], "key long, n long, total long",
                    state_url=url, num_shards=args.shards, rows_format="arrow",
                    settings=opts)),
        }
        results: list[dict] = []
        for label, state_url in where.items():
            for kind, builder in kinds.items():
                name = f"{kind} ({label})"
                if kind != "silt aggregate" and label not in ("file://", f"s3 +{ms}"):
                    continue  # (before wants(): a listed case must run)
                if not self.runner.wants(rep, keys, name):
                    continue
                url = state_url("agg" if kind == "silt aggregate" else "proc")
                opts = (silt.Settings(refill_after_compaction=False)
                        if label.endswith("no refill") else None)
                results.extend(self._measured(
                    session, name, builder(url, opts), src, work, keys, args.rows, url))
        jfolder = work / f"remote-join-{keys}"
        made = generated(jfolder, lambda: make_join_input(
            jfolder, join_batches(args), keys, seed=keys + 3))
        jsrc = once(lambda: (made(), (jfolder / "left", jfolder / "right"))[1])
        for label in ("file://", f"s3 +{ms}"):
            for how in ("inner", "left"):
                name = f"silt join {how} ({label})"
                if not self.runner.wants(rep, keys, name):
                    continue
                url = where[label](f"join-{how}")
                results.extend(self._measured(
                    session, name, lambda lt, rt, how=how, url=url: silt_spark.join(
                        lt, rt, [("key", "pkey")], how, state_url=url,
                        num_shards=args.shards, left_time_column="ot",
                        right_time_column="pt", left_watermark_delay="10 seconds",
                        right_watermark_delay="10 seconds", time_range=join_range),
                    jsrc, work, keys, args.join_rows, url,
                    schema=("key long, amount long, ot timestamp",
                            "pkey long, paid long, pt timestamp"), mode="append",
                    restart_file=-1 if args.join_step_rows else 0,
                    steady_from=2 if args.join_step_rows else 1))
        return results

    def _measured(self, session: dict, name: str, build: Any, src: Any, work: Path,
                  keys: int, rows: int, url: str, **query: Any) -> list[dict]:
        """One case measured, with the requests the proxy saw while it ran (none on
        file://, whose case starts no server)."""
        remote = self.remote
        if remote is not None:
            remote.proxy.counts.clear()
        r = self.measure(session, name, build, src, work, keys, rows, self.args,
                         url if url.startswith("file:") else None, **query)
        if r is None:
            return []
        remote = self.remote
        r["proxied_requests"] = remote.proxy.counts.get("requests", 0) if remote else 0
        return [r]
