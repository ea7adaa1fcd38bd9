"""Build script for silt-core: the optional compiled hot path (``silt._speedups``).

Everything else is in pyproject.toml. The extension is optional: without a C compiler (or
without Cython and a pre-generated C file), or when ``SILT_NO_EXTENSIONS=1`` is set at build
time, the build warns and installs pure Python, which behaves identically (tests/test_twins.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
PYX = Path("src") / "silt" / "_speedups.pyx"
C_FILE = PYX.with_suffix(".c")


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _warn(msg: str) -> None:
    bar = "*" * 78
    print(f"\n{bar}\nWARNING: {msg}\nsilt-core is installed as pure Python (same behaviour, "
          f"slower hot path).\n{bar}\n", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that turns any failure to compile into a warning (pure Python still installs)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            _warn(f"could not build the compiled hot path ({exc!r}).")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            # Never ship a stale binary from an earlier build in place of the failed one.
            stale = Path(self.get_ext_fullpath(ext.name))
            if stale.exists():
                stale.unlink()
            _warn(f"could not compile {ext.name} ({exc!r}).")


def extensions() -> list[Extension]:
    if _flag("SILT_NO_EXTENSIONS"):
        _warn("SILT_NO_EXTENSIONS is set: not compiling silt._speedups.")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if (HERE / C_FILE).exists():
            return [Extension("silt._speedups", [str(C_FILE)])]
        _warn("Cython is not installed and no generated C file is present.")
        return []
    try:
        return cythonize(
            [Extension("silt._speedups", [str(PYX)])],
            compiler_directives={"language_level": "3"},
        )
    except Exception as exc:
        _warn(f"Cython could not translate {PYX} ({exc!r}).")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
