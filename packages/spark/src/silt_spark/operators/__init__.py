"""The operators, one package or module each: ``aggregate``, ``window``, ``dedup``, ``join/``,
``processor/`` (``transform_with_state``) and ``batch/`` (``transform_batches``). An operator's
builder, task code, state layout and state reader live together; no operator imports another.
What two operators share sits beside them: ``_aggregation.py`` (partial aggregates: aggregate
and window), ``_batchkeys.py`` (a batch's state keys) and ``_varkeys.py`` (the key layout of
named state variables: both processors).

Importing this package registers every operator's state reader (``runtime/_readers.py``).
"""

from . import aggregate, dedup, window
from .join import _reader as _join_reader  # noqa: F401 (registers the join's reader)
from .processor import _reader as _processor_reader  # noqa: F401 (registers the processor's)

__all__ = ["aggregate", "dedup", "window"]
