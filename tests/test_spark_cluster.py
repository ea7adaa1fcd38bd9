"""silt_spark on a real Spark standalone cluster: a master and two workers on this machine.

The cluster is started from the installed pyspark package (``bin/spark-class``, ``SPARK_HOME``
the package folder), one core and 1 GiB per worker, each worker with its own work folder. The
streaming driver runs in a separate process (tests/spark_cluster_job.py), so its session never
meets the suite's local session. Two driver runs over the same checkpoints and state roots
(file:// under the test's folder, which every executor sees) are a stop and a restart; the
outputs and the final state must equal a pandas model, and both workers must have run
executors. A second run keeps the aggregate's state on moto's S3 server, kills one worker (its
JVM, its executor and their Python workers) in the middle of the run, and requires the same
output as Spark's own aggregate, batch for batch. A cluster that does not start fails the test
with its logs; its processes are stopped at the end whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import silt
import silt_spark
from servers import Server, ServerStartError, free_port, start_server
from sparkconf import TEST_JVM_OPTIONS
from test_storage_options import tier_plugins  # noqa: F401  (the s3:// tier in this process)

JOB = Path(__file__).with_name("spark_cluster_job.py")
WORKERS = 2


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def cluster_env() -> dict[str, str]:
    """This process's environment, plus what Spark's daemons and executors need: SPARK_HOME,
    loopback addresses, small daemon heaps, and a PYTHONPATH that finds silt and silt_spark
    however they are installed (source folders in a checkout, site-packages under nox)."""
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(m.__file__)))
             for m in (silt, silt_spark)]
    paths += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,
        # The master's REST submission server has a fixed port (6066): not needed, and two
        # clusters on one machine (parallel test runs) would fight over it.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "SILT_DISABLE_PLUGIN_AUTOLOAD": "1",
    })
    return env


def master_state(master: Server, webui: int) -> dict:
    """The master's status page as JSON. Spark moves to the next port when the chosen one was
    taken meanwhile, so the port is read from the master's log when it says so."""
    found = re.findall(r"'MasterUI' on port (\d+)", master.output())
    port = int(found[-1]) if found else webui
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as r:
        return json.loads(r.read())


class Cluster:
    def __init__(self, master: Server, webui: int, workers: list[Server], dirs: list[Path]):
        self.master = master
        self.webui = webui
        self.workers = workers
        self.work_dirs = dirs

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master.port}"

    def logs(self) -> str:
        return "\n".join(f"=== {s.name} ===\n{s.output()}" for s in [self.master, *self.workers])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and two one-core workers; stopped (by PID) at the end."""
    env = cluster_env()
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    started: list[Server] = []
    try:
        webui = free_port()
        master = start_server(
            "spark master",
            ["bash", spark_class, "org.apache.spark.deploy.master.Master", "--host", "{host}",
             "--port", "{port}", "--webui-port", str(webui)],
            ready="tcp", timeout=90, env=env,
        )
        started.append(master)
        dirs = []
        # One after the other, from this thread: servers.py asks Linux to stop each daemon when
        # the thread that started it ends (PR_SET_PDEATHSIG), so no worker thread may start one.
        for i in range(WORKERS):
            dirs.append(tmp_path_factory.mktemp(f"worker{i}"))
            started.append(start_server(
                f"spark worker{i}",
                ["bash", spark_class, "org.apache.spark.deploy.worker.Worker",
                 f"spark://127.0.0.1:{master.port}", "--host", "{host}", "--port", "{port}",
                 "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g",
                 "--work-dir", str(dirs[i])],
                ready="tcp", timeout=90, env=env,
            ))
        c = Cluster(master, webui, started[1:], dirs)
        deadline = time.monotonic() + 90
        alive = 0
        while time.monotonic() < deadline:
            try:
                alive = sum(w["state"] == "ALIVE" for w in master_state(master, webui)["workers"])
            except OSError:
                alive = 0
            if alive == WORKERS:
                break
            time.sleep(0.5)
        else:
            raise ServerStartError(
                f"{alive} of {WORKERS} workers registered with the master within 90s\n{c.logs()}"
            )
        yield c
    finally:
        for server in reversed(started):
            server.stop(timeout=20)


# --- models --------------------------------------------------------------------------------------
def batch(seed: int, n: int = 50, users: int = 15) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(users)}", "device": f"d{rng.randrange(4)}",
             "amount": rng.randrange(-50, 100)} for _ in range(n)]


def models(batches: list[list[dict]]) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """Per batch, for each user in it, the aggregate's and the processor's output."""
    seen = pd.DataFrame(columns=["user", "device", "amount"])
    agg, proc = [], []
    for rows in batches:
        now = pd.DataFrame(rows)
        seen = pd.concat([seen, now], ignore_index=True).astype({"amount": "int64"})
        mine = seen[seen["user"].isin(now["user"])].groupby("user")
        a = mine["amount"]
        agg.append(pd.DataFrame({
            "count": a.size(), "sum(amount)": a.sum(), "min(amount)": a.min(),
            "max(amount)": a.max(),
        }).reset_index())
        proc.append(pd.DataFrame({
            "count": a.size(), "total": a.sum(), "devices": mine["device"].nunique(),
        }).reset_index())
    return agg, proc


def frame(path: Path) -> pd.DataFrame:
    df = pd.DataFrame(json.loads(path.read_text()))
    return df.sort_values("user").reset_index(drop=True)


def feed(work: Path, i: int, rows: list[dict]) -> None:
    """Micro-batch ``i``'s input file, moved into place whole. Spark takes files in the order of
    their modification times, so file ``i`` is dated ``i`` seconds after the first: files fed at
    once are still taken in order."""
    tmp = work / "in" / f".tmp-{i}"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stamp = 1_700_000_000 + i
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, work / "in" / f"part-{i:05d}.json")


def run_driver(cluster: Cluster, work: Path) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(JOB), cluster.url, str(work)], env=cluster_env(),
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert result.returncode == 0, (
        f"the cluster driver failed (exit {result.returncode}, "
        f"{time.monotonic() - started:.0f}s)\n--- stdout ---\n{result.stdout[-4000:]}\n"
        f"--- stderr ---\n{result.stderr[-12000:]}\n{cluster.logs()}"
    )


# --- the test ------------------------------------------------------------------------------------
def test_operators_on_a_standalone_cluster_with_restart(cluster, spark, tmp_path):
    work = tmp_path / "job"
    (work / "in").mkdir(parents=True)
    batches = [batch(i) for i in range(5)]

    for i in range(3):  # the first run: micro-batches 0, 1, 2
        feed(work, i, batches[i])
    run_driver(cluster, work)
    for i in range(3, 5):  # a new driver restarts both queries from their checkpoints: 3, 4
        feed(work, i, batches[i])
    run_driver(cluster, work)

    agg, proc = models(batches)
    for name, want in (("aggregate", agg), ("processor", proc)):
        for b in range(5):
            got = frame(work / "out" / name / f"{b}.json")
            pd.testing.assert_frame_equal(
                got[list(want[b].columns)], want[b], check_dtype=False, obj=f"{name} batch {b}"
            )
            # The driver received every task's metrics through the accumulator.
            records = json.loads((work / "out" / name / f"metrics-{b}.json").read_text())
            assert sorted(r["shard"] for r in records) == [0, 1, 2, 3]
            users = len({r["user"] for r in batches[b]})
            # aggregate: one entry per key; the processor: its value, plus a map entry per device
            touched = users if name == "aggregate" else users + len(
                {(r["user"], r["device"]) for r in batches[b]})
            assert sum(r["rows_out"] for r in records) == users
            # Both read one entry per key with one multi_get (the processor prefetches its value
            # state before user code runs) ...
            assert sum(r["state_reads"] for r in records) == users
            assert sum(r["state_writes"] for r in records) == touched
            # ... and the processor reads each key's map as one range of one multi_scan (also
            # prefetched)
            assert sum(r["state_scans"] for r in records) == (name == "processor") * users
            assert all(r["committed"] == (r["rows_out"] > 0) for r in records)

    # The final state, read back with the suite's own local session, equals the model.
    everything = pd.DataFrame([r for rows in batches for r in rows])
    per_user = everything.groupby("user")["amount"]
    state = silt_spark.read_state(spark, (work / "state-agg").as_uri(), raw=True).toPandas()
    assert sorted(state["user"]) == sorted(per_user.groups)
    assert set(state["shard_version"]) <= set(range(5)) and state["shard_version"].max() == 4
    for _, row in state.iterrows():
        value = json.loads(row["value"])
        assert value["rows"] == per_user.size()[row["user"]]
        assert value["amount"]["sum"] == per_user.sum()[row["user"]]
    stats = silt_spark.read_state(spark, (work / "state-proc").as_uri()).toPandas()
    stats = stats[stats["state"] == "stats"]
    assert {r["user"]: tuple(json.loads(r["value"])) for _, r in stats.iterrows()} == {
        u: (int(per_user.size()[u]), int(per_user.sum()[u])) for u in per_user.groups
    }
    # Four shards per operator, each a silt DB whose latest version is a micro-batch id.
    for root in ("state-agg", "state-proc"):
        shards = sorted(p for p in (work / root).iterdir() if p.name.startswith("kg-"))
        assert len(shards) == 4
        assert all(silt.versions(p.as_uri())[-1] <= 4 for p in shards)

    # Both workers ran executors (each leaves app-*/<executor id>/ in its work folder).
    for i, folder in enumerate(cluster.work_dirs):
        assert any(folder.glob("app-*/*/stderr")), f"worker{i} ran no executor\n{cluster.logs()}"


@pytest.fixture
def autoload_in_workers(spark):
    """The local session's Python workers find the s3:// tier through its entry point (a
    changed environment gives them new workers); restored afterwards."""
    env = spark.sparkContext.environment
    saved = dict(env)
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "0"
    yield
    env.clear()
    env.update(saved)


def test_state_on_s3_survives_a_killed_worker(cluster, spark, autoload_in_workers, tmp_path,
                                              s3_bucket, moto_server):
    """The aggregate's state on S3 (moto), Spark's own aggregate beside it on the same input; one
    worker is killed with SIGKILL once the first micro-batches are out. Its tasks run again on the
    other worker, and each micro-batch's output is Spark's, exactly once: no lost update from a
    shard that died in the middle of its commit, none counted twice by its second attempt. The
    state lives only in the bucket: no worker's disk holds any of it.

    Runs last in this module: the cluster keeps one worker afterwards."""
    work = tmp_path / "job"
    (work / "in").mkdir(parents=True)
    runs = 6
    batches = [batch(100 + i, n=80) for i in range(runs)]
    for i in range(runs):
        feed(work, i, batches[i])
    root = f"s3://{s3_bucket}/agg?endpoint_url={moto_server}"
    options = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
    env = {**cluster_env(), "SILT_CLUSTER_STORAGE_OPTIONS": json.dumps(options),
           # the executors find the s3:// tier through its entry point
           "SILT_DISABLE_PLUGIN_AUTOLOAD": "0"}
    out, err = (open(tmp_path / name, "w+") for name in ("driver.out", "driver.err"))
    started = time.monotonic()
    driver = subprocess.Popen([sys.executable, str(JOB), cluster.url, str(work), root],
                              env=env, stdout=out, stderr=err, text=True)
    victim = cluster.workers[1]
    try:
        # Kill the second worker once micro-batch 1 is out (the next ones start at once).
        while not (work / "out" / "aggregate" / "1.json").exists():
            assert driver.poll() is None, "the driver ended before micro-batch 1 was out"
            assert time.monotonic() - started < 240, "micro-batch 1 took over 240 s"
            time.sleep(0.1)
        os.killpg(victim.pid, signal.SIGKILL)
        batches_left = not (work / "out" / "aggregate" / f"{runs - 1}.json").exists()
        code = driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        logs = f"--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{stderr[-12000:]}"
        out.close()
        err.close()
    assert code == 0, f"the cluster driver failed (exit {code})\n{logs}\n{cluster.logs()}"
    assert batches_left, "every micro-batch was out before the worker died: nothing was tested"
    assert not victim.alive()
    assert "Lost executor" in stderr, f"the driver never lost the killed worker's executor\n{logs}"

    agg, _ = models(batches)
    for b in range(runs):
        silt_out = frame(work / "out" / "aggregate" / f"{b}.json")
        spark_out = frame(work / "out" / "spark" / f"{b}.json")
        columns = list(agg[b].columns)
        pd.testing.assert_frame_equal(silt_out[columns], spark_out[columns], check_dtype=False,
                                      obj=f"silt against Spark, micro-batch {b}")
        pd.testing.assert_frame_equal(silt_out[columns], agg[b], check_dtype=False,
                                      obj=f"silt against the model, micro-batch {b}")

    # The final state, read back from the bucket, holds every user's totals once.
    everything = pd.DataFrame([r for rows in batches for r in rows])
    per_user = everything.groupby("user")["amount"]
    state = silt_spark.read_state(spark, root, raw=True, storage_options=options).toPandas()
    assert sorted(state["user"]) == sorted(per_user.groups)
    for _, row in state.iterrows():
        value = json.loads(row["value"])
        assert value["rows"] == per_user.size()[row["user"]]
        assert value["amount"]["sum"] == per_user.sum()[row["user"]]
    assert state["shard_version"].max() == runs - 1

    # Nothing of the state on a worker's disk: the workers' folders hold no SST or manifest.
    for i, folder in enumerate(cluster.work_dirs):
        stray = [p for p in folder.rglob("*")
                 if p.is_file() and (p.suffix == ".sst" or "manifest" in p.name)]
        assert not stray, f"worker{i} holds state files: {stray[:5]}"
