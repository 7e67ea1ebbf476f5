"""A tiny in-test broker that speaks through tidelog's codec (unit tests only).

One partition per topic, records kept in memory as produced; enough to exercise the
client's framing, correlation ids, version negotiation and helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode as K

from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.codec import (
    RequestHeader,
    api_versions_response,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
)
from tidelog.protocol.errors import ProtocolError, UnsupportedVersionError
from tidelog.protocol.framing import FrameDecoder
from tidelog.protocol.records import iter_batches, stamp_batch
from tidelog.protocol.responses import (
    FetchPartitionResponse,
    FetchTopicResponse,
    encode_fetch_response,
)


def _m(api_key: int, version: int) -> Any:
    return importlib.import_module(load_response_schema(api_key, version).__module__)


@dataclass
class FakeBroker:
    versions: Mapping[ApiKey, tuple[int, int]] = field(default_factory=lambda: SUPPORTED_VERSIONS)
    node_id: int = 0
    #: topic -> (topic id, batches bytes, next offset)
    topics: dict[str, tuple[uuid.UUID, bytearray, list[int]]] = field(default_factory=dict)
    #: correlation ids to answer only after the next request (reordering) or never.
    delay_even: bool = False
    silent_apis: set[int] = field(default_factory=set)
    requests: list[RequestHeader] = field(default_factory=list)
    #: (producer id, first offset) answered to read_committed fetches (else a null array).
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)
    #: The isolation level of every Fetch and ListOffsets request, in order.
    isolation_levels: list[int] = field(default_factory=list)
    server: asyncio.Server | None = None
    port: int = 0

    async def start(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await self.server.wait_closed()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        held: list[bytes] = []
        try:
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    try:
                        header, body = decode_request(payload, self.versions)
                    except UnsupportedVersionError as exc:
                        if exc.header.api_key == ApiKey.API_VERSIONS:
                            writer.write(encode_api_versions_fallback(exc.header, self.versions))
                            continue
                        raise
                    self.requests.append(header)
                    if header.api_key in self.silent_apis:
                        continue
                    out = self._handle(header, body)
                    if out is None:
                        continue
                    if self.delay_even and header.correlation_id % 2 == 0:
                        held.append(out)
                        continue
                    writer.write(out)
                    for late in held:
                        writer.write(late)
                    held.clear()
                await writer.drain()
        except (ProtocolError, ConnectionError):
            pass
        finally:
            writer.close()

    def _handle(self, header: RequestHeader, body: Any) -> bytes | None:
        key, version = header.api_key, header.api_version
        zero = datetime.timedelta(0)
        if key == ApiKey.API_VERSIONS:
            return encode_response(header, api_versions_response(version, self.versions))
        m = _m(key, version) if key != ApiKey.FETCH else None
        if key == ApiKey.METADATA:
            assert m is not None
            names = list(self.topics) if body.topics is None else [t.name for t in body.topics]
            topics = []
            for name in names:
                known = name in self.topics
                kw: dict[str, Any] = {
                    "error_code": K.none if known else K.unknown_topic_or_partition,
                    "name": name,
                    "is_internal": False,
                    "partitions": (
                        m.MetadataResponsePartition(
                            error_code=K.none,
                            partition_index=0,
                            leader_id=self.node_id,
                            leader_epoch=3,
                            replica_nodes=(self.node_id,),
                            isr_nodes=(self.node_id,),
                            offline_replicas=(),
                        ),
                    )
                    if known
                    else (),
                }
                if version >= 10:
                    kw["topic_id"] = self.topics[name][0] if known else None
                topics.append(m.MetadataResponseTopic(**kw))
            return encode_response(
                header,
                m.MetadataResponse(
                    throttle_time=zero,
                    brokers=(
                        m.MetadataResponseBroker(
                            node_id=self.node_id, host="127.0.0.1", port=self.port, rack=None
                        ),
                    ),
                    cluster_id="fake",
                    controller_id=self.node_id,
                    topics=tuple(topics),
                ),
            )
        if key == ApiKey.PRODUCE:
            assert m is not None
            (topic_data,) = body.topic_data
            (part,) = topic_data.partition_data
            _tid, log, next_offset = self.topics[topic_data.name]
            batch = bytearray(part.records)
            base = next_offset[0]
            for pos, batch_header in list(iter_batches(bytes(batch))):
                stamp_batch(batch, pos, next_offset[0], 3)
                next_offset[0] += batch_header.last_offset_delta + 1
            log += batch
            if body.acks == 0:
                return None
            return encode_response(
                header,
                m.ProduceResponse(
                    responses=(
                        m.TopicProduceResponse(
                            name=topic_data.name,
                            partition_responses=(
                                m.PartitionProduceResponse(
                                    index=0,
                                    error_code=K.none,
                                    base_offset=base,
                                    log_append_time=None,
                                    log_start_offset=0,
                                    record_errors=(),
                                    error_message=None,
                                ),
                            ),
                        ),
                    ),
                    throttle_time=zero,
                ),
            )
        if key == ApiKey.FETCH:
            read_committed = int(body.isolation_level) == 1
            self.isolation_levels.append(int(body.isolation_level))
            topics = []
            for t in body.topics:
                tid, log, next_offset = self.topics[t.topic]
                parts = []
                for p in t.partitions:
                    records = bytes(log) if p.fetch_offset < next_offset[0] else b""
                    parts.append(
                        FetchPartitionResponse(
                            partition_index=p.partition,
                            high_watermark=next_offset[0],
                            last_stable_offset=next_offset[0],
                            log_start_offset=0,
                            records=records,
                            diverging_epoch=(2, 5) if p.last_fetched_epoch == 9 else (-1, -1),
                            aborted_transactions=self.aborted_transactions
                            if read_committed
                            else None,
                        )
                    )
                topics.append(FetchTopicResponse(topic=t.topic, topic_id=tid, partitions=parts))
            chunks = encode_fetch_response(header.correlation_id, version, topics)
            return b"".join(c for c in chunks if isinstance(c, bytes))
        if key == ApiKey.LIST_OFFSETS:
            assert m is not None
            self.isolation_levels.append(int(getattr(body, "isolation_level", 0)))
            topics = []
            for t in body.topics:
                _tid, _log, next_offset = self.topics[t.name]
                parts = [
                    m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=K.none,
                        timestamp=-1,
                        offset=next_offset[0] if p.timestamp == -1 else 0,
                        leader_epoch=3,
                    )
                    for p in t.partitions
                ]
                topics.append(m.ListOffsetsTopicResponse(name=t.name, partitions=tuple(parts)))
            return encode_response(
                header, m.ListOffsetsResponse(throttle_time=zero, topics=tuple(topics))
            )
        if key == ApiKey.CREATE_TOPICS:
            assert m is not None
            results = []
            for t in body.topics:
                exists = t.name in self.topics
                if not exists:
                    self.topics[t.name] = (uuid.uuid4(), bytearray(), [0])
                results.append(
                    m.CreatableTopicResult(
                        name=t.name,
                        error_code=K.topic_already_exists if exists else K.none,
                        error_message="exists" if exists else None,
                        num_partitions=1,
                        replication_factor=1,
                        configs=(),
                    )
                )
            return encode_response(
                header, m.CreateTopicsResponse(throttle_time=zero, topics=tuple(results))
            )
        if key == ApiKey.DELETE_TOPICS:
            assert m is not None
            results = []
            for name in body.topic_names:
                known = self.topics.pop(name, None) is not None
                results.append(
                    m.DeletableTopicResult(
                        name=name,
                        error_code=K.none if known else K.unknown_topic_or_partition,
                    )
                )
            return encode_response(
                header, m.DeleteTopicsResponse(throttle_time=zero, responses=tuple(results))
            )
        if key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            assert m is not None
            topics = [
                m.OffsetForLeaderTopicResult(
                    topic=t.topic,
                    partitions=tuple(
                        m.EpochEndOffset(
                            error_code=K.none,
                            partition=p.partition,
                            leader_epoch=min(p.leader_epoch, 3),
                            end_offset=self.topics[t.topic][2][0],
                        )
                        for p in t.partitions
                    ),
                )
                for t in body.topics
            ]
            return encode_response(
                header, m.OffsetForLeaderEpochResponse(throttle_time=zero, topics=tuple(topics))
            )
        raise AssertionError(f"fake broker does not handle {header}")
