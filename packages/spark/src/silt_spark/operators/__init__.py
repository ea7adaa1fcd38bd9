"""silt_spark's operators: one module or package per operator (its builder, its task code and
its state layout together). Operators never import each other; they stand on the shared
runtime modules of :mod:`silt_spark` (operator root, shard task, layout, codecs, schemas).

Operators still defined as single modules of :mod:`silt_spark` move here over time.
"""
