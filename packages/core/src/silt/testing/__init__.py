"""Test helpers that ship with silt, for silt's own tests and for tier plugin authors.

* :class:`StoreConformance` (``silt.testing.conformance``): the pytest suite every tier passes.
  Subclass it in a ``Test*`` class and give it one fixture, ``store``, a fresh empty store::

      class TestMyStore(StoreConformance):
          @pytest.fixture
          def store(self, tmp_path):
              return MyStore(tmp_path)

* :class:`FaultyStore` (``silt.testing.faults``): wraps a store and injects failures, lost
  responses, corruption and stalls on a schedule the test sets, and counts requests.
* :func:`exception_texts` (``silt.testing.secrets``): everything a traceback could show of an
  exception, to assert that no secret reaches an error.

``StoreConformance`` imports pytest, so it is loaded only when first asked for: importing
``FaultyStore`` does not need pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .faults import OPS, Call, FaultyStore, flip_middle_bit
from .secrets import exception_texts

if TYPE_CHECKING:
    from .conformance import StoreConformance

__all__ = ["OPS", "Call", "FaultyStore", "StoreConformance", "exception_texts",
           "flip_middle_bit"]


def __getattr__(name: str) -> Any:
    if name == "StoreConformance":
        from .conformance import StoreConformance

        return StoreConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
