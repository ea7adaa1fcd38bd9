"""The operators, one package or module each: ``aggregate``, ``window``, ``dedup``, ``join/``,
``processor/`` (``transform_with_state``) and ``batch/`` (``transform_batches``). An operator's
builder, task code, state layout and state reader live together; no operator imports another.
What two operators share sits beside them: ``_aggregation.py`` (partial aggregates: aggregate
and window), ``_batchkeys.py`` (a batch's state keys) and ``_varkeys.py`` (the key layout of
named state variables: both processors).

Importing this package imports no operator: a Python worker that runs one operator's tasks
imports that operator's modules only (a cold restart's workers import nothing they do not run).
:func:`register_readers` imports them all, which registers every operator's state reader
(``runtime/_readers.py``); ``read_state`` and ``silt inspect`` call it on their first lookup.
"""

from __future__ import annotations

import importlib

#: The modules whose import registers a state reader (each operator's, or its ``_reader``).
READER_MODULES = ("aggregate", "dedup", "window", "join._reader", "processor._reader")


def register_readers() -> None:
    """Import every operator's reader module, which registers its reader (idempotent)."""
    for name in READER_MODULES:
        importlib.import_module(f".{name}", __name__)
