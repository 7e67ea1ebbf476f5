"""The client against a fake broker that speaks through tidelog's codec."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from tidelog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
    BrokerConnection,
    Client,
    ClientConnectionError,
    ClientTimeoutError,
    FetchRequestPartition,
    NewTopic,
    Record,
    build_batch,
    decode_records,
)
from tidelog.client.errors import NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey, narrow_versions
from tidelog.protocol.codec import api_versions_response, decode_request, encode_response
from tidelog.protocol.errors import InvalidResponseError
from tidelog.protocol.framing import FrameDecoder, frame

from .fake_broker import FakeBroker

TP = TopicPartition("events", 0)


def run(test: Callable[[FakeBroker], Awaitable[None]], broker: FakeBroker | None = None) -> None:
    async def main() -> None:
        fake = await (broker or FakeBroker()).start()
        try:
            await asyncio.wait_for(test(fake), 20)
        finally:
            await fake.stop()

    asyncio.run(main())


def test_create_produce_fetch_list_offsets_round_trip() -> None:
    async def scenario(fake: FakeBroker) -> None:
        async with Client(fake.bootstrap) as client:
            created = await client.create_topics([NewTopic("events", 1, 1)])
            assert created["events"].error_code == ErrorCode.NONE
            again = await client.create_topics([NewTopic("events", 1, 1)])
            assert again["events"].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
            assert again["events"].message == "exists"

            batch = build_batch(
                [Record(b"v0", key=b"k0", headers=[("h", b"x")]), Record(None, key=b"k1")],
                base_timestamp_ms=1_700_000_000_000,
            )
            first = await client.produce(TP, batch)
            second = await client.produce(TP, batch)
            assert first is not None
            assert second is not None
            assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 0)
            assert second.base_offset == 2

            fetched = await client.fetch({TP: FetchRequestPartition(fetch_offset=0)})
            result = fetched[TP]
            assert result.error_code == ErrorCode.NONE
            assert result.high_watermark == 4
            records = list(decode_records(result.records))
            assert [(r.offset, r.key, r.value) for r in records] == [
                (0, b"k0", b"v0"),
                (1, b"k1", None),
                (2, b"k0", b"v0"),
                (3, b"k1", None),
            ]
            assert records[0].headers == (("h", b"x"),)
            assert records[0].timestamp_ms == 1_700_000_000_000
            assert records[0].leader_epoch == 3

            empty = await client.fetch({TP: FetchRequestPartition(fetch_offset=4)})
            assert empty[TP].records == b""

            offsets = await client.list_offsets({TP: LATEST_TIMESTAMP})
            assert offsets[TP].offset == 4
            assert (await client.list_offsets({TP: EARLIEST_TIMESTAMP}))[TP].offset == 0

            epochs = await client.offset_for_leader_epoch({TP: (2, -1)})
            assert epochs[TP].leader_epoch == 2
            assert epochs[TP].end_offset == 4

            deleted = await client.delete_topics(["events", "nope"])
            assert deleted["events"].error_code == ErrorCode.NONE
            assert deleted["nope"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario)


def test_metadata_describes_brokers_topics_and_leaders() -> None:
    async def scenario(fake: FakeBroker) -> None:
        async with Client(fake.bootstrap) as client:
            await client.create_topics([NewTopic("a", 1, 1)])
            cluster = await client.metadata(["a", "missing"])
            assert cluster.cluster_id == "fake"
            assert cluster.brokers[0].port == fake.port
            assert cluster.topics["a"].partitions[0].leader_epoch == 3
            assert cluster.topics["a"].topic_id == fake.topics["a"][0]
            assert cluster.topics["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert cluster.leader_for(TopicPartition("a", 0)) == 0
            assert cluster.leader_for(TopicPartition("missing", 0)) is None

    run(scenario)


def test_diverging_epoch_is_reported() -> None:
    async def scenario(fake: FakeBroker) -> None:
        async with Client(fake.bootstrap) as client:
            await client.create_topics([NewTopic("events", 1, 1)])
            result = await client.fetch(
                {TP: FetchRequestPartition(fetch_offset=0, last_fetched_epoch=9)}, replica_id=1
            )
            assert result[TP].diverging_epoch == (2, 5)

    run(scenario)


def test_read_committed_fetches_return_the_aborted_transactions() -> None:
    async def scenario(fake: FakeBroker) -> None:
        fake.aborted_transactions = [(7, 0), (9, 12)]
        async with Client(fake.bootstrap) as client:
            await client.create_topics([NewTopic("events", 1, 1)])
            committed = await client.fetch(
                {TP: FetchRequestPartition(fetch_offset=0)}, isolation_level=READ_COMMITTED
            )
            assert committed[TP].aborted_transactions == [(7, 0), (9, 12)]
            # read_uncommitted: the broker sends a null array; the client gives [].
            uncommitted = await client.fetch({TP: FetchRequestPartition(fetch_offset=0)})
            assert uncommitted[TP].aborted_transactions == []
            await client.list_offsets({TP: LATEST_TIMESTAMP}, isolation_level=READ_COMMITTED)
        assert fake.isolation_levels == [READ_COMMITTED, READ_UNCOMMITTED, READ_COMMITTED]

    run(scenario)


def test_acks_zero_gets_no_response_and_the_connection_stays_usable() -> None:
    async def scenario(fake: FakeBroker) -> None:
        async with Client(fake.bootstrap) as client:
            await client.create_topics([NewTopic("events", 1, 1)])
            assert await client.produce(TP, build_batch([Record(b"x")]), acks=0) is None
            result = await client.produce(TP, build_batch([Record(b"y")]), acks=1)
            assert result is not None
            assert result.base_offset == 1

    run(scenario)


def test_pipelined_requests_are_matched_by_correlation_id_out_of_order() -> None:
    async def scenario(fake: FakeBroker) -> None:
        conn = await BrokerConnection.connect("127.0.0.1", fake.port)
        try:
            fake.topics = {f"t{i}": fake.topics.get(f"t{i}") or _topic() for i in range(8)}
            fake.delay_even = True

            async def ask(i: int) -> Any:
                return await conn.send(
                    MetadataRequest(
                        topics=(_metadata_topic(f"t{i}"),),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    )
                )

            responses = await asyncio.gather(*(ask(i) for i in range(8)))
            assert [r.topics[0].name for r in responses] == [f"t{i}" for i in range(8)]
            assert conn.in_flight == 0
        finally:
            await conn.close()

    run(scenario)


def test_timeout_fails_only_that_request() -> None:
    async def scenario(fake: FakeBroker) -> None:
        async with Client(fake.bootstrap, request_timeout_s=0.3) as client:
            await client.create_topics([NewTopic("events", 1, 1)])
            fake.silent_apis = {ApiKey.LIST_OFFSETS}
            with pytest.raises(ClientTimeoutError, match=r"LIST_OFFSETS v7 to 127\.0\.0\.1:\d+"):
                await client.list_offsets({TP: LATEST_TIMESTAMP})
            fake.silent_apis = set()
            assert (await client.list_offsets({TP: LATEST_TIMESTAMP}))[TP].offset == 0

    run(scenario)


def test_connection_loss_fails_pending_requests() -> None:
    async def scenario(fake: FakeBroker) -> None:
        conn = await BrokerConnection.connect("127.0.0.1", fake.port)
        fake.silent_apis = {ApiKey.METADATA}
        pending = asyncio.ensure_future(
            conn.send(
                MetadataRequest(
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
        )
        await asyncio.sleep(0.1)
        await conn.close()
        with pytest.raises(ClientConnectionError, match="closed"):
            await pending
        with pytest.raises(ClientConnectionError):
            await conn.send(
                MetadataRequest(
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )

    run(scenario)


def test_connect_refused_is_a_client_connection_error() -> None:
    async def scenario(fake: FakeBroker) -> None:
        port = fake.port
        await fake.stop()
        with pytest.raises(ClientConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
            await BrokerConnection.connect("127.0.0.1", port, connect_timeout_s=2)

    run(scenario)


def test_api_versions_falls_back_to_v0_when_v3_is_unsupported() -> None:
    narrow = narrow_versions(overrides={ApiKey.API_VERSIONS: (0, 2)})

    async def scenario(fake: FakeBroker) -> None:
        conn = await BrokerConnection.connect("127.0.0.1", fake.port)
        try:
            assert conn.api_versions[ApiKey.API_VERSIONS] == (0, 2)
            assert [(h.api_key, h.api_version) for h in fake.requests] == [(18, 0)]
        finally:
            await conn.close()

    run(scenario, FakeBroker(versions=narrow))


def test_helper_without_a_common_version_says_so() -> None:
    narrow = narrow_versions(overrides={ApiKey.PRODUCE: (10, 12)})

    async def scenario(fake: FakeBroker) -> None:
        async with Client(fake.bootstrap) as client:
            await client.create_topics([NewTopic("events", 1, 1)])
            with pytest.raises(NoCompatibleVersionError, match=r"PRODUCE \(10, 12\)"):
                await client.produce(TP, build_batch([Record(b"x")]))

    run(scenario, FakeBroker(versions=narrow))


def test_blocking_client() -> None:
    async def scenario(fake: FakeBroker) -> None:
        def blocking() -> None:
            with BlockingClient(fake.bootstrap) as client:
                client.create_topics([NewTopic("events", 1, 1)])
                produced = client.produce(TP, build_batch([Record(b"x"), Record(b"y")]))
                assert produced is not None
                assert produced.base_offset == 0
                fetched = client.fetch({TP: FetchRequestPartition(0)})
                assert [r.value for r in decode_records(fetched[TP].records)] == [b"x", b"y"]
                assert client.metadata().topics["events"].partitions[0].leader_id == 0

        await asyncio.to_thread(blocking)

    run(scenario)


def _topic() -> Any:
    import uuid

    return (uuid.uuid4(), bytearray(), [0])


def _metadata_topic(name: str) -> Any:
    from kio.schema.metadata.v12.request import MetadataRequestTopic

    return MetadataRequestTopic(topic_id=None, name=name)


def test_an_undecodable_response_fails_that_request_only() -> None:
    async def main() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            decoder = FrameDecoder()
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    header, _body = decode_request(payload)
                    if header.api_key == ApiKey.API_VERSIONS:
                        writer.write(
                            encode_response(header, api_versions_response(header.api_version))
                        )
                    else:  # the right correlation id, then garbage
                        writer.write(frame(struct.pack(">i", header.correlation_id) + b"\xff" * 3))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await BrokerConnection.connect("127.0.0.1", port)
        try:
            request = MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            with pytest.raises(InvalidResponseError, match="cannot decode API 3 v12 response"):
                await conn.send(request)
            assert not conn.is_closed
        finally:
            await conn.close()
            server.close()

    asyncio.run(main())
