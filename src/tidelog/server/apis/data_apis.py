"""The data APIs (Kafka's KafkaApis data path): Produce (0), Fetch (1), ListOffsets (2),
DeleteRecords (21) and OffsetForLeaderEpoch (23), answered by the replica manager alike alone
and in a cluster (NOT_LEADER_OR_FOLLOWER, 6, for a partition this broker does not lead; a
follower also serves a consumer's Fetch v11+, KIP-392, ``tidelog.server.replica.selector``).

Produce and Fetch answer with hand-written encoders (byte-exact with kio, ~10x faster);
acks=all produce and long-poll fetch answer with a future. Authorization as Kafka's
handle*Request: WRITE / READ / DESCRIBE / DELETE on each topic, CLUSTER_ACTION for a
follower's Fetch and OffsetForLeaderEpoch.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from tidelog.protocol.records import Compression, uses_codec
from tidelog.protocol.responses import (
    FetchPartitionResponse,
    FetchTopicResponse,
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_fetch_response,
    encode_produce_response,
)
from tidelog.replication.truncation import leader_end_offset_for_epoch
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.apis.fetch_parts import (
    FetchPlan,
    fetch_replica_id,
    holds_zstd,
    partition_answer,
    start_when_loaded,
)
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.apis.leader_hints import fetch_hints, produce_hints
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import topic_name_error
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.network.connection import CloseConnection, Response
from tidelog.server.network.request_context import current_request, current_throttle_ms
from tidelog.server.replica.delayed_ops import WakeSource
from tidelog.server.replica.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    PartitionNews,
    SessionKey,
    SessionPartition,
)
from tidelog.server.replica.manager import ReplicaManager, now_ms
from tidelog.server.replica.reads import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchResult,
    PartitionRead,
    ProduceResult,
)
from tidelog.server.replica.selector import ClientMetadata

HandlerResult = Any  # kio response entity | Response | None | asyncio.Future[...]


def _topic_name_of(item: Any, backend: MetadataBackend) -> str | None:
    """A request topic's name: ``name``/``topic`` field, or resolved from ``topic_id``."""
    for attr in ("name", "topic"):
        name = getattr(item, attr, None)
        if name:
            return str(name)
    topic_id = getattr(item, "topic_id", None)
    if topic_id is not None and topic_id.int != 0:
        info = backend.by_id(topic_id)
        return info.name if info is not None else None
    return None


def _lagging_error(api_version: int, body: Any) -> ErrorCode | None:
    """KIP-207's answer to a consumer's ListOffsets while the leader's high watermark lags
    its epoch start: OFFSET_NOT_AVAILABLE (78) from v5, LEADER_NOT_AVAILABLE (5) before (what
    older clients retry after a metadata refresh); None for a replica's request (Kafka
    checks client requests only, replica id -1)."""
    if int(getattr(body, "replica_id", -1)) != -1:
        return None
    return ErrorCode.OFFSET_NOT_AVAILABLE if api_version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE


#: Kafka's default ``CurrentLeader``: no hint (not written on the wire).
_NO_HINT: Final = (-1, -1)
#: A partition not read (overwritten before use).
_UNREAD: Final = PartitionNews(int(ErrorCode.UNKNOWN_SERVER_ERROR), 0, -1, -1, -1)


class DataApis:
    """The data handlers of one broker; see the module docstring."""

    def __init__(
        self, helper: RequestHelper, backend: MetadataBackend, replica_manager: ReplicaManager
    ) -> None:
        self.helper = helper
        #: Resolves topic ids (Fetch v13+, Produce v13) to names.
        self.backend = backend
        self.replica_manager = replica_manager
        #: KIP-227 incremental fetch sessions.
        self.sessions = replica_manager.fetch_sessions

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], HandlerResult]]:
        return {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
        }

    # --- Produce (0) --------------------------------------------------------------------

    def handle_produce(self, header: RequestHeader, body: Any) -> HandlerResult:
        acks = int(body.acks)
        throttle_ms = current_throttle_ms()  # client quotas (tidelog.server.apis.throttling)
        entries: dict[TopicPartition, bytes] = {}
        early: dict[TopicPartition, ProduceResult] = {}
        order: list[TopicPartition] = []
        refused = {} if self.helper.authorizer is None else self._produce_refusals(body)
        for topic in body.topic_data:
            name = _topic_name_of(topic, self.backend) or ""
            if refused and name in refused:
                # Nothing of a refused topic is written; with acks=0 the connection closes
                # below, as for any failed partition (Kafka's handleProduceRequest).
                refusal = ProduceResult(refused[name])
                for part in topic.partition_data:
                    tp = TopicPartition(name, int(part.index))
                    order.append(tp)
                    early[tp] = refusal
                continue
            for part in topic.partition_data:
                tp = TopicPartition(name, int(part.index))
                order.append(tp)
                if acks not in (0, 1, -1):
                    early[tp] = ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS)
                elif topic_name_error(name):
                    early[tp] = ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION)
                elif part.records is None:
                    early[tp] = ProduceResult(ErrorCode.CORRUPT_MESSAGE, message="null records")
                elif header.api_version < 7 and uses_codec(part.records, Compression.ZSTD):
                    # KIP-110: zstd batches need Produce v7 (Kafka's ProduceRequest.validate).
                    early[tp] = ProduceResult(
                        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                        message="Produce requests below v7 may not use zstd compression",
                    )
                else:
                    entries[tp] = part.records
        appended = self.replica_manager.append_records(entries, acks)

        if acks == 0:
            failed = [tp for tp, (r, _req) in appended.items() if r.error != ErrorCode.NONE]
            failed += list(early)
            if failed:
                # Kafka closes the connection when an acks=0 produce fails: the client has no
                # other way to learn of it, and reconnecting makes it refresh its metadata.
                raise CloseConnection(f"acks=0 produce to {failed[0]} failed")
            return None
        results = {tp: result for tp, (result, _req) in appended.items()}
        results.update(early)
        if acks != -1 or all(req < 0 for _r, req in appended.values()):
            return self._produce_response(header, order, results, throttle_ms)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def respond(final: dict[TopicPartition, ProduceResult]) -> None:
            if not future.done():
                final.update(early)
                future.set_result(self._produce_response(header, order, final, throttle_ms))

        timeout_ms = int(body.timeout.total_seconds() * 1000)
        self.replica_manager.wait_for_acks(appended, timeout_ms, respond)
        return future

    def _produce_response(
        self,
        header: RequestHeader,
        order: Sequence[TopicPartition],
        final: Mapping[TopicPartition, ProduceResult],
        throttle_ms: int,
    ) -> Response:
        """The Produce answer: ``final``'s results in request order, grouped by topic, with
        the client quota's throttle time (``tidelog.server.apis.throttling``)."""
        hints, endpoints = produce_hints(
            self.backend, self.helper.own_address, header.api_version, final
        )
        by_topic: dict[str, list[ProducePartitionResponse]] = {}
        for tp in order:
            r = final[tp]
            by_topic.setdefault(tp.topic, []).append(
                ProducePartitionResponse(
                    index=tp.partition,
                    error_code=int(r.error),
                    base_offset=r.base_offset,
                    log_append_time_ms=r.log_append_time_ms,
                    log_start_offset=r.log_start_offset,
                    record_errors=r.record_errors,
                    error_message=r.message,
                    current_leader=hints.get(tp, _NO_HINT),
                )
            )
        topics = [
            ProduceTopicResponse(name=name, partitions=parts) for name, parts in by_topic.items()
        ]
        # The hand-written encoder (byte-exact with kio, ~10x faster).
        frame = encode_produce_response(
            header.correlation_id,
            header.api_version,
            topics,
            throttle_time_ms=throttle_ms,
            node_endpoints=endpoints,
        )
        return Response([frame])

    def _produce_refusals(self, body: Any) -> dict[str, ErrorCode]:
        """Kafka's handleProduceRequest: a request carrying transactional batches needs WRITE
        on its transactional id, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        then each topic needs WRITE (TOPIC_AUTHORIZATION_FAILED for its partitions only).
        Idempotent batches need nothing more since KIP-679 (InitProducerId checked)."""
        authorizer = self.helper.authorizer
        names = [_topic_name_of(t, self.backend) or "" for t in body.topic_data]
        if any(
            authz.has_transactional_records(p.records)
            for t in body.topic_data
            for p in t.partition_data
        ):
            txn_id = getattr(body, "transactional_id", None)
            if txn_id is None or not authz.allowed(
                authorizer,
                AclOperation.WRITE,
                ResourceType.TRANSACTIONAL_ID,
                str(txn_id),
                ApiKey.PRODUCE,
            ):
                return dict.fromkeys(names, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = authz.denied_names(
            authorizer, AclOperation.WRITE, ResourceType.TOPIC, names, ApiKey.PRODUCE
        )
        return dict.fromkeys(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    # --- Fetch (1) ----------------------------------------------------------------------

    def handle_fetch(self, header: RequestHeader, body: Any) -> HandlerResult:
        """Fetch in four steps: the session (``fetch_session``, KIP-227) says which
        partitions to read, ``_fetch_plan`` splits them by how each is answered, the replica
        manager reads them (at once, or parked until min_bytes or max_wait), and
        ``_fetch_response`` answers (an incremental fetch: only the partitions with news)."""
        version = header.api_version
        replica_id = fetch_replica_id(body)
        requested, forgotten = self._session_request(body, version)
        context = self.sessions.new_context(
            int(getattr(body, "session_id", INVALID_SESSION_ID)),
            int(getattr(body, "session_epoch", FINAL_EPOCH)),
            uses_topic_ids=version >= 13,
            privileged=replica_id >= 0,
            requested=requested,
            forgotten=forgotten,
            now_ms=now_ms(),
        )
        if context.error != ErrorCode.NONE:
            # Kafka's SessionErrorContext: the error alone, no partitions, no session.
            return self.helper.respond(
                header,
                {"error_code": context.error, "session_id": INVALID_SESSION_ID, "responses": []},
            )
        plan = self._fetch_plan(context, replica_id)
        # An unknown or refused partition the request lists is answered at once; one that
        # only an incremental session holds was answered before and does not cut a long
        # poll short (else such a session would spin).
        asked = (
            None if context.session is None else {p.key(context.uses_topic_ids) for p in requested}
        )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def respond(_reads: Sequence[PartitionRead], results: list[FetchResult]) -> None:
            if not future.done():
                indexes = plan.read + plan.woken
                future.set_result(self._fetch_response(header, context, indexes, plan, results))

        urgent = any(
            asked is None or context.partitions[i].key(context.uses_topic_ids) in asked
            for i in (*plan.unknown, *plan.refused)
        )
        min_bytes = int(body.min_bytes)
        max_bytes = int(getattr(body, "max_bytes", 0x7FFFFFFF))
        start = functools.partial(
            self.replica_manager.fetch,
            plan.requests,
            replica_id=plan.replica_id,
            max_bytes=max_bytes,
            min_bytes=0 if urgent else min_bytes,
            max_wait_ms=int(body.max_wait.total_seconds() * 1000),
            respond=respond,
            isolation_level=int(getattr(body, "isolation_level", READ_UNCOMMITTED)),
            # KIP-392: a consumer's Fetch v11+ may be served by a follower (Kafka's
            # ClientMetadata, with or without a rack).
            client=ClientMetadata(str(body.rack_id or ""), current_request().listener_name)
            if version >= 11 and replica_id < 0
            else None,
            woken=self._wake_source(context, plan),
        )
        start_when_loaded(
            start, self.replica_manager.uncached_reads(plan.requests, max_bytes), future
        )
        if future.done():
            return future.result()
        return future

    @staticmethod
    def _wake_source(context: FetchContext, plan: FetchPlan) -> WakeSource | None:
        """A follower's session fetch with parked partitions wakes on its session's key and
        then reads the woken ones (``fetch_session`` rule 7), appended to the context's
        partitions so that the answer finds them (``plan.woken``)."""
        session = context.session
        if session is None or not session.parked:
            return None

        def take_woken() -> list[PartitionRead]:
            reads: list[PartitionRead] = []
            for part in session.woken:
                assert part.tp is not None, "a parked partition is resolved"
                plan.woken.append(len(context.partitions))
                context.partitions.append(part)
                reads.append(
                    PartitionRead(
                        part.tp,
                        part.fetch_offset,
                        part.max_bytes,
                        part.current_leader_epoch,
                        part.replica_log_start_offset,
                    )
                )
            session.woken.clear()
            return reads

        return WakeSource(session.wake_key, take_woken)

    def _session_request(
        self, body: Any, version: int
    ) -> tuple[list[SessionPartition], list[SessionKey]]:
        """The partitions a Fetch lists, and those it forgets (KIP-227), keyed by topic id
        from v13 (names resolved by ``_fetch_plan``) and by name below."""
        requested: list[SessionPartition] = []
        for topic in body.topics:
            name = None if version >= 13 else _topic_name_of(topic, self.backend)
            topic_id = getattr(topic, "topic_id", None)
            requested.extend(
                SessionPartition(
                    name,
                    topic_id,
                    int(part.partition),
                    int(part.fetch_offset),
                    int(part.partition_max_bytes),
                    int(getattr(part, "current_leader_epoch", -1)),
                    replica_log_start_offset=int(getattr(part, "log_start_offset", -1)),
                )
                for part in topic.partitions
            )
        forgotten: list[SessionKey] = []
        for topic in getattr(body, "forgotten_topics_data", None) or ():
            key = topic.topic_id if version >= 13 else str(topic.topic)
            forgotten.extend((key, int(p)) for p in topic.partitions)
        return requested, forgotten

    def _fetch_plan(self, context: FetchContext, replica_id: int) -> FetchPlan:
        """The partitions to read, those answered without reading (unknown topic ids,
        refused topics) and, in a follower's incremental fetch, the quiet ones, which
        it parks in the session (``_quiet_test``; ``fetch_session`` rule 7). With topic ids
        the names are resolved again at each fetch: a session outlives the metadata it
        started with."""
        plan = FetchPlan(replica_id)
        partitions = context.partitions
        if context.uses_topic_ids:
            self._resolve_names(partitions)
        refused: set[int] = set()
        if self.helper.authorizer is not None:
            refused = self._fetch_refusals(partitions, replica_id)
        is_quiet = self._quiet_test(context, replica_id)
        session = context.session
        now = now_ms()
        for i, part in enumerate(partitions):
            topic = part.topic
            if topic is None:
                plan.unknown.append(i)
                continue
            if i in refused:
                plan.refused.append(i)
                continue
            tp = part.tp
            if tp is None or tp.topic != topic:
                tp = part.tp = TopicPartition(topic, part.partition)
            if is_quiet is not None and session is not None and is_quiet(tp, part):
                self.sessions.park(session, part, replica_id, now)
                plan.parked.append(i)
                continue
            plan.requests.append(
                PartitionRead(
                    tp,
                    part.fetch_offset,
                    part.max_bytes,
                    part.current_leader_epoch,
                    part.replica_log_start_offset,
                )
            )
            plan.read.append(i)
        return plan

    def _resolve_names(self, partitions: list[SessionPartition]) -> None:
        """Each partition's topic name from its topic id (None: unknown here)."""
        names: dict[Any, str | None] = {}
        for part in partitions:
            topic_id = part.topic_id
            if topic_id not in names:
                info = None
                if topic_id is not None and topic_id.int != 0:
                    info = self.backend.by_id(topic_id)
                names[topic_id] = info.name if info is not None else None
            part.topic = names[topic_id]

    def _quiet_test(
        self, context: FetchContext, replica_id: int
    ) -> Callable[[TopicPartition, SessionPartition], bool] | None:
        """In a follower's incremental fetch, the test of a partition its request does not
        list (its fetch offset did not move) being quiet for it
        (``ReplicaManager.quiet_for_follower``, which records the fetch): such partitions
        are parked: not read, checked or answered until they change (``fetch_session`` rule 7).
        None for any other fetch."""
        if context.session is None or replica_id < 0:
            return None
        follower = BrokerId(replica_id)
        quiet_for = self.replica_manager.quiet_for_follower
        asked = {id(part) for part in context.asked}
        now = now_ms()

        def is_quiet(tp: TopicPartition, part: SessionPartition) -> bool:
            return id(part) not in asked and quiet_for(
                follower,
                tp,
                part.fetch_offset,
                part.current_leader_epoch,
                part.high_watermark,
                part.log_start_offset,
                now,
            )

        return is_quiet

    def _fetch_response(
        self,
        header: RequestHeader,
        context: FetchContext,
        indexes: list[int],
        plan: FetchPlan,
        results: list[FetchResult],
    ) -> Response:
        """The answer to ``plan`` once read: the partitions the session chooses (all but in
        an incremental fetch, ``fetch_session`` rule 4), grouped by topic (by topic id from
        v13), encoded by the hand-written encoder. Only the chosen partitions' answers are
        built: an idle follower's incremental fetch over thousands of partitions encodes
        none."""
        version = header.api_version
        # Parked partitions have no news (None): the session leaves them out.
        news: list[PartitionNews | None] = [_UNREAD] * len(context.partitions)
        for i in plan.parked:
            news[i] = None
        read: dict[int, FetchResult] = {}
        for i, result in zip(indexes, results, strict=True):
            if version < 10 and plan.replica_id < 0 and holds_zstd(result.records):
                # KIP-110: consumers below Fetch v10 cannot read zstd batches.
                result = FetchResult(  # noqa: PLW2901
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    result.high_watermark,
                    result.log_start_offset,
                    last_stable_offset=result.last_stable_offset,
                )
            read[i] = result
            news[i] = PartitionNews(
                int(result.error),
                result.records.length if result.records is not None else 0,
                result.high_watermark,
                result.last_stable_offset,
                result.log_start_offset,
                result.preferred_read_replica,
            )
        errors = dict.fromkeys(plan.unknown, ErrorCode.UNKNOWN_TOPIC_ID)
        errors.update(dict.fromkeys(plan.refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        for i, error in errors.items():
            news[i] = PartitionNews(int(error), 0, -1, -1, -1)
        session_id, chosen = self.sessions.respond(context, news, now_ms())
        hints, endpoints = fetch_hints(
            self.backend,
            self.helper.own_address,
            version,
            partitions=context.partitions,
            chosen=chosen,
            read=read,
        )
        by_topic: dict[Any, list[FetchPartitionResponse]] = {}
        names: dict[Any, tuple[str, Any]] = {}
        for i in chosen:
            part = context.partitions[i]
            k = part.topic_id if version >= 13 else part.topic
            names[k] = (part.topic or "", part.topic_id)
            by_topic.setdefault(k, []).append(
                partition_answer(part.partition, read[i], hints.get(i, _NO_HINT))
                if i in read
                else FetchPartitionResponse(
                    partition_index=part.partition,
                    error_code=int(errors[i]),
                    aborted_transactions=(),
                )
            )
        topics = [
            FetchTopicResponse(topic=names[k][0], topic_id=names[k][1], partitions=parts)
            for k, parts in by_topic.items()
        ]
        return Response(
            encode_fetch_response(
                header.correlation_id,
                version,
                topics,
                session_id=session_id,
                node_endpoints=endpoints,
            )
        )

    def _fetch_refusals(self, partitions: list[SessionPartition], replica_id: int) -> set[int]:
        """Kafka's handleFetchRequest: a follower (replica_id >= 0) needs CLUSTER_ACTION on
        the cluster, else every partition is TOPIC_AUTHORIZATION_FAILED (Kafka's answer,
        not CLUSTER_AUTHORIZATION_FAILED); a consumer needs READ on each topic (unknown
        topic ids stay UNKNOWN_TOPIC_ID). The indexes of the refused partitions."""
        if replica_id >= 0:
            if authz.cluster_allowed(
                self.helper.authorizer, AclOperation.CLUSTER_ACTION, ApiKey.FETCH
            ):
                return set()
            return set(range(len(partitions)))
        denied = authz.denied_names(
            self.helper.authorizer,
            AclOperation.READ,
            ResourceType.TOPIC,
            [p.topic for p in partitions if p.topic is not None],
            ApiKey.FETCH,
        )
        if not denied:
            return set()
        return {i for i, p in enumerate(partitions) if p.topic is not None and p.topic in denied}

    # --- ListOffsets (2) ----------------------------------------------------------------

    def handle_list_offsets(self, header: RequestHeader, body: Any) -> HandlerResult:
        isolation_level = int(getattr(body, "isolation_level", READ_UNCOMMITTED))
        # Kafka's handleListOffsetRequest: DESCRIBE on each topic.
        denied = authz.denied_names(
            self.helper.authorizer,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            [str(t.name) for t in body.topics],
            ApiKey.LIST_OFFSETS,
        )
        topics = []
        for topic in body.topics:
            partitions = []
            if denied and topic.name in denied:
                partitions = [
                    {
                        "partition_index": int(part.partition_index),
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        "old_style_offsets": [],
                    }
                    for part in topic.partitions
                ]
                topics.append({"name": topic.name, "partitions": partitions})
                continue
            for part in topic.partitions:
                tp = TopicPartition(topic.name, int(part.partition_index))
                partitions.append(
                    {
                        "partition_index": tp.partition,
                        **self._list_offset(
                            tp,
                            int(part.timestamp),
                            int(getattr(part, "current_leader_epoch", -1)),
                            isolation_level,
                            lagging_error=_lagging_error(header.api_version, body),
                        ),
                    }
                )
            topics.append({"name": topic.name, "partitions": partitions})
        return self.helper.respond(header, {"topics": topics})

    def _list_offset(
        self,
        tp: TopicPartition,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int = READ_UNCOMMITTED,
        *,
        lagging_error: ErrorCode | None = None,
    ) -> dict[str, Any]:
        """Offsets a consumer may read: below the high watermark, or below the last stable
        offset for read_committed (KIP-98: "latest" is then the LSO).

        KIP-207 (Kafka's ``Partition.fetchOffsetForTimestamp``): a new leader's high
        watermark may lag the records of the epochs before it until its followers fetch
        again. While it is below the start offset of the leader's epoch, "latest" and a
        lookup finding nothing below it are answered ``lagging_error`` (retriable) instead
        of an offset lower than the previous leader gave, or none: a consumer retries and
        finds the records the previous leader acknowledged. None: no such answer (a
        request from a replica, or one not from a client).
        """
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None:
            return {"error_code": self.replica_manager.not_hosted_error(tp)}
        partition = hosted.partition
        error = partition.validate_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return {"error_code": error}
        the_log = hosted.log
        hw = partition.high_watermark
        lagging = (
            lagging_error
            if lagging_error is not None
            and partition.leader_epoch_start_offset is not None
            and partition.leader_epoch_start_offset > hw
            else None
        )
        if isolation_level == READ_COMMITTED:
            hw = the_log.last_stable_offset(hw)
        epoch = partition.leader_epoch
        if timestamp == EARLIEST_TIMESTAMP:
            offset, ts = the_log.log_start_offset, -1
        elif timestamp == LATEST_TIMESTAMP:
            if lagging is not None:
                return {"error_code": lagging}
            offset, ts = hw, -1
        elif timestamp < 0 and timestamp != MAX_TIMESTAMP:
            return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        else:
            found = (
                the_log.latest_timestamp()
                if timestamp == MAX_TIMESTAMP
                else the_log.offset_for_timestamp(timestamp)
            )
            # Kafka filters both lookups alike: only a record below the last fetchable
            # offset is an answer; past it, the lagging error if any, else none (-1).
            if found is None or found[0] >= hw:
                if lagging is not None:
                    return {"error_code": lagging}
                offset, ts = -1, -1
            else:
                offset, ts = found
        return {
            "error_code": ErrorCode.NONE,
            "timestamp": ts,
            "offset": offset,
            "old_style_offsets": [offset],
            "leader_epoch": epoch,
        }

    # --- DeleteRecords (21) -------------------------------------------------------------

    def handle_delete_records(self, header: RequestHeader, body: Any) -> HandlerResult:
        topics = []
        # Kafka's handleDeleteRecordsRequest: DELETE on each topic.
        denied = authz.denied_names(
            self.helper.authorizer,
            AclOperation.DELETE,
            ResourceType.TOPIC,
            [str(t.name) for t in body.topics],
            header.api_key,
        )
        for topic in body.topics:
            partitions = []
            if denied and topic.name in denied:
                partitions = [
                    {
                        "partition_index": int(part.partition_index),
                        "low_watermark": -1,
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    }
                    for part in topic.partitions
                ]
                topics.append({"name": topic.name, "partitions": partitions})
                continue
            for part in topic.partitions:
                tp = TopicPartition(topic.name, int(part.partition_index))
                hosted = self.replica_manager.partitions.get(tp)
                if hosted is None:
                    partitions.append(
                        {
                            "partition_index": tp.partition,
                            "low_watermark": -1,
                            "error_code": self.replica_manager.not_hosted_error(tp),
                        }
                    )
                    continue
                hw = hosted.partition.high_watermark
                offset = int(part.offset)
                if offset == -1:
                    offset = hw
                if offset < 0 or offset > hw:
                    partitions.append(
                        {
                            "partition_index": tp.partition,
                            "low_watermark": -1,
                            "error_code": ErrorCode.OFFSET_OUT_OF_RANGE,
                        }
                    )
                    continue
                if offset > hosted.log.log_start_offset:
                    hosted.log.delete_records_before(offset)
                partitions.append(
                    {
                        "partition_index": tp.partition,
                        "low_watermark": hosted.log.log_start_offset,
                        "error_code": ErrorCode.NONE,
                    }
                )
            topics.append({"name": topic.name, "partitions": partitions})
        return self.helper.respond(header, {"topics": topics})

    # --- OffsetForLeaderEpoch (23) -------------------------------------------------------

    def handle_offset_for_leader_epoch(self, header: RequestHeader, body: Any) -> HandlerResult:
        """Rule 7, the leader's side: for each partition, the largest epoch <= the one asked
        and where it ends in this log (``replication.truncation``); fenced like Fetch.

        Kafka's handleOffsetForLeaderEpochRequest: CLUSTER_ACTION on the cluster (followers;
        not logged when missing) or else DESCRIBE on each topic (consumers, KIP-320)."""
        denied: frozenset[str] = frozenset()
        if self.helper.authorizer is not None and not authz.cluster_allowed(
            self.helper.authorizer,
            AclOperation.CLUSTER_ACTION,
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            log_if_denied=False,
        ):
            denied = authz.denied_names(
                self.helper.authorizer,
                AclOperation.DESCRIBE,
                ResourceType.TOPIC,
                [str(t.topic) for t in body.topics],
                ApiKey.OFFSET_FOR_LEADER_EPOCH,
            )
        topics = []
        for topic in body.topics:
            partitions = []
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, int(part.partition))
                hosted = self.replica_manager.partitions.get(tp)
                entry: dict[str, Any] = {"partition": tp.partition}
                if denied and tp.topic in denied:
                    entry.update(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                elif hosted is None:
                    entry["error_code"] = self.replica_manager.not_hosted_error(tp)
                elif (
                    error := hosted.partition.validate_leader_epoch(
                        int(getattr(part, "current_leader_epoch", -1))
                    )
                ) != ErrorCode.NONE:
                    entry["error_code"] = error
                else:
                    answer = leader_end_offset_for_epoch(
                        hosted.log.leader_epoch_cache,
                        hosted.log.log_end_offset,
                        int(part.leader_epoch),
                    )
                    entry.update(
                        error_code=ErrorCode.NONE,
                        leader_epoch=answer.leader_epoch,
                        end_offset=answer.end_offset,
                    )
                partitions.append(entry)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return self.helper.respond(header, {"topics": topics})


__all__ = ["DataApis", "HandlerResult"]
