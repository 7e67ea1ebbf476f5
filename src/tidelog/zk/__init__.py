"""ZooKeeper access for the broker and the controller: Kafka's ZooKeeper-era layout over
kazoo, for asyncio callers.

It is the only package that imports kazoo; it sits below ``tidelog.controller`` (the broker uses
it too) and imports nothing above ``tidelog.security`` and ``tidelog.storage``. The names below
are its public face; the stores for ACLs (``acls``), SCRAM users (``users``), broker configs
(``broker_configs``), partition reassignments (``reassign``) and the controller history
(``history_store``), the znode codecs (``znodes``) and the ACLs on znodes (``security``) are
imported from their modules.
"""

from tidelog.zk.brokers import ControllerSeat, ElectionResult, LiveBroker
from tidelog.zk.client import ZkClient
from tidelog.zk.errors import BrokerIdInUseError, CorruptProducerIdBlockError, ZkError
from tidelog.zk.producer_ids import ZkProducerIdBlockStore
from tidelog.zk.session import (
    DEFAULT_SESSION_TIMEOUT_MS,
    SessionEvent,
    Watch,
    probe_session,
    split_connect_string,
)
from tidelog.zk.topics import StateWriteOutcome, StateWriteResult, TopicCreateOutcome

__all__ = [
    "DEFAULT_SESSION_TIMEOUT_MS",
    "BrokerIdInUseError",
    "ControllerSeat",
    "CorruptProducerIdBlockError",
    "ElectionResult",
    "LiveBroker",
    "SessionEvent",
    "StateWriteOutcome",
    "StateWriteResult",
    "TopicCreateOutcome",
    "Watch",
    "ZkClient",
    "ZkError",
    "ZkProducerIdBlockStore",
    "probe_session",
    "split_connect_string",
]
