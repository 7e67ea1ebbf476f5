"""``/admin/reassign_partitions``: the ZooKeeper way to ask for a partition reassignment.

Before KIP-455, kafka-reassign-partitions.sh (``--zookeeper``) wrote the wanted replicas
here and the controller carried them out; Kafka kept honouring the znode in ZooKeeper mode
after 2.4, and so does tidelog. The format is Kafka's::

    /admin/reassign_partitions
        {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}, ...]}

Rules (Kafka's ``KafkaController.processZkPartitionReassignment`` and
``removePartitionsFromZkReassignment``):

1. The controller reads the znode when it appears (a data watch) and when it becomes the
   controller, and starts a reassignment for each partition in it, as AlterPartitionReassignments
   would. A partition whose topic does not exist is dropped from the znode at once.
2. As each of its partitions completes (or is cancelled through the API), it is removed
   from the znode with a compare-and-set; the znode is deleted once empty. A lost race reads
   the znode again.
3. A znode that is not Kafka's JSON is logged and deleted (Kafka does the same: it would
   otherwise block every later request).

``log_dirs`` entries (KIP-113) are accepted and ignored: the broker picks the log dir.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from kazoo.exceptions import BadVersionError, NoNodeError

from tidelog.model import BrokerId, TopicPartition
from tidelog.zk.session import Watch, ZkSession
from tidelog.zk.znodes import ZNodeDecodeError

log = logging.getLogger(__name__)

REASSIGN_PARTITIONS_PATH: Final = "/admin/reassign_partitions"
#: How often a lost compare-and-set is retried before giving up (the next event retries).
_MAX_ROUNDS: Final = 5


def encode_reassignment(partitions: Mapping[TopicPartition, Collection[BrokerId]]) -> bytes:
    """Kafka's ``ReassignPartitionsZNode.encode``: version 1, partitions in order."""
    body = {
        "version": 1,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": [int(r) for r in rs]}
            for tp, rs in sorted(partitions.items())
        ],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def decode_reassignment(data: bytes) -> dict[TopicPartition, tuple[BrokerId, ...]]:
    """The wanted replicas per partition; ``ZNodeDecodeError`` when it is not Kafka's JSON."""
    try:
        obj: Any = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZNodeDecodeError(REASSIGN_PARTITIONS_PATH, data, f"not JSON: {exc}") from None
    entries = obj.get("partitions") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        raise ZNodeDecodeError(REASSIGN_PARTITIONS_PATH, data, "no 'partitions' list")
    out: dict[TopicPartition, tuple[BrokerId, ...]] = {}
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        replicas = entry.get("replicas") if isinstance(entry, dict) else None
        if (
            not isinstance(topic, str)
            or not isinstance(partition, int)
            or isinstance(partition, bool)
            or not isinstance(replicas, list)
            or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)
        ):
            raise ZNodeDecodeError(
                REASSIGN_PARTITIONS_PATH,
                data,
                "expected {'topic': str, 'partition': int, 'replicas': [int]} entries",
            )
        out[TopicPartition(topic, partition)] = tuple(BrokerId(r) for r in replicas)
    return out


async def read_reassignment(zk: ZkSession) -> dict[TopicPartition, tuple[BrokerId, ...]]:
    """The znode's partitions (empty when absent). An unreadable znode is deleted (rule 3)."""

    def run() -> bytes | None:
        try:
            data, _stat = zk.kazoo.get(REASSIGN_PARTITIONS_PATH)
        except NoNodeError:
            return None
        return bytes(data or b"")

    data = await zk.call(run)
    if data is None:
        return {}
    try:
        return decode_reassignment(data)
    except ZNodeDecodeError:
        log.exception("deleting the unreadable %s", REASSIGN_PARTITIONS_PATH)
        await zk.call(_delete_quietly, zk)
        return {}


def _delete_quietly(zk: ZkSession) -> None:
    with contextlib.suppress(NoNodeError):
        zk.kazoo.delete(REASSIGN_PARTITIONS_PATH)


async def write_reassignment(
    zk: ZkSession, partitions: Mapping[TopicPartition, Collection[BrokerId]]
) -> None:
    """Create (or replace) the znode, as ``kafka-reassign-partitions.sh --zookeeper`` does
    (tests and tools; Kafka's tool refuses when one is already there, so does this)."""
    await zk.call(
        lambda: zk.kazoo.create(
            REASSIGN_PARTITIONS_PATH, encode_reassignment(partitions), makepath=True
        )
    )


async def remove_from_reassignment(zk: ZkSession, done: Collection[TopicPartition]) -> None:
    """Rule 2: drop ``done`` from the znode; delete it when nothing is left."""
    wanted = set(done)
    if not wanted:
        return

    def run() -> None:
        for _ in range(_MAX_ROUNDS):
            try:
                data, stat = zk.kazoo.get(REASSIGN_PARTITIONS_PATH)
            except NoNodeError:
                return
            try:
                current = decode_reassignment(bytes(data or b""))
            except ZNodeDecodeError:
                current = {}
            left = {tp: rs for tp, rs in current.items() if tp not in wanted}
            if len(left) == len(current) and current:
                return
            try:
                if left:
                    zk.kazoo.set(REASSIGN_PARTITIONS_PATH, encode_reassignment(left), stat.version)
                else:
                    zk.kazoo.delete(REASSIGN_PARTITIONS_PATH, stat.version)
            except (BadVersionError, NoNodeError):
                continue
            return

    await zk.call(run)


async def watch_reassignment(zk: ZkSession, callback: Callable[[], None]) -> Watch:
    """``callback()`` whenever the znode is created or changed (not when it is deleted)."""

    def fire(data: bytes | None, _version: int) -> None:
        if data is not None:
            callback()

    return await zk.watch_data(REASSIGN_PARTITIONS_PATH, fire)
