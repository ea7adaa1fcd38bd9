"""Key groups, shards and Spark partitions: how a key finds its shard (docs/spark.md,
"Rescaling"; docs/architecture.md, "A Spark micro-batch").

* A key's **key group** is ``pmod(xxhash64(key columns), key_groups)``, computed by Spark's own
  ``xxhash64`` (seed 42) on the JVM before the shuffle, so no Python runs per row to route it.
  It depends only on the key's values and Spark types, never on Python's ``hash`` or on the
  process; ``key_groups`` is fixed for the life of a state root (like Flink's max parallelism).
* Shard ``i`` of ``N`` owns the contiguous key groups ``kg`` with ``kg * N // G == i``, that is
  ``[ceil(i*G/N), ceil((i+1)*G/N) - 1]``, and keeps them in its own LSM at
  ``<root>/kg-<first>-<last>/`` (five digits each), with the key group as key prefix.
* ``repartition(N, col)`` places a row in partition ``pmod(murmur3_32(col, seed=42), N)``. For
  each shard we pick a small integer whose Murmur3 hash lands in that shard's partition, and the
  row's partition column is that integer: Spark partition id == shard id, exactly.
"""

from __future__ import annotations

from silt.errors import InvalidArgumentError, InvalidTypeError

_M32 = 0xFFFFFFFF

#: Default number of key groups per state root (fixed per root; shards <= key groups).
DEFAULT_KEY_GROUPS = 256
#: Key groups are stored as a 2-byte big-endian key prefix.
MAX_KEY_GROUPS = 1 << 16

KG_COLUMN = "__silt_kg"
PARTITION_COLUMN = "__silt_part"


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def murmur3_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt``: the value of ``F.hash(F.lit(value))`` for an int.

    Returns a signed 32-bit int, as Spark does.
    """
    k1 = value & _M32
    k1 = (k1 * 0xCC9E2D51) & _M32
    k1 = _rotl32(k1, 15)
    k1 = (k1 * 0x1B873593) & _M32
    h1 = (seed & _M32) ^ k1
    h1 = _rotl32(h1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition_of_int(value: int, num_partitions: int) -> int:
    """The partition ``repartition(num_partitions, col)`` gives a row whose int ``col`` is
    ``value``: ``pmod(murmur3(value, 42), num_partitions)``."""
    return murmur3_hash_int(value) % num_partitions


def partition_values(num_shards: int) -> list[int]:
    """For each shard ``i``, the smallest non-negative int that Spark hashes into partition ``i``.

    Deterministic, so driver and executors agree without communicating.
    """
    out: list[int | None] = [None] * num_shards
    missing = num_shards
    candidate = 0
    while missing:
        p = spark_partition_of_int(candidate, num_shards)
        if out[p] is None:
            out[p] = candidate
            missing -= 1
        candidate += 1
    return out  # type: ignore[return-value]


def check_layout(num_shards: int, key_groups: int) -> None:
    """Raise :class:`~silt.errors.InvalidArgumentError` (a ``ValueError``) unless
    ``1 <= num_shards <= key_groups <= 65536``, :class:`~silt.errors.InvalidTypeError` (a
    ``TypeError``) unless both are ints."""
    for name, value in (("num_shards", num_shards), ("key_groups", key_groups)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= key_groups <= MAX_KEY_GROUPS:
        raise InvalidArgumentError(
            f"key_groups must be between 1 and {MAX_KEY_GROUPS}, got {key_groups}"
        )
    if not 1 <= num_shards <= key_groups:
        raise InvalidArgumentError(
            f"num_shards must be between 1 and key_groups ({key_groups}), got {num_shards}"
        )


def shard_of(key_group: int, num_shards: int, key_groups: int) -> int:
    """The shard that owns ``key_group``."""
    return key_group * num_shards // key_groups


def shard_range(shard: int, num_shards: int, key_groups: int) -> tuple[int, int]:
    """``(first, last)`` key groups (inclusive) owned by ``shard``."""
    first = -(-shard * key_groups // num_shards)
    nxt = -(-(shard + 1) * key_groups // num_shards)
    return first, nxt - 1


def shard_dir(shard: int, num_shards: int, key_groups: int, generation: int = 0) -> str:
    """The shard's folder name under the operator root: ``kg-<first>-<last>``.

    Layouts after a rescale (``generation >= 1``) append ``-g<generation>``, so a layout that
    reuses a key-group range of an older one (4 -> 2 -> 4 shards) never sees the old versions.
    """
    first, last = shard_range(shard, num_shards, key_groups)
    name = f"kg-{first:05d}-{last:05d}"
    return f"{name}-g{generation}" if generation else name


def child_url(root: str, name: str) -> str:
    """``root`` with ``/name`` appended to its path, keeping any ``?options``."""
    base, sep, query = root.partition("?")
    return f"{base.rstrip('/')}/{name}{sep}{query}"


def shard_url(
    root: str, shard: int, num_shards: int, key_groups: int, generation: int = 0
) -> str:
    """URL of shard ``shard``'s LSM under the operator root ``root``."""
    return child_url(root, shard_dir(shard, num_shards, key_groups, generation))


def overlapping_shards(first: int, last: int, num_shards: int, key_groups: int) -> list[int]:
    """Shards of a ``num_shards`` layout owning any key group in ``[first, last]``."""
    return list(range(shard_of(first, num_shards, key_groups),
                      shard_of(last, num_shards, key_groups) + 1))


def kg_bounds(first: int, last: int) -> tuple[bytes, bytes | None]:
    """``[start, end)`` LSM key bounds of key groups ``first..last`` (2-byte big-endian
    prefix); ``end`` is ``None`` past the last possible key group."""
    start = first.to_bytes(2, "big")
    end = (last + 1).to_bytes(2, "big") if last + 1 < MAX_KEY_GROUPS else None
    return start, end


def partition_table(num_shards: int, key_groups: int) -> list[int]:
    """For each key group, the partition-column value that sends it to its shard's partition."""
    values = partition_values(num_shards)
    return [values[shard_of(kg, num_shards, key_groups)] for kg in range(key_groups)]


def with_routing_columns(df, key_columns, num_shards: int, key_groups: int):
    """``df`` plus the key-group column and the partition column (Spark expressions only).

    The partition column is :func:`partition_values`' entry for the key group's shard
    (:func:`shard_of`, in integer arithmetic), so the plan holds one small literal array of
    ``num_shards`` int values (the same values as :func:`partition_table`). It is one SQL
    expression (our column's name and integers only), one call into the JVM where building it
    from Column methods took ~25: the driver builds it at every query start, a restart's
    included."""
    from pyspark.sql import functions as F

    kg = F.pmod(F.xxhash64(*[F.col(c) for c in key_columns]), F.lit(key_groups)).cast("int")
    values = ", ".join(str(int(v)) for v in partition_values(num_shards))
    partition = F.expr(f"element_at(array({values}), "
                       f"cast(div(`{KG_COLUMN}` * {num_shards}, {key_groups}) + 1 AS int))")
    return df.withColumn(KG_COLUMN, kg).withColumn(PARTITION_COLUMN, partition)
