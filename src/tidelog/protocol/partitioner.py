"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % n``.

The Java client's ``Utils.murmur2`` (seed 0x9747b28c) and ``BuiltInPartitioner``: a record
with a key goes to the same partition from every Kafka client, so a tidelog producer (the
console producer, the Spark sink) must hash exactly as they do.
"""

from __future__ import annotations

from typing import Final

_M: Final = 0x5BD1E995
_SEED: Final = 0x9747B28C
_MASK32: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's producer picks for a keyed record among ``num_partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
