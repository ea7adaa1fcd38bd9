"""A user's first job from the built wheels, run by ``nox -s wheels`` inside an empty venv.

    python wheel_smoke.py s3    <S3 endpoint> <bucket>      # silt-core + silt-tier-s3 only
    python wheel_smoke.py gs    <GCS endpoint> <bucket>     # silt-core + silt-tier-gcs only
    python wheel_smoke.py az    <Blob endpoint> <container> # silt-core + silt-tier-azure only
    python wheel_smoke.py spark <S3 endpoint> <bucket>      # silt-core + silt-tier-s3 + silt-spark

The venv holds only what the wheels declare (and pip resolved for them), so an import of an
undeclared package fails here. The script proves that:

* ``s3``, ``gs``, ``az``: the tier's URL opens through its entry point (plugin autoload on, as a
  user has it), a commit survives a reopen in a new process, the ``silt`` command reads the
  root and lists the tier, the compiled hot path is there, and the tiers that were not
  installed are named with an install hint instead of being importable;
* ``spark``: a streaming ``silt_spark.aggregate`` with its state on S3 runs two micro-batches,
  restarts, and its output and ``read_state`` equal the counts computed here.

The bucket (container) is made here with the SDK the tier declares. It prints one line per check
and exits non-zero (with the reason) on the first failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

#: scheme -> (the tier's module, its distribution)
TIERS = {"s3": ("silt_s3", "silt-tier-s3"), "gs": ("silt_gcs", "silt-tier-gcs"),
         "az": ("silt_azure", "silt-tier-azure")}
#: Azurite's development account (its key is public: Azure's documentation prints it).
AZURITE = ("devstoreaccount1", "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq"
           "/K1SZFPTOtr/KBHBeksoGMGw==")


def check(what: str, ok: bool, detail: object = "") -> None:
    if not ok:
        sys.exit(f"FAILED: {what} {detail}")
    print(f"ok: {what}")


def root_url(scheme: str, endpoint: str, bucket: str, path: str) -> str:
    """The silt URL of ``path`` in ``bucket`` on the emulator at ``endpoint``; the bucket is
    made first, with the SDK the tier declares."""
    if scheme == "s3":
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket=bucket)
        return f"s3://{bucket}/{path}?endpoint_url={endpoint}"
    if scheme == "gs":
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="silt-smoke", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": endpoint})
        client.create_bucket(bucket)
        return f"gs://{bucket}/{path}?endpoint={endpoint}"
    from azure.storage.blob import BlobServiceClient

    account, key = AZURITE
    connection = (f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
                  f"BlobEndpoint={endpoint}/{account};")
    BlobServiceClient.from_connection_string(connection).create_container(bucket)
    return f"az://{bucket}/{path}?connection_string={quote(connection, safe='')}"


def tier(scheme: str, endpoint: str, bucket: str) -> None:
    import silt
    from silt.errors import NoTierError

    url = root_url(scheme, endpoint, bucket, "core")
    compiled = silt.speedups()
    check("the compiled hot path is installed", all(compiled.values()), compiled)
    db = silt.open(url)
    db.put(b"user:1", b"42")
    db.delete(b"user:0")
    version = db.commit()
    db.close()
    code = ("import silt, sys; db = silt.open(sys.argv[1]); "
            "print(db.get(b'user:1').decode(), db.version)")
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                         check=True).stdout.split()
    check(f"a commit on {scheme}:// survives a reopen in a new process",
          out == ["42", str(version)], out)
    bin_dir = Path(sys.executable).parent
    got = subprocess.run([bin_dir / "silt", "get", url, "user:1"], capture_output=True,
                         text=True)
    check("`silt get` reads the root", got.returncode == 0 and "42" in got.stdout,
          (got.returncode, got.stdout, got.stderr))
    plugins = subprocess.run([bin_dir / "silt", "plugins"], capture_output=True, text=True)
    check(f"`silt plugins` lists the {scheme}:// tier", scheme in plugins.stdout, plugins.stdout)
    others = [m for s, (m, _) in TIERS.items() if s != scheme]
    vendors = {"s3": ["google", "azure"], "gs": ["boto3", "azure"], "az": ["boto3", "google"]}
    for module in (*others, "silt_spark", "pyspark", *vendors[scheme]):
        found = subprocess.run([sys.executable, "-c", f"import {module}"],
                               capture_output=True).returncode == 0
        check(f"{module} is not installed (only what was asked for)", not found)
    for other, (_, distribution) in TIERS.items():
        if other == scheme:
            continue
        try:
            silt.open(f"{other}://{bucket}/x")
        except NoTierError as exc:
            check(f"{other}:// (not installed) gets an install hint", distribution in str(exc),
                  exc)
        else:
            check(f"{other}:// refused without {distribution}", False)


def spark(endpoint: str, bucket: str) -> None:
    import silt_spark
    from pyspark.sql import SparkSession

    url = root_url("s3", endpoint, bucket, "spark")
    work = Path(tempfile.mkdtemp(prefix="silt-wheel-smoke-"))
    (work / "in").mkdir()
    session = (SparkSession.builder.master("local[2]").appName("silt-wheel-smoke")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    rows = [[("a", 1), ("b", 2), ("a", 3)], [("b", 5), ("c", 7)], [("a", 10)]]
    want: dict[str, tuple[int, int]] = {}
    got: dict[str, tuple[int, int]] = {}

    def sink(df, _batch_id):
        for r in df.collect():
            got[r["user"]] = (r["n"], r["total"])

    def run(batches) -> None:
        for i, batch in batches:
            (work / "in" / f"{i}.json").write_text(
                "\n".join(json.dumps({"user": u, "amount": a}) for u, a in batch))
        src = session.readStream.schema("user string, amount long").json(str(work / "in"))
        out = silt_spark.aggregate(src, "user", {"n": "count", "total": "sum(amount)"},
                                   state_url=url, num_shards=2)
        query = (out.writeStream.foreachBatch(sink).trigger(availableNow=True)
                 .option("checkpointLocation", str(work / "ckpt")).start())
        query.awaitTermination()

    run(enumerate(rows[:2]))
    run([(2, rows[2])])  # a restart: the state comes back from S3
    for batch in rows:
        for user, amount in batch:
            n, total = want.get(user, (0, 0))
            want[user] = (n + 1, total + amount)
    check("the aggregate's output across a restart", got == want, (got, want))
    state = {r["user"]: (r["n"], r["total"])
             for r in silt_spark.read_state(session, url, state_name="aggregate").collect()}
    check("read_state reads the state back from S3", state == want, state)
    session.stop()


if __name__ == "__main__":
    mode, endpoint, bucket = sys.argv[1:4]
    if mode == "spark":
        spark(endpoint, bucket)
    else:
        tier(mode, endpoint, bucket)
