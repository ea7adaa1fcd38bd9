"""What every silt_spark operator stands on: the operator root and its descriptor, Spark's
on-disk names, the shard task and its handle cache, which DBs hold a shard at a version, builder
plumbing, key groups, the state-key layout, codecs, typed state, watermark, metrics and
progress, and the registry of state readers. Imports nothing of ``operators/`` or ``inspect/``.
"""
