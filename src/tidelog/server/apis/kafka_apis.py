"""One handler per Kafka API (Kafka's ``KafkaApis``) for a broker that is its own controller.

Each handler takes the decoded request (a kio entity of the negotiated version) and returns
the response entity, ``None`` when no response is due (Produce with acks=0), or a future of
either (acks=all produce, long-poll fetch). Responses are described once as plain dicts with
the union of every version's fields and narrowed to the negotiated version by
``tidelog.server.apis.messages.build``.

Errors follow Kafka: per-partition / per-topic / per-resource error codes (never an
exception for a peer's mistake). Names that fail ``Topic.validate`` get
INVALID_TOPIC_EXCEPTION (17); unknown topics and partitions UNKNOWN_TOPIC_OR_PARTITION (3);
topic configs that are unknown or out of range INVALID_CONFIG (40).

Authorization (issue 20): with an ACL authorizer (``authorizer``) each handler makes the
checks of Kafka's KafkaApis (``tidelog.server.auth.authz``) and answers TOPIC_ (29), GROUP_ (30),
CLUSTER_ (31) or TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) where Kafka does; without one
nothing is checked (one ``authorizer is None`` test per request).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, api_versions_response
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
from tidelog.server.apis.config_apis import ConfigApis
from tidelog.server.apis.messages import build
from tidelog.server.apis.topic_partitions import describe_topic_partitions
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import (
    BrokerConfig,
    topic_name_error,
    validate_topic_configs,
)
from tidelog.server.config.policies import Policies, create_topic_request
from tidelog.server.metadata.local import MetadataStore, TopicInfo
from tidelog.server.network.connection import CloseConnection, Response
from tidelog.server.network.request_context import current_request

if TYPE_CHECKING:
    from tidelog.server.auth.authorizer import AclAuthorizer
from tidelog.server.replica.manager import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchRequestPartition,
    FetchResult,
    ProduceResult,
    ReplicaManager,
    effective_topic_config,
)
from tidelog.storage.log import FetchSlice

log = logging.getLogger(__name__)

HandlerResult = Any  # kio response entity | None | asyncio.Future[entity | None]

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
#: Kafka's CreatePartitions message for a topic without ALTER.
CREATE_PARTITIONS_DENIED = "The topic authorization is failed."


def _holds_zstd(records: FetchSlice | None) -> bool:
    """Whether fetched records hold a zstd batch (read only for Fetch below v10)."""
    if records is None or records.length == 0:
        return False
    try:
        return uses_codec(records.read_bytes(), Compression.ZSTD)
    except OSError:
        return False


def _topic_name_of(item: Any, metadata: MetadataStore) -> str | None:
    """A request topic's name: ``name``/``topic`` field, or resolved from ``topic_id``."""
    for attr in ("name", "topic"):
        name = getattr(item, attr, None)
        if name:
            return str(name)
    topic_id = getattr(item, "topic_id", None)
    if topic_id is not None and topic_id.int != 0:
        info = metadata.by_id(topic_id)
        return info.name if info is not None else None
    return None


class KafkaApis:
    """The request handlers of one broker."""

    def __init__(
        self,
        config: BrokerConfig,
        metadata: MetadataStore,
        replica_manager: ReplicaManager,
        supported_versions: Mapping[ApiKey, tuple[int, int]],
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.supported_versions = supported_versions
        self.broker_id = config.broker_id
        endpoint = config.advertised_listener
        self.host, self.port = endpoint.host, endpoint.port
        self._advertised = {e.name: e for e in config.advertised_listeners}
        #: Listener name -> bound port, set by the broker once it listens (for port 0).
        self.bound_ports: Mapping[str, int] = {}
        #: The ACL authorizer (``tidelog.server.auth.authorizer``); None: everything is allowed.
        self.authorizer: AclAuthorizer | None = None
        #: KIP-108/133 policies (``tidelog.server.config.policies``); both absent by default.
        self.policies = Policies.from_config(config.values)
        self.handlers: dict[int, Callable[[RequestHeader, Any], HandlerResult]] = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
        }
        #: DescribeConfigs, (Incremental)AlterConfigs, ListConfigResources and the dynamic
        #: broker config (``tidelog.server.apis.config_apis``).
        self.config_apis = ConfigApis(self)
        self.handlers.update(self.config_apis.handlers())
        self.handlers[ApiKey.DESCRIBE_TOPIC_PARTITIONS] = functools.partial(
            describe_topic_partitions, self
        )

    def own_address(self) -> tuple[str, int]:
        """This broker's advertised address on the listener the request came in on (a
        client on the SSL listener must be sent back to the SSL port, Kafka's rule)."""
        name = current_request().listener_name
        endpoint = self._advertised.get(name)
        if endpoint is None:
            return self.host, self.port
        return endpoint.host, endpoint.port or self.bound_ports.get(name, endpoint.port)

    @staticmethod
    def response_class(header: RequestHeader) -> type[Any]:
        cls: type[Any] = load_response_schema(header.api_key, header.api_version)
        return cls

    def _respond(self, header: RequestHeader, data: Mapping[str, Any]) -> Any:
        return build(self.response_class(header), data)

    # --- topics -------------------------------------------------------------------------

    def topic_config(self, info: TopicInfo) -> dict[str, object]:
        return effective_topic_config(self.config, info.configs)

    def broker_config_changed(self) -> None:
        """A dynamic broker config changed (KIP-226): every hosted topic's log config and
        ``min.insync.replicas`` follow the new topic defaults."""
        for info in list(self.metadata.topics.values()):
            self.replica_manager.update_topic_config(info.name, self.topic_config(info))

    def live_broker_ids(self) -> list[int]:
        """The brokers of the cluster (here: this one)."""
        return [self.broker_id]

    def create_topic(
        self, name: str, num_partitions: int, overrides: Mapping[str, object]
    ) -> TopicInfo:
        """Create a topic and host its partitions (the caller validated everything)."""
        info = self.metadata.create_topic(name, num_partitions, overrides, uuid.uuid4())
        config = self.topic_config(info)
        for p in range(num_partitions):
            self.replica_manager.make_leader(TopicPartition(name, p), info.topic_id, config)
        log.info("created topic %s with %d partitions", name, num_partitions)
        return info

    def load_topics(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """At start-up: host every known topic's partitions (logs already recovered)."""
        for info in self.metadata.topics.values():
            config = self.topic_config(info)
            for p in range(info.num_partitions):
                tp = TopicPartition(info.name, p)
                try:
                    self.replica_manager.make_leader(
                        tp, info.topic_id, config, high_watermarks.get(tp)
                    )
                except KafkaError as exc:
                    # e.g. CorruptLogError: flushed data failed validation. The partition
                    # stays offline (clients get UNKNOWN_TOPIC_OR_PARTITION); others serve.
                    log.error("partition %s is offline: %s", tp, exc)

    # --- ApiVersions (18) ---------------------------------------------------------------

    def handle_api_versions(self, header: RequestHeader, body: Any) -> HandlerResult:
        table = self.supported_versions
        if ApiKey.PRODUCE in table:
            # Kafka 4's answer to KAFKA-18659: Produce is advertised from v0 although v0-v2
            # are refused, because librdkafka before 2.8 sends gzip, snappy and lz4 batches
            # uncompressed ("Broker does not support compression type") to a broker whose
            # Produce range does not include v0 (kcat 1.7 bundles librdkafka 2.0).
            table = {**table, ApiKey.PRODUCE: (0, table[ApiKey.PRODUCE][1])}
        return api_versions_response(header.api_version, table)

    # --- Metadata (3) -------------------------------------------------------------------

    def _partition_metadata(self, info: TopicInfo) -> list[dict[str, Any]]:
        partitions = []
        for p in range(info.num_partitions):
            hosted = self.replica_manager.partitions.get(TopicPartition(info.name, p))
            epoch = hosted.partition.leader_epoch if hosted is not None else -1
            partitions.append(
                {
                    "error_code": ErrorCode.NONE,
                    "partition_index": p,
                    "leader_id": self.broker_id,
                    "leader_epoch": epoch,
                    "replica_nodes": [self.broker_id],
                    "isr_nodes": [self.broker_id],
                    "offline_replicas": [],
                }
            )
        return partitions

    def _topic_metadata(self, info: TopicInfo) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.NONE,
            "name": info.name,
            "topic_id": info.topic_id,
            "is_internal": info.name == "__consumer_offsets",  # Kafka marks its internal topic
            "partitions": self._partition_metadata(info),
        }

    def metadata_access(self, header: RequestHeader, body: Any) -> authz.MetadataAccess:
        """Kafka's handleTopicMetadataRequest checks (``authz.metadata_access``): DESCRIBE
        per topic, and CREATE (cluster or topic) for the missing ones auto-creation would
        create. Everything allowed without an authorizer."""
        if self.authorizer is None:
            return authz.EVERYTHING_ALLOWED
        known = self.metadata.topics
        all_topics = body.topics is None
        if all_topics:
            names = list(known)
        else:
            names = []
            for item in body.topics:
                name = getattr(item, "name", None)
                topic_id = getattr(item, "topic_id", None)
                if not name and topic_id is not None and topic_id.int != 0:
                    found = self.metadata.by_id(topic_id)
                    if found is None:
                        continue  # UNKNOWN_TOPIC_ID: topic ids are not secret (Kafka)
                    name = found.name
                names.append(str(name or ""))
        auto_create = (
            not all_topics
            and bool(getattr(body, "allow_auto_topic_creation", True))
            and self.config.get_bool("auto.create.topics.enable")
        )
        return authz.metadata_access(
            self.authorizer,
            names,
            all_topics=all_topics,
            missing=[n for n in names if n not in known],
            auto_create=auto_create,
            api_key=header.api_key,
        )

    @staticmethod
    def metadata_refusal(name: str, topic_id: Any) -> dict[str, Any]:
        """A topic Metadata may not show: TOPIC_AUTHORIZATION_FAILED, without saying whether
        it exists; asked by id, the id is answered and not the name (Kafka's rule)."""
        by_id = topic_id is not None and topic_id.int != 0
        return {
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "name": None if by_id else name,
            "topic_id": topic_id if by_id else uuid.UUID(int=0),
            "partitions": [],
        }

    def with_topic_operations(
        self, header: RequestHeader, body: Any, topics: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Metadata v8+ ``include_topic_authorized_operations``: each shown topic's allowed
        operations (refused and unknown-id entries keep the schema default, as Kafka's)."""
        if not getattr(body, "include_topic_authorized_operations", False):
            return topics
        for entry in topics:
            name = entry.get("name")
            if name is None or entry["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                continue
            entry["topic_authorized_operations"] = authz.authorized_operations(
                self.authorizer, ResourceType.TOPIC, str(name), header.api_key
            )
        return topics

    def handle_metadata(self, header: RequestHeader, body: Any) -> HandlerResult:
        topics: list[dict[str, Any]] = []
        access = self.metadata_access(header, body)
        if body.topics is None:
            topics = [
                self._topic_metadata(i)
                for i in sorted(self.metadata.topics.values(), key=lambda i: i.name)
                if i.name not in access.hidden
            ]
        else:
            allow_auto = bool(getattr(body, "allow_auto_topic_creation", True)) and (
                self.config.get_bool("auto.create.topics.enable")
            )
            for item in body.topics:
                name = getattr(item, "name", None)
                topic_id = getattr(item, "topic_id", None)
                if not name and topic_id is not None and topic_id.int != 0:
                    found = self.metadata.by_id(topic_id)
                    if found is None:
                        topics.append(
                            {
                                "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                                "name": None,
                                "topic_id": topic_id,
                                "partitions": [],
                            }
                        )
                        continue
                    name = found.name
                name = name or ""
                if access.refused(name):
                    topics.append(self.metadata_refusal(name, topic_id))
                    continue
                info = self.metadata.topics.get(name)
                if info is None:
                    error = (
                        ErrorCode.INVALID_TOPIC_EXCEPTION
                        if topic_name_error(name)
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and allow_auto:
                        info = self.create_topic(name, self.config.get_int("num.partitions"), {})
                    else:
                        topics.append(
                            {
                                "error_code": error,
                                "name": name,
                                "topic_id": uuid.UUID(int=0),
                                "partitions": [],
                            }
                        )
                        continue
                topics.append(self._topic_metadata(info))
        return self._respond(
            header,
            {
                "brokers": [
                    {
                        "node_id": self.broker_id,
                        "host": self.own_address()[0],
                        "port": self.own_address()[1],
                        "rack": self.config.get_str("broker.rack") or None,
                    }
                ],
                "cluster_id": self.metadata.cluster_id,
                "controller_id": self.broker_id,
                "topics": self.with_topic_operations(header, body, topics),
                "cluster_authorized_operations": self.cluster_operations(header, body),
                "error_code": ErrorCode.NONE,
            },
        )

    # --- Produce (0) --------------------------------------------------------------------

    def handle_produce(self, header: RequestHeader, body: Any) -> HandlerResult:
        acks = int(body.acks)
        entries: dict[TopicPartition, bytes] = {}
        early: dict[TopicPartition, ProduceResult] = {}
        order: list[TopicPartition] = []
        refused = {} if self.authorizer is None else self._produce_refusals(body)
        for topic in body.topic_data:
            name = _topic_name_of(topic, self.metadata) or ""
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

        def make_response(final: Mapping[TopicPartition, ProduceResult]) -> Response:
            by_topic: dict[str, list[ProducePartitionResponse]] = {}
            for tp in order:
                r = final[tp]
                by_topic.setdefault(tp.topic, []).append(
                    ProducePartitionResponse(
                        index=tp.partition,
                        error_code=int(r.error),
                        base_offset=r.base_offset,
                        log_start_offset=r.log_start_offset,
                        error_message=r.message,
                    )
                )
            topics = [
                ProduceTopicResponse(name=name, partitions=parts)
                for name, parts in by_topic.items()
            ]
            # The hand-written encoder (byte-exact with kio, ~10x faster).
            frame = encode_produce_response(header.correlation_id, header.api_version, topics)
            return Response([frame])

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
            return make_response(results)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def respond(final: dict[TopicPartition, ProduceResult]) -> None:
            if not future.done():
                final.update(early)
                future.set_result(make_response(final))

        timeout_ms = int(body.timeout.total_seconds() * 1000)
        self.replica_manager.wait_for_acks(appended, timeout_ms, respond)
        return future

    def _produce_refusals(self, body: Any) -> dict[str, ErrorCode]:
        """Kafka's handleProduceRequest: a request carrying transactional batches needs WRITE
        on its transactional id, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        then each topic needs WRITE (TOPIC_AUTHORIZATION_FAILED for its partitions only).
        Idempotent batches need nothing more since KIP-679 (InitProducerId checked)."""
        authorizer = self.authorizer
        names = [_topic_name_of(t, self.metadata) or "" for t in body.topic_data]
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
        version = header.api_version
        session_id = int(getattr(body, "session_id", 0))
        if session_id != 0:
            # We never hand out sessions (a declined session is id 0, KIP-227), so any
            # non-zero id is one we do not know.
            return self._respond(
                header,
                {
                    "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                    "session_id": 0,
                    "responses": [],
                },
            )
        requests: list[FetchRequestPartition] = []
        keys: list[tuple[str, Any]] = []  # (name, topic id) per request partition
        unknown: list[tuple[Any, int, ErrorCode]] = []
        # replica_id: a top-level field before v15, inside replica_state from v15 (KIP-903).
        replica_state = getattr(body, "replica_state", None)
        replica_id = int(
            replica_state.replica_id
            if replica_state is not None
            else getattr(body, "replica_id", -1)
        )
        topics_wanted = body.topics
        refused: list[tuple[str, Any, int]] = []  # (name, topic id, partition)
        if self.authorizer is not None:
            topics_wanted, refused = self._fetch_refusals(body.topics, replica_id)
        for topic in topics_wanted:
            name = _topic_name_of(topic, self.metadata)
            topic_id = getattr(topic, "topic_id", None)
            for part in topic.partitions:
                if name is None:
                    unknown.append((topic_id, int(part.partition), ErrorCode.UNKNOWN_TOPIC_ID))
                    continue
                tp = TopicPartition(name, int(part.partition))
                requests.append(
                    FetchRequestPartition(
                        tp,
                        int(part.fetch_offset),
                        int(part.partition_max_bytes),
                        int(getattr(part, "current_leader_epoch", -1)),
                    )
                )
                keys.append((name, topic_id))
        max_bytes = int(getattr(body, "max_bytes", 0x7FFFFFFF))
        max_wait_ms = int(body.max_wait.total_seconds() * 1000)
        min_bytes = int(body.min_bytes)

        def make_response(results: list[FetchResult]) -> Response:
            by_topic: dict[Any, list[FetchPartitionResponse]] = {}
            names: dict[Any, tuple[str, Any]] = {}
            for request, (name, topic_id), result in zip(requests, keys, results, strict=True):
                k = topic_id if version >= 13 else name
                names[k] = (name, topic_id)
                if version < 10 and replica_id < 0 and _holds_zstd(result.records):
                    # KIP-110: consumers below Fetch v10 cannot read zstd batches.
                    result = FetchResult(  # noqa: PLW2901
                        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                        result.high_watermark,
                        result.log_start_offset,
                        last_stable_offset=result.last_stable_offset,
                    )
                by_topic.setdefault(k, []).append(
                    FetchPartitionResponse(
                        partition_index=request.tp.partition,
                        error_code=int(result.error),
                        high_watermark=result.high_watermark,
                        last_stable_offset=result.last_stable_offset,
                        log_start_offset=result.log_start_offset,
                        # KIP-98: read_committed consumers drop these transactions' records.
                        aborted_transactions=result.aborted_transactions or (),
                        # Records go out with sendfile straight from the segment file; empty
                        # records are b"", never null (PROTOCOL_NOTES: kafka-python crashes,
                        # librdkafka stops reporting the end of the partition).
                        records=result.records if result.records is not None else b"",
                    )
                )
            for topic_id, partition, error in unknown:
                names[topic_id] = ("", topic_id)
                by_topic.setdefault(topic_id, []).append(
                    FetchPartitionResponse(
                        partition_index=partition, error_code=int(error), aborted_transactions=()
                    )
                )
            for name, topic_id, partition in refused:
                k = topic_id if version >= 13 else name
                names[k] = (name, topic_id)
                by_topic.setdefault(k, []).append(
                    FetchPartitionResponse(
                        partition_index=partition,
                        error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                        aborted_transactions=(),
                    )
                )
            topics = [
                FetchTopicResponse(topic=names[k][0], topic_id=names[k][1], partitions=parts)
                for k, parts in by_topic.items()
            ]
            return Response(encode_fetch_response(header.correlation_id, version, topics))

        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def respond(results: list[FetchResult]) -> None:
            if not future.done():
                future.set_result(make_response(results))

        self.replica_manager.fetch(
            requests,
            replica_id=replica_id,
            max_bytes=max_bytes,
            min_bytes=min_bytes if not unknown and not refused else 0,
            max_wait_ms=max_wait_ms,
            respond=respond,
            isolation_level=int(getattr(body, "isolation_level", READ_UNCOMMITTED)),
        )
        if future.done():
            return future.result()
        return future

    def _fetch_refusals(
        self, topics: Any, replica_id: int
    ) -> tuple[list[Any], list[tuple[str, Any, int]]]:
        """Kafka's handleFetchRequest: a follower (replica_id >= 0) needs CLUSTER_ACTION on
        the cluster, else every partition is TOPIC_AUTHORIZATION_FAILED (Kafka's answer,
        not CLUSTER_AUTHORIZATION_FAILED); a consumer needs READ on each topic (unknown
        topic ids stay UNKNOWN_TOPIC_ID). The topics to serve, and the refused partitions."""
        named = [(t, _topic_name_of(t, self.metadata)) for t in topics]
        if replica_id >= 0:
            if authz.cluster_allowed(self.authorizer, AclOperation.CLUSTER_ACTION, ApiKey.FETCH):
                return list(topics), []
            denied: Any = None  # all of them
        else:
            denied = authz.denied_names(
                self.authorizer,
                AclOperation.READ,
                ResourceType.TOPIC,
                [name for t, name in named if name is not None for _ in t.partitions],
                ApiKey.FETCH,
            )
            if not denied:
                return list(topics), []
        served: list[Any] = []
        refused: list[tuple[str, Any, int]] = []
        for topic, name in named:
            if denied is None or (name is not None and name in denied):
                topic_id = getattr(topic, "topic_id", None)
                refused.extend((name or "", topic_id, int(p.partition)) for p in topic.partitions)
            else:
                served.append(topic)
        return served, refused

    # --- ListOffsets (2) ----------------------------------------------------------------

    def handle_list_offsets(self, header: RequestHeader, body: Any) -> HandlerResult:
        isolation_level = int(getattr(body, "isolation_level", READ_UNCOMMITTED))
        # Kafka's handleListOffsetRequest: DESCRIBE on each topic.
        denied = authz.denied_names(
            self.authorizer,
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
                        ),
                    }
                )
            topics.append({"name": topic.name, "partitions": partitions})
        return self._respond(header, {"topics": topics})

    def _list_offset(
        self,
        tp: TopicPartition,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> dict[str, Any]:
        """Offsets a consumer may read: below the high watermark, or below the last stable
        offset for read_committed (KIP-98: "latest" is then the LSO)."""
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None:
            return {"error_code": self.replica_manager.not_hosted_error(tp)}
        error = hosted.partition.validate_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return {"error_code": error}
        the_log = hosted.log
        hw = hosted.partition.high_watermark
        if isolation_level == READ_COMMITTED:
            hw = the_log.last_stable_offset(hw)
        epoch = hosted.partition.leader_epoch
        if timestamp == EARLIEST_TIMESTAMP:
            offset, ts = the_log.log_start_offset, -1
        elif timestamp == LATEST_TIMESTAMP:
            offset, ts = hw, -1
        elif timestamp == MAX_TIMESTAMP:
            found = the_log.latest_timestamp()
            offset, ts = found if found is not None else (-1, -1)
        elif timestamp < 0:
            return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        else:
            found = the_log.offset_for_timestamp(timestamp)
            if found is None or found[0] >= hw:
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

    # --- CreateTopics (19) --------------------------------------------------------------

    def create_topics_access(
        self, header: RequestHeader, body: Any
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Kafka's handleCreateTopicsRequest: (the topics that may not be created: CREATE on
        neither the cluster nor the topic; the created topics whose configs are not shown:
        no DESCRIBE_CONFIGS, answered with topic_config_error_code
        TOPIC_AUTHORIZATION_FAILED and no configs, partition count or replication factor)."""
        if self.authorizer is None:
            return frozenset(), frozenset()
        names = [str(t.name) for t in body.topics]
        not_creatable: frozenset[str] = frozenset()
        if not authz.cluster_allowed(
            self.authorizer, AclOperation.CREATE, header.api_key, log_if_denied=False
        ):
            not_creatable = authz.denied_names(
                self.authorizer, AclOperation.CREATE, ResourceType.TOPIC, names, header.api_key
            )
        configs_hidden = authz.denied_names(
            self.authorizer,
            AclOperation.DESCRIBE_CONFIGS,
            ResourceType.TOPIC,
            names,
            header.api_key,
            log_if_denied=False,
        )
        return not_creatable, configs_hidden

    @staticmethod
    def hide_created_configs(
        result: dict[str, Any], error: ErrorCode, configs_hidden: frozenset[str]
    ) -> None:
        """CreateTopics without DESCRIBE_CONFIGS on the topic: Kafka keeps this error for a
        topic created or refused for authorization (its other failures reset it)."""
        if (
            configs_hidden
            and result["name"] in configs_hidden
            and error in (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ):
            result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def handle_create_topics(self, header: RequestHeader, body: Any) -> HandlerResult:
        results = []
        validate_only = bool(getattr(body, "validate_only", False))
        not_creatable, configs_hidden = self.create_topics_access(header, body)
        for topic in body.topics:
            name = str(topic.name)
            result: dict[str, Any] = {"name": name, "topic_id": uuid.UUID(int=0)}
            error, message = ErrorCode.NONE, None
            num_partitions = int(topic.num_partitions)
            rf = int(topic.replication_factor)
            if num_partitions == -1:
                num_partitions = self.config.get_int("num.partitions")
            if rf == -1:
                rf = self.config.get_int("default.replication.factor")
            overrides: dict[str, object] = {}
            if topic.assignments:
                num_partitions = len(topic.assignments)
                rf = len(topic.assignments[0].broker_ids)
            if name in not_creatable:
                error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            elif problem := topic_name_error(name):
                error, message = ErrorCode.INVALID_TOPIC_EXCEPTION, problem
            elif name in self.metadata.topics:
                error, message = ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            elif num_partitions <= 0:
                error, message = ErrorCode.INVALID_PARTITIONS, "Number of partitions must be > 0"
            elif rf <= 0 or rf > 1:
                error = ErrorCode.INVALID_REPLICATION_FACTOR
                message = f"Replication factor: {rf} larger than available brokers: 1."
            elif topic.assignments and any(
                list(a.broker_ids) != [self.broker_id] for a in topic.assignments
            ):
                error = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                message = f"Replica assignments must name broker {self.broker_id} only"
            else:
                parsed, problem = validate_topic_configs({c.name: c.value for c in topic.configs})
                if problem:
                    error, message = ErrorCode.INVALID_CONFIG, problem
                else:
                    error, message = self.policies.check_create(
                        create_topic_request(topic, num_partitions, rf)
                    )
                overrides = {k: v for k, v in parsed.items() if v is not None}
            if error == ErrorCode.NONE and not validate_only:
                info = self.create_topic(name, num_partitions, overrides)
                result["topic_id"] = info.topic_id
            if error == ErrorCode.NONE and name not in configs_hidden:
                result.update(
                    num_partitions=num_partitions,
                    replication_factor=rf,
                    configs=self.config_apis.topic_entries(overrides),
                )
            result.update(error_code=error, error_message=message)
            self.hide_created_configs(result, error, configs_hidden)
            results.append(result)
        return self._respond(header, {"topics": results})

    # --- DeleteTopics (20) --------------------------------------------------------------

    def delete_topics_refusals(
        self, header: RequestHeader, items: list[tuple[str | None, Any]]
    ) -> dict[int, dict[str, Any]]:
        """Kafka's handleDeleteTopicsRequest, by request index: a topic asked by id without
        DESCRIBE is TOPIC_AUTHORIZATION_FAILED without its name; one without DELETE is
        TOPIC_AUTHORIZATION_FAILED (before anything says whether it exists). Unknown ids
        stay UNKNOWN_TOPIC_ID."""
        if self.authorizer is None:
            return {}
        resolved: list[tuple[str | None, bool]] = []
        for name, topic_id in items:
            if name:
                resolved.append((str(name), False))
            else:
                info = self.metadata.by_id(topic_id) if topic_id is not None else None
                resolved.append((info.name if info is not None else None, True))
        describe_denied = authz.denied_names(
            self.authorizer,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            [n for n, by_id in resolved if n is not None and by_id],
            header.api_key,
        )
        delete_denied = authz.denied_names(
            self.authorizer,
            AclOperation.DELETE,
            ResourceType.TOPIC,
            [n for n, _ in resolved if n is not None],
            header.api_key,
        )
        refusals: dict[int, dict[str, Any]] = {}
        for i, ((name, by_id), (_, topic_id)) in enumerate(zip(resolved, items, strict=True)):
            if name is None or (name not in describe_denied and name not in delete_denied):
                continue
            hide = by_id and name in describe_denied
            refusals[i] = {
                "name": None if hide else name,
                "topic_id": topic_id or uuid.UUID(int=0),
                "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            }
        return refusals

    def handle_delete_topics(self, header: RequestHeader, body: Any) -> HandlerResult:
        items: list[tuple[str | None, Any]] = []
        if getattr(body, "topics", None):
            items = [(t.name, t.topic_id) for t in body.topics]
        else:
            items = [(n, None) for n in getattr(body, "topic_names", ())]
        results = []
        refusals = self.delete_topics_refusals(header, items)
        for i, (name, topic_id) in enumerate(items):
            if i in refusals:
                results.append(refusals[i])
                continue
            info = None
            if name:
                info = self.metadata.topics.get(name)
            elif topic_id is not None:
                info = self.metadata.by_id(topic_id)
            if info is None:
                results.append(
                    {
                        "name": name,
                        "topic_id": topic_id or uuid.UUID(int=0),
                        "error_code": ErrorCode.UNKNOWN_TOPIC_ID
                        if not name
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    }
                )
                continue
            if not self.config.get_bool("delete.topic.enable"):
                results.append(
                    {
                        "name": info.name,
                        "topic_id": info.topic_id,
                        "error_code": ErrorCode.TOPIC_DELETION_DISABLED,
                    }
                )
                continue
            self.metadata.delete_topic(info.name)
            self.replica_manager.delete_partitions(
                [TopicPartition(info.name, p) for p in range(info.num_partitions)]
            )
            log.info("deleted topic %s", info.name)
            results.append(
                {"name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.NONE}
            )
        return self._respond(header, {"responses": results})

    # --- CreatePartitions (37) ----------------------------------------------------------

    def alter_denied(self, header: RequestHeader, body: Any) -> frozenset[str]:
        """CreatePartitions: ALTER on each topic (Kafka's handleCreatePartitionsRequest)."""
        return authz.denied_names(
            self.authorizer,
            AclOperation.ALTER,
            ResourceType.TOPIC,
            [str(t.name) for t in body.topics],
            header.api_key,
        )

    def handle_create_partitions(self, header: RequestHeader, body: Any) -> HandlerResult:
        results = []
        denied = self.alter_denied(header, body)
        for topic in body.topics:
            name = str(topic.name)
            info = self.metadata.topics.get(name)
            count = int(topic.count)
            error, message = ErrorCode.NONE, None
            if name in denied:
                error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, CREATE_PARTITIONS_DENIED
            elif info is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message = f"The topic '{name}' does not exist."
            elif count <= info.num_partitions:
                error = ErrorCode.INVALID_PARTITIONS
                message = (
                    f"Topic currently has {info.num_partitions} partitions, which is higher "
                    f"than or equal to the requested {count}."
                )
            elif topic.assignments is not None and any(
                list(a.broker_ids) != [self.broker_id] for a in topic.assignments
            ):
                error = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                message = f"Replica assignments must name broker {self.broker_id} only"
            elif not body.validate_only:
                config = self.topic_config(info)
                for p in range(info.num_partitions, count):
                    self.replica_manager.make_leader(TopicPartition(name, p), info.topic_id, config)
                self.metadata.set_partitions(name, count)
            results.append({"name": name, "error_code": error, "error_message": message})
        return self._respond(header, {"results": results})

    # --- DeleteRecords (21) -------------------------------------------------------------

    def handle_delete_records(self, header: RequestHeader, body: Any) -> HandlerResult:
        topics = []
        # Kafka's handleDeleteRecordsRequest: DELETE on each topic.
        denied = authz.denied_names(
            self.authorizer,
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
        return self._respond(header, {"topics": topics})

    # --- DescribeCluster (60) -----------------------------------------------------------

    def handle_describe_cluster(self, header: RequestHeader, body: Any) -> HandlerResult:
        return self._respond(
            header,
            {
                "error_code": ErrorCode.NONE,
                "endpoint_type": 1,
                "cluster_id": self.metadata.cluster_id,
                "controller_id": self.broker_id,
                "brokers": [
                    {
                        "broker_id": self.broker_id,
                        "host": self.own_address()[0],
                        "port": self.own_address()[1],
                        "rack": self.config.get_str("broker.rack") or None,
                    }
                ],
                "cluster_authorized_operations": self.cluster_operations(header, body),
            },
        )

    def cluster_operations(self, header: RequestHeader, body: Any) -> int:
        """``cluster_authorized_operations`` of DescribeCluster / Metadata v8-v10: when asked,
        the cluster's allowed operations if DESCRIBE on it is allowed, else 0 (Kafka)."""
        if not getattr(body, "include_cluster_authorized_operations", False):
            return authz.AUTHORIZED_OPERATIONS_OMITTED
        return authz.cluster_authorized_operations(self.authorizer, header.api_key)

    # --- OffsetForLeaderEpoch (23) -------------------------------------------------------

    def handle_offset_for_leader_epoch(self, header: RequestHeader, body: Any) -> HandlerResult:
        """Rule 7, the leader's side: for each partition, the largest epoch <= the one asked
        and where it ends in this log (``replication.truncation``); fenced like Fetch.

        Kafka's handleOffsetForLeaderEpochRequest: CLUSTER_ACTION on the cluster (followers;
        not logged when missing) or else DESCRIBE on each topic (consumers, KIP-320)."""
        denied: frozenset[str] = frozenset()
        if self.authorizer is not None and not authz.cluster_allowed(
            self.authorizer,
            AclOperation.CLUSTER_ACTION,
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            log_if_denied=False,
        ):
            denied = authz.denied_names(
                self.authorizer,
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
        return self._respond(header, {"topics": topics})

    # --- InitProducerId (22) ------------------------------------------------------------

    def idempotent_refusal(self, header: RequestHeader, body: Any) -> Any:
        """KIP-679 (Kafka's handleInitProducerIdRequest): an idempotent producer needs
        IDEMPOTENT_WRITE on the cluster or WRITE on some topic, else
        CLUSTER_AUTHORIZATION_FAILED. None when allowed (or transactional: the transaction
        coordinator checks WRITE on the transactional id)."""
        if self.authorizer is None or getattr(body, "transactional_id", None):
            return None
        if authz.idempotent_write_allowed(self.authorizer, header.api_key):
            return None
        return self._respond(
            header,
            {
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )

    def handle_init_producer_id(self, header: RequestHeader, body: Any) -> HandlerResult:
        """Idempotent producers only (kafka-python 3 with acks=all asks for one). Sequence
        numbers are stored with the batches but not checked: no de-duplication yet."""
        if (refused := self.idempotent_refusal(header, body)) is not None:
            return refused
        if getattr(body, "transactional_id", None):
            return self._respond(
                header, {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            )
        return self._respond(
            header,
            {
                "error_code": ErrorCode.NONE,
                "producer_id": self.metadata.allocate_producer_id(),
                "producer_epoch": 0,
            },
        )


__all__ = ["KafkaApis"]
