"""Reading operator roots without running a query: ``read_state`` (``_read.py``),
``read_changes`` (``_changes.py``), ``state_size`` (``_size.py``) and ``silt inspect``
(``_describe.py``). Roots are read through ``runtime/``; each operator's entries are decoded by
the ``StateReader`` the operator registered, never by importing an operator.
"""
