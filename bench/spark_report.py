"""bench/spark_bench.py's closing report: the table of every case, the requests per batch and
shard, what the state's requests cost at S3 Standard prices, and per state size the ratios the
issues' targets name (silt against Spark's store and the stateless floor, S3 against
``file://``)."""

from __future__ import annotations

from typing import Any

from spark_figures import per_kind


def print_report(results: list[dict[str, Any]], sizes: list[int]) -> None:
    """Print the report of ``results`` (one dict per case and state size, as
    ``spark_bench.measure`` returns them) for each state size in ``sizes``."""
    print()
    print(f"{'case':32s} {'K':>10s} {'rows/batch':>10s} {'rows/s':>10s} {'commit ms':>10s} "
          f"{'recovery s':>10s} {'1st batch s':>11s}")
    for r in results:
        tail = f"  ({r['error']})" if "error" in r else ""
        commit = r.get("commit_ms", r.get("native_commit_ms", 0.0))
        print(f"{r['case']:32s} {r['keys']:>10,d} {r['rows']:>10,d} {r['rows_per_s']:>10,.0f} "
              f"{commit:>10.0f} {r['recovery_s']:>10.1f} "
              f"{r.get('restart_first_batch_ms', 0) / 1000:>11.2f}{tail}")
    for r in results:
        req = r.get("requests_per_task", {})
        if req.get("all"):
            print(f"{r['case']:32s} requests per batch and shard: {per_kind(req['all'])}; "
                  f"watermark: {per_kind(req.get('watermark', {})) or 'none'}")
    print()
    print(f"{'state requests (S3 Standard)':32s} {'K':>10s} {'A/batch':>8s} {'B/batch':>8s} "
          f"{'A per 1M':>9s} {'B per 1M':>9s} {'$ per 1M rows':>13s}")
    for r in results:
        c = r.get("state_cost")
        if not c:
            continue
        print(f"{r['case']:32s} {r['keys']:>10,d} {c['class_a_per_batch']:>8.1f} "
              f"{c['class_b_per_batch']:>8.1f} "
              f"{c['class_a']:>9.0f} {c['class_b']:>9.0f} {c['usd']:>13.4f}")
    for keys in sizes:
        by = {r["case"]: r for r in results if r["keys"] == keys and "error" not in r}
        win, nwin = by.get("silt window_aggregate"), by.get("native window (RocksDB)")
        if win and nwin and nwin["rows_per_s"]:
            print(f"K={keys:,d}: silt window_aggregate / native: "
                  f"{win['rows_per_s'] / nwin['rows_per_s']:.2f}x rows/s")
        for how in ("inner", "left"):
            sj, nj = by.get(f"silt join {how}"), by.get(f"native join {how} (RocksDB)")
            if sj and nj and nj["rows_per_s"]:
                print(f"K={keys:,d}: silt join {how} / native: "
                      f"{sj['rows_per_s'] / nj['rows_per_s']:.2f}x rows/s, recovery "
                      f"{nj['recovery_s'] / max(1e-9, sj['recovery_s']):.2f}x faster, state "
                      f"{sj['state_bytes'] / 2**20:,.0f} MiB vs {nj['state_bytes'] / 2**20:,.0f}"
                      " MiB")
        for kind in ("silt aggregate", "silt StatefulProcessor (arrow)"):
            local = by.get(f"{kind} (file://)")
            if not (local and local["rows_per_s"]):
                continue
            for c, r in by.items():
                if c.startswith(f"{kind} (s3"):
                    print(f"K={keys:,d}: {c}: {r['rows_per_s'] / local['rows_per_s']:.2f}x "
                          f"file://'s rows/s; cold restart {r['recovery_s']:.1f} s (first "
                          f"batch {r['restart_first_batch_ms'] / 1000:.1f} s) against "
                          f"{local['recovery_s']:.1f} s; {r.get('proxied_requests', 0):,} "
                          "requests through the proxy")
        floor = by.get("stateless floor (Arrow)")
        if floor:
            shares = ", ".join(
                f"{c} {by[c]['recovery_s'] - floor['recovery_s']:+.1f} s"
                for c in ("silt aggregate", "native groupBy (RocksDB)") if c in by)
            print(f"K={keys:,d}: state's share of a cold restart (recovery minus the stateless "
                  f"floor's {floor['recovery_s']:.1f} s): {shares}")
        agg, nat = by.get("silt aggregate"), by.get("native groupBy (RocksDB)")
        if agg and nat and nat["rows_per_s"] and agg["recovery_s"]:
            print(f"K={keys:,d}: silt aggregate / native: {agg['rows_per_s'] / nat['rows_per_s']:.2f}x"
                  f" rows/s, recovery {nat['recovery_s'] / agg['recovery_s']:.2f}x faster, first "
                  f"batch after restart {nat['restart_first_batch_ms'] / max(1, agg['restart_first_batch_ms']):.2f}x faster")
        best = max((by[c]["rows_per_s"] for c in ("transformWithStateInPandas",
                                                  "applyInPandasWithState") if c in by),
                   default=0.0)
        for c in ("silt StatefulProcessor (pandas)", "silt StatefulProcessor (arrow)",
                  "silt batch processor"):
            if c in by and best:
                print(f"K={keys:,d}: {c} / best Python peer: {by[c]['rows_per_s'] / best:.1f}x")
        bp = by.get("silt batch processor")
        if bp and bp["rows_per_s"]:
            for c in ("silt aggregate", "silt StatefulProcessor (arrow)",
                      "native groupBy (RocksDB)"):
                if c in by and by[c]["rows_per_s"]:
                    print(f"K={keys:,d}: silt batch processor / {c}: "
                          f"{bp['rows_per_s'] / by[c]['rows_per_s']:.2f}x rows/s")
