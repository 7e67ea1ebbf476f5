"""Producer id blocks on ZooKeeper (rule 5; Kafka's ``ZkProducerIdManager.
getNewProducerIdBlock``).

Read ``/latest_producer_id_block`` with its version, compute the next block, write it with
that version as a compare-and-set (create the node when absent), and on BadVersion /
NodeExists (another broker won the race) read again. Two claimers therefore never get
overlapping blocks, and since the node only moves forward a restarted broker never reuses an
id. A write retried after a connection loss may find its own first attempt applied
(BadVersion): the re-read then claims the block after it, which wastes ids but never reuses
one.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from tidelog.storage.producer_id import (
    ZK_PRODUCER_ID_BLOCK_PATH,
    ProducerIdBlock,
    decode_block,
    encode_block,
    next_block,
)
from tidelog.zk.errors import CorruptProducerIdBlockError, ZkError

log = logging.getLogger(__name__)


class ZkProducerIdBlockStore:
    """``ProducerIdBlockStore`` on ZooKeeper's ``/latest_producer_id_block`` (rule 5).

    ``allocate`` is blocking (kazoo calls, retried across connection losses for up to one
    session timeout): callers on an event loop run it through ``asyncio.to_thread``, which
    ``ProducerIdManager.generate_producer_id`` callers do anyway. Thread-safe: kazoo's client
    is, and the compare-and-set makes concurrent claims from any number of threads, brokers
    or processes safe.
    """

    def __init__(self, kazoo_client: KazooClient) -> None:
        self._kz = kazoo_client
        #: How many compare-and-set attempts lost a race (for tests and logs).
        self.conflicts = 0

    def read(self) -> tuple[ProducerIdBlock | None, int | None]:
        """The current block and the znode version (``(None, None)``: no znode; ``(None,
        version)``: a znode without data, as Kafka's start-up creates it)."""
        try:
            data, stat = self._kz.retry(self._kz.get, ZK_PRODUCER_ID_BLOCK_PATH)
        except NoNodeError:
            return None, None
        if not data:
            return None, int(stat.version)
        try:
            return decode_block(data), int(stat.version)
        except ValueError as exc:
            raise CorruptProducerIdBlockError(
                f"{ZK_PRODUCER_ID_BLOCK_PATH} holds {data!r}: {exc}"
            ) from exc

    def allocate(self, broker_id: int, block_size: int) -> ProducerIdBlock:
        """Claim the block after the current one for ``broker_id`` (Kafka's
        ``getNewProducerIdBlock``); ``ProducerIdsExhaustedError`` past Int64 max."""
        kz = self._kz
        while True:
            try:
                current, version = self.read()
                block = next_block(current, broker_id, block_size)
                data = encode_block(block)
                if version is None:
                    kz.retry(kz.create, ZK_PRODUCER_ID_BLOCK_PATH, data, makepath=True)
                else:
                    kz.retry(kz.set, ZK_PRODUCER_ID_BLOCK_PATH, data, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                # Another claimer wrote (or created, or deleted) the node between our read
                # and our write: read again. NoNode only if someone deleted it meanwhile.
                self.conflicts += 1
                continue
            except KazooException as exc:
                raise ZkError(f"claiming a producer id block failed: {exc!r}") from exc
            log.info(
                "broker %d claimed producer ids %d..%d",
                broker_id,
                block.block_start,
                block.block_end,
            )
            return block
