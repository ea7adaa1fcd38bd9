"""Test helpers that ship with silt, for silt's own tests and for tier plugin authors.

* :class:`StoreConformance` (``silt.testing.conformance``): the pytest suite every tier passes.
  Subclass it in a ``Test*`` class and give it one fixture, ``store``, a fresh empty store::

      class TestMyStore(StoreConformance):
          @pytest.fixture
          def store(self, tmp_path):
              return MyStore(tmp_path)

* :class:`FaultyStore` (``silt.testing.faults``): wraps a store and injects failures, lost
  responses, corruption and stalls on a schedule the test sets, and counts requests.
* :class:`LatencyStore` (``silt.testing.latency``): wraps any store, makes it remote (not
  ``local``) with a fixed latency per request, and counts the requests and sequential round
  trips of each operation (``with store.operation() as op: ...; op.round_trips``).
* :func:`exception_texts` (``silt.testing.secrets``): everything a traceback could show of an
  exception, to assert that no secret reaches an error.

``StoreConformance`` imports pytest, so it is loaded only when first asked for: importing
``FaultyStore`` does not need pytest.

pytest rewrites the assertions of test files only, not of an installed package, so that a
failing ``assert got == data`` would say only ``AssertionError``. This package registers its
conformance suite for rewriting (:func:`pytest.register_assert_rewrite`) before the suite is
imported: when pytest is already running at import (a test file importing ``silt.testing``),
and again when ``StoreConformance`` is first asked for. The failures then show the values
(``assert b'0123456789' == b'0123'``) wherever silt is installed, with no pytest plugin to
enable. (A ``pytest11`` entry point would do it too, but pytest would then rewrite every module
of silt-core, and load silt into every pytest run of every project that has it installed.)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .faults import OPS, Call, FaultyStore, flip_middle_bit
from .latency import LatencyStore, Operation
from .secrets import exception_texts

if TYPE_CHECKING:
    from .conformance import StoreConformance

__all__ = ["OPS", "Call", "FaultyStore", "LatencyStore", "Operation", "StoreConformance",
           "exception_texts", "flip_middle_bit"]


#: The modules of this package whose assertions pytest rewrites (they hold the suite's tests).
REWRITTEN = (f"{__name__}.conformance",)


def _register_rewrite(pytest: Any) -> None:
    """Have pytest rewrite the suite's assertions (a no-op outside a pytest run)."""
    if not any(name in sys.modules for name in REWRITTEN):  # too late once imported
        pytest.register_assert_rewrite(*REWRITTEN)


if "pytest" in sys.modules:  # imported from a test file: before the suite's module can be
    _register_rewrite(sys.modules["pytest"])


def __getattr__(name: str) -> Any:
    if name == "StoreConformance":
        import pytest

        _register_rewrite(pytest)
        from .conformance import StoreConformance

        return StoreConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
