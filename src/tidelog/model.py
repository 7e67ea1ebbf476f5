"""Value types shared by every layer.

Ids and offsets are ``NewType``s over ``int`` so signatures say which integer they mean at no
run-time cost; ``TopicPartition`` is the one key for a partition everywhere.
"""

from __future__ import annotations

from typing import Final, NamedTuple, NewType

BrokerId = NewType("BrokerId", int)
Offset = NewType("Offset", int)
LeaderEpoch = NewType("LeaderEpoch", int)
PartitionEpoch = NewType("PartitionEpoch", int)
ControllerEpoch = NewType("ControllerEpoch", int)

#: Kafka's sentinel for "no leader" / "no broker".
NO_BROKER: Final = BrokerId(-1)
#: Kafka's sentinel for an unknown leader epoch (clients send it when they do not know one).
NO_EPOCH: Final = LeaderEpoch(-1)
#: Kafka's sentinel for an undefined offset (e.g. an epoch lookup below the first epoch).
NO_OFFSET: Final = Offset(-1)
#: The replica id consumers put in Fetch requests (anything below 0 is not a replica).
CONSUMER_REPLICA_ID: Final = BrokerId(-1)


class TopicPartition(NamedTuple):
    """One partition of one topic: the key for logs, replica state and requests."""

    topic: str
    partition: int

    def __str__(self) -> str:
        # Kafka's spelling, also the partition's directory name under a log dir.
        return f"{self.topic}-{self.partition}"
