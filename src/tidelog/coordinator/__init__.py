"""The group coordinator's pure core: consumer group membership (the classic rebalance
protocol) and committed offsets, with no IO (time comes in as ``now_ms``), and the record
format of ``__consumer_offsets``. The asyncio shell is ``tidelog.server.coordinators.group``.
"""

from __future__ import annotations


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, as Kafka computes it:
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` with Java's
    ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    raw = group_id.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions


__all__ = ["partition_for"]
