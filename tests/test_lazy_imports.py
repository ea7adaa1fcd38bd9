"""``import silt`` loads the engine on first use of a name, not up front.

A Spark task's Python worker imports silt_spark to unpickle an operator's function, also in
stages that never open a shard (the partial aggregation before the shuffle): the engine
(``silt.db`` and everything it needs) must not be on that path. Each check runs in a fresh
interpreter, since the test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import silt

ENGINE = ("silt.db", "silt.commit", "silt.compaction.driver", "silt.gc", "silt.view")


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter on this process's import path; it prints JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_silt_or_its_errors_loads_no_engine_module() -> None:
    got = _fresh(f"""
        import json, sys
        import silt.errors
        first = sorted(m for m in {ENGINE!r} if m in sys.modules)
        import silt
        second = sorted(m for m in {ENGINE!r} if m in sys.modules)
        print(json.dumps([first, second]))
    """)
    assert got == [[], []]


def test_unpickling_an_operator_module_in_a_worker_loads_no_engine_module() -> None:
    # what a worker imports to run the partial aggregation before the shuffle
    got = _fresh(f"""
        import json, sys
        import silt_spark.operators.aggregate
        print(json.dumps(sorted(m for m in {ENGINE!r} if m in sys.modules)))
    """)
    assert got == []


def test_the_partial_aggregation_loads_no_tier_kit_registry_or_root_code() -> None:
    # The functions the stage before the shuffle runs live in operators._aggregation, which
    # every fresh worker of that stage imports: the tier kit, the plugin registry and the
    # root's descriptor code (build-time and error-message helpers) stay out of it (on a quiet
    # machine about 35 ms of a 48 ms import).
    driver_side = ("silt.tierkit", "silt.plugins", "silt.store", "silt_spark.runtime._root",
                   "silt_spark.runtime._descriptor")
    got = _fresh(f"""
        import json, sys
        import silt_spark.operators._aggregation
        print(json.dumps(sorted(m for m in {driver_side!r} if m in sys.modules)))
    """)
    assert got == []


@pytest.mark.parametrize("submodules_first", [False, True])
def test_every_public_name_resolves_to_the_same_object_in_a_fresh_interpreter(
        submodules_first: bool) -> None:
    # names resolved in a shuffled order; with submodules_first, after every module of the
    # package was imported (a submodule named like a public function, silt.verify, must not
    # replace it)
    got = _fresh(f"""
        import importlib, json, pkgutil, random
        import silt
        if {submodules_first!r}:
            for m in pkgutil.walk_packages(silt.__path__, "silt."):
                if not m.name.startswith(("silt._speedups", "silt.__main__")):
                    importlib.import_module(m.name)
        names = list(silt.__all__)
        random.Random(7).shuffle(names)
        out = dict()
        for name in names:
            value = getattr(silt, name)
            mod = getattr(value, "__module__", None) or getattr(value, "__name__", "")
            out[name] = [mod, getattr(value, "__qualname__", getattr(value, "__name__", ""))]
        from silt import DB, Settings, open  # from-imports resolve the same way
        assert DB is silt.DB and Settings is silt.Settings and open is silt.open
        print(json.dumps(out))
    """)
    assert sorted(got) == sorted(silt.__all__)
    for name in silt.__all__:
        value = getattr(silt, name)
        mod = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        assert got[name] == [mod, getattr(value, "__qualname__", getattr(value, "__name__",
                                                                         ""))], name
    assert set(silt.__all__) <= set(dir(silt))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    try:
        silt.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("silt.no_such_name resolved")


def test_the_package_pickles_by_name_as_a_module_does() -> None:
    # A Spark processor's globals go to the workers by cloudpickle, which knows only the exact
    # module type: the package (a module subclass, for its guarded attributes) pickles by name.
    import pickle

    import silt
    from pyspark import cloudpickle

    assert pickle.loads(pickle.dumps(silt)) is silt
    assert cloudpickle.loads(cloudpickle.dumps(silt)) is silt
    uses = {"silt": silt}
    assert cloudpickle.loads(cloudpickle.dumps(uses))["silt"] is silt
