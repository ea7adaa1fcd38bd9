"""Sorted string tables: immutable, checksummed files of sorted entries (see docs/format.md).

``format`` holds the on-disk constants, ``block`` encodes and decodes blocks, ``builder`` writes a
whole SST and ``reader`` reads one lazily through an object store and the block cache.
"""
