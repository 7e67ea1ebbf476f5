"""The ZooKeeper package's exceptions (local faults; ZooKeeper unreachable past the retry
deadline surfaces as kazoo's own exception wrapped in ``ZkError``)::

    TidelogError
     └── ZkError                     a ZooKeeper operation failed (unreachable, unexpected)
          ├── BrokerIdInUseError     /brokers/ids/<id> stays owned by another live session
          └── CorruptProducerIdBlockError  /latest_producer_id_block holds something else
"""

from __future__ import annotations

from tidelog.errors import TidelogError


class ZkError(TidelogError):
    """A ZooKeeper operation failed in a way the caller cannot act on as a value."""


class CorruptProducerIdBlockError(ZkError):
    """``/latest_producer_id_block`` does not hold Kafka's JSON: refusing to guess (starting
    again at 0 would reuse ids)."""


class BrokerIdInUseError(ZkError):
    """Another live session holds ``/brokers/ids/<id>`` (two brokers with one broker.id?)."""
