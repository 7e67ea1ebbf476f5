"""Transaction markers: writing them (WriteTxnMarkers, API 27) and sending them to every
partition leader of a transaction (Kafka's TransactionMarkerChannelManager).

Rules (KIP-98):
  1. A marker is a control batch (attributes transactional | control) of the producer id
     and epoch of the transaction, one record saying COMMIT or ABORT and the coordinator
     epoch (the leader epoch of the transaction's ``__transaction_state`` partition). The
     partition leader appends it with acks=all and answers once it is replicated: the
     coordinator completes a transaction only when every marker is durable. The log checks
     the marker's epochs (``tidelog.storage.producer_state``): an older producer epoch is
     INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.
  2. A marker written to ``__consumer_offsets`` also completes the producer's pending
     transactional offset commits there (KIP-447's consume-transform-produce): visible on
     COMMIT, dropped on ABORT.
  3. Clients may not write control batches (Produce answers INVALID_RECORD, as Kafka's
     "control records are not allowed to be appended by clients"); only this path does.
  4. Sending: the markers of one transaction go to the current leader of each partition
     (this broker's own partitions are written in place), and are retried while the
     partition exists, until each partition answered NONE. A partition whose topic was
     deleted needs no marker. INVALID_PRODUCER_EPOCH (a newer epoch already ended the
     transaction there) counts as done; TRANSACTION_COORDINATOR_FENCED means a newer
     coordinator owns the transaction, so this one stops. Sending also stops when
     ``still_owner`` turns false (this broker lost the ``__transaction_state`` partition:
     the new coordinator resends from the PREPARE_* state it loads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as wtm
from kio.static.primitive import i16, i32

from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import ClientError
from tidelog.client.records import build_control_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.coordinators.group_common import AuthorizerOf, Respond
from tidelog.server.coordinators.internal_topics import OFFSETS_TOPIC, append_replicated
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.replica.manager import ReplicaManager, now_ms

log = logging.getLogger(__name__)

#: The group coordinator's completion of a transaction's offsets in one
#: ``__consumer_offsets`` partition: (partition, producer id, commit) (rule 2).
CompleteTxn = Callable[[int, int, bool], None]
#: How long a marker waits for its replication before the partition answers the timeout.
MARKER_ACK_TIMEOUT_MS = 30_000
#: Pause between rounds while some partition has no leader or answered a retriable error.
RETRY_BACKOFF_S = 0.1
_DONE = frozenset({ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH})


@dataclass(frozen=True, slots=True)
class Marker:
    """What ends one transaction in each of its partitions (rule 1)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


class MarkerWriter:
    """The partition leader's side: appends markers (rule 1) and completes offsets (rule 2)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        complete_txn: CompleteTxn | None,
        *,
        authorizer: AuthorizerOf,
        respond: Respond,
    ) -> None:
        self.replica_manager = replica_manager
        self.complete_txn = complete_txn
        self._authorizer = authorizer
        self._respond = respond

    async def write(self, tp: TopicPartition, marker: Marker) -> ErrorCode:
        batch = build_control_batch(
            marker.producer_id,
            marker.producer_epoch,
            marker.commit,
            marker.coordinator_epoch,
            now_ms(),
        )
        _, pending = append_replicated(
            self.replica_manager, tp, batch, MARKER_ACK_TIMEOUT_MS, error_map={}
        )
        error = await pending
        if error == ErrorCode.NONE and tp.topic == OFFSETS_TOPIC and self.complete_txn is not None:
            self.complete_txn(tp.partition, marker.producer_id, marker.commit)
        return error

    def handle_write_txn_markers(self, header: RequestHeader, body: Any) -> Any:
        """Every marker of the request is written at once (each waits for its own
        replication); the answer lists them in request order. Only brokers may: CLUSTER_ACTION
        on the cluster, else every partition is CLUSTER_AUTHORIZATION_FAILED and nothing is
        written (Kafka's handleWriteTxnMarkersRequest)."""
        authorizer = self._authorizer()
        refused = authorizer is not None and not authz.cluster_allowed(
            authorizer, AclOperation.CLUSTER_ACTION, header.api_key
        )
        work: list[tuple[Marker, list[tuple[str, list[TopicPartition]]]]] = []
        for entry in body.markers:
            marker = Marker(
                int(entry.producer_id),
                int(entry.producer_epoch),
                bool(entry.transaction_result),
                int(entry.coordinator_epoch),
            )
            topics = [
                (t.name, [TopicPartition(t.name, int(p)) for p in t.partition_indexes])
                for t in entry.topics
            ]
            work.append((marker, topics))

        async def run() -> Any:
            everything = [tp for _marker, topics in work for _name, tps in topics for tp in tps]
            errors = iter(
                [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * len(everything)
                if refused
                else await asyncio.gather(
                    *(
                        self.write(tp, marker)
                        for marker, topics in work
                        for _name, tps in topics
                        for tp in tps
                    )
                )
            )
            results = [
                {
                    "producer_id": marker.producer_id,
                    "topics": [
                        {
                            "name": name,
                            "partitions": [
                                {"partition_index": tp.partition, "error_code": next(errors)}
                                for tp in tps
                            ],
                        }
                        for name, tps in topics
                    ],
                }
                for marker, topics in work
            ]
            return self._respond(header, {"markers": results})

        return asyncio.ensure_future(run())


class MarkerSender:
    """The coordinator's side (rule 4): one connection per peer broker, shared by every
    transaction being completed."""

    def __init__(
        self, config: BrokerConfig, backend: MetadataBackend, writer: MarkerWriter
    ) -> None:
        self.config = config
        self.backend = backend
        self.writer = writer
        self._conns: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def send(
        self,
        partitions: Iterable[TopicPartition],
        marker: Marker,
        still_owner: Callable[[], bool],
    ) -> bool:
        """Write the markers; True once every partition has its marker (or needs none),
        False when this coordinator stopped owning the transaction first."""
        remaining = set(partitions)
        while remaining:
            if not still_owner():
                return False
            by_leader: dict[tuple[int, str, int], list[TopicPartition]] = {}
            for tp in list(remaining):
                if tp.topic not in self.backend.topics:
                    remaining.discard(tp)  # deleted: nothing to mark
                    continue
                leader = self.backend.partition_leader(tp)
                if leader is not None:
                    by_leader.setdefault(leader, []).append(tp)
            rounds = [self._send_to(leader, tps, marker) for leader, tps in by_leader.items()]
            for answers in await asyncio.gather(*rounds):
                for tp, error in answers.items():
                    if error in _DONE:
                        remaining.discard(tp)
                    elif error == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                        log.info("markers for producer %d: coordinator fenced", marker.producer_id)
                        return False
            if remaining:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return True

    async def _send_to(
        self, leader: tuple[int, str, int], tps: list[TopicPartition], marker: Marker
    ) -> dict[TopicPartition, ErrorCode]:
        broker_id, host, port = leader
        if broker_id == self.config.broker_id:
            errors = await asyncio.gather(*(self.writer.write(tp, marker) for tp in tps))
            return dict(zip(tps, errors, strict=True))
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = wtm.WriteTxnMarkersRequest(
            markers=(
                wtm.WritableTxnMarker(
                    producer_id=ProducerId(marker.producer_id),
                    producer_epoch=i16(marker.producer_epoch),
                    transaction_result=marker.commit,
                    topics=tuple(
                        wtm.WritableTxnMarkerTopic(
                            name=TopicName(name),
                            partition_indexes=tuple(i32(p) for p in parts),
                        )
                        for name, parts in by_topic.items()
                    ),
                    coordinator_epoch=i32(marker.coordinator_epoch),
                ),
            )
        )
        answers: dict[TopicPartition, ErrorCode] = {}
        try:
            conn = await self._connection(broker_id, host, port)
            response = await conn.send(request, timeout_s=MARKER_ACK_TIMEOUT_MS / 1000 + 5)
        except (ClientError, OSError) as exc:
            log.info("markers to broker %d: %s", broker_id, exc)
            await self._drop(broker_id)
            return answers
        for result in response.markers:
            for topic in result.topics:
                for part in topic.partitions:
                    answers[TopicPartition(topic.name, int(part.partition_index))] = _error(
                        int(part.error_code)
                    )
        return answers

    async def _connection(self, broker_id: int, host: str, port: int) -> BrokerConnection:
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.is_closed:
                return conn
            address = self.config.peer_address(broker_id, host, port)
            # The inter-broker listener's protocol and login: the peer checks CLUSTER_ACTION.
            conn = await BrokerConnection.connect(
                address[0],
                address[1],
                client_id=f"txn-markers-{self.config.broker_id}",
                security=self.backend.peer_security,
            )
            self._conns[broker_id] = conn
            return conn

    async def _drop(self, broker_id: int) -> None:
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        for broker_id in list(self._conns):
            await self._drop(broker_id)


def _error(code: int) -> ErrorCode:
    try:
        return ErrorCode._value2member_map_[code]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


__all__ = ["Marker", "MarkerSender", "MarkerWriter"]
