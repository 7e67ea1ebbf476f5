"""The ZooKeeper client a broker (or tool) holds: one session with every znode store of
Kafka's ZooKeeper-era layout (Kafka's ``KafkaZkClient``; paths and JSON in ``znodes``).

Each job lives in its own module, all on one ``ZkSession`` (``session``):

* ``brokers``: broker registration (the broker epoch is the czxid) and controller election,
  whose ``ControllerSeat`` fences every later controller write (rule 10; KIP-143);
* ``topics``: topic assignments and compare-and-set partition-state writes;
* ``admin``: topic configs, topic deletion and log dir event notifications (KIP-112);
* ``producer_ids``: producer id blocks (rule 5).
"""

from __future__ import annotations

from tidelog.zk.admin import AdminZnodes
from tidelog.zk.brokers import BrokerZnodes
from tidelog.zk.producer_ids import ZkProducerIdBlockStore
from tidelog.zk.topics import TopicZnodes


class ZkClient(BrokerZnodes, TopicZnodes, AdminZnodes):
    """One ZooKeeper session for one broker (or tool), with an asyncio-facing API.

    ``connect`` is ``zookeeper.connect`` (``host:port[,host:port...][/chroot]``); a missing
    chroot path is created, as Kafka does. Create with ``await ZkClient.connect(...)`` from
    inside the event loop that will receive callbacks.
    """

    def producer_id_block_store(self) -> ZkProducerIdBlockStore:
        """The ``ProducerIdBlockStore`` on this session (rule 5); its ``allocate`` blocks."""
        return ZkProducerIdBlockStore(self.kazoo)
