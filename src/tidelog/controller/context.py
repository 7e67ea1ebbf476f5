"""What the active controller knows (Kafka's ``ControllerContext``): its seat, the live
brokers, every topic's assignment and every partition's state, as last read from or written
to ZooKeeper. Valid only while the controller is active; cleared when it resigns.

The controller's parts (state writes, log dirs, topic deletion, reassignments) share one
``ControllerContext`` and read it afresh on every use, so a reload (``live`` replaced after a
broker change) is seen by all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from tidelog.model import BrokerId, TopicPartition
from tidelog.zk import ControllerSeat, LiveBroker
from tidelog.zk.znodes import PartitionState, TopicAssignment

#: How often a lost compare-and-set (a partition state, a topic znode) is re-read and decided
#: again before giving up.
MAX_CAS_ROUNDS: Final = 5


@dataclass(slots=True)
class ControllerContext:
    """The active controller's cache; ``seat`` is None while it is not active."""

    broker_id: BrokerId
    seat: ControllerSeat | None = None
    live: dict[BrokerId, LiveBroker] = field(default_factory=dict)
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    #: Topics whose deletion is under way (``/admin/delete_topics``).
    deleting: set[str] = field(default_factory=set)
    #: Brokers in a controlled shutdown: live, but never elected (rule 12).
    shutting_down: set[BrokerId] = field(default_factory=set)
    #: Live brokers whose log dir is offline (``tidelog.controller.log_dirs``): never elected,
    #: never added to an ISR, until they report the dir back (or restart).
    offline_dirs: set[BrokerId] = field(default_factory=set)

    @property
    def is_active(self) -> bool:
        return self.seat is not None

    def replicas(self, tp: TopicPartition) -> tuple[BrokerId, ...]:
        """The partition's replica list (RS) from its topic's assignment; () when unknown."""
        assignment = self.assignments.get(tp.topic)
        return () if assignment is None else assignment.partitions.get(tp.partition, ())

    def electable(self) -> set[BrokerId]:
        """Live brokers that may lead or join an ISR: not shutting down (rule 12), log dir
        online (KIP-112)."""
        return set(self.live) - self.shutting_down - self.offline_dirs

    def clear(self) -> None:
        """Forget everything (resigning): the next controller reloads from ZooKeeper."""
        self.seat = None
        self.live.clear()
        self.assignments.clear()
        self.states.clear()
        self.deleting.clear()
        self.shutting_down.clear()
        self.offline_dirs.clear()
