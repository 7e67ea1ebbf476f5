"""Fetch sessions (KIP-227) against one real broker process: the session's life over raw
Fetch requests, its two errors, and real clients seen through a sniffing proxy: kafka-python
3 fetches incrementally and gets every record; librdkafka and aiokafka fetch without a
session."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.harness import BrokerProcess
from tests.integration.rawclient import FETCH_V, Raw, batch, create, produce
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import decode_request, decode_request_header, decode_response

pytestmark = pytest.mark.integration


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- raw requests -------------------------------------------------------------------------


def fetch_body(
    session_id: int,
    epoch: int,
    partitions: list[tuple[str, int, int]],
    *,
    forgotten: Sequence[tuple[str, int]] = (),
    max_wait_ms: int = 0,
) -> dict[str, Any]:
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition, offset in partitions:
        topics.setdefault(topic, []).append(
            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
        )
    gone: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        gone.setdefault(topic, []).append(partition)
    return {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in gone.items()],
        "rack_id": "",
    }


def answered(body: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic, int(p.partition_index)): p for t in body.responses for p in t.partitions}


def test_a_session_carries_only_news_and_wakes_on_any_of_its_partitions(
    broker: BrokerProcess,
) -> None:
    topic = unique("fs")
    raw = Raw(broker)
    try:
        other = unique("fs-other")
        for name in (topic, other):
            assert create(raw, name).error_code == ErrorCode.NONE
        assert produce(raw, topic, 0, batch(b"a", b"b", b"c")).error_code == 0
        assert produce(raw, other, 0, batch(b"x")).error_code == 0
        # Epoch 0: a full fetch that creates a session.
        full = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(0, 0, [(topic, 0, 0), (other, 0, 0)]))
        assert full.error_code == ErrorCode.NONE
        session_id = int(full.session_id)
        assert session_id != 0
        assert set(answered(full)) == {(topic, 0), (other, 0)}
        # Epoch 1 lists only `topic`: `other` stays at offset 0 in the session, so its record
        # comes again (a partition left out is fetched as last asked).
        step = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(session_id, 1, [(topic, 0, 3)]))
        assert (step.error_code, int(step.session_id)) == (ErrorCode.NONE, session_id)
        assert set(answered(step)) == {(other, 0)}
        assert answered(step)[(other, 0)].records
        # Epoch 2: the client moved on in `other` too; nothing new anywhere: an empty answer.
        step = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(session_id, 2, [(other, 0, 1)]))
        assert (step.error_code, int(step.session_id)) == (ErrorCode.NONE, session_id)
        assert answered(step) == {}
        # Epoch 3 lists nothing and long-polls; a produce to `other` (not listed in this
        # request, still at offset 1 in the session) wakes it with that record only.
        cid, frame = raw.encode(
            ApiKey.FETCH, FETCH_V, fetch_body(session_id, 3, [], max_wait_ms=10_000)
        )
        started = time.monotonic()
        raw.send_bytes(frame)
        time.sleep(0.3)
        producer = Raw(broker)
        assert produce(producer, other, 0, batch(b"y")).error_code == 0
        producer.close()
        response = raw.recv_frame()
        assert response is not None
        got_cid, woken = decode_response(ApiKey.FETCH, FETCH_V, response)
        assert got_cid == cid
        assert time.monotonic() - started < 5
        assert set(answered(woken)) == {(other, 0)}
        part = answered(woken)[(other, 0)]
        assert int(part.high_watermark) == 2
        assert part.records
        # Forgetting every partition closes the session: answered sessionless, then unknown.
        closing = raw.call(
            ApiKey.FETCH,
            FETCH_V,
            fetch_body(session_id, 4, [], forgotten=[(topic, 0), (other, 0)]),
        )
        assert (closing.error_code, int(closing.session_id)) == (ErrorCode.NONE, 0)
        gone = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(session_id, 5, []))
        assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        raw.close()


def test_unknown_session_and_wrong_epoch_get_their_error_codes(broker: BrokerProcess) -> None:
    topic = unique("fs-bad")
    raw = Raw(broker)
    try:
        assert create(raw, topic).error_code == ErrorCode.NONE
        assert produce(raw, topic, 0, batch(b"a")).error_code == 0
        unknown = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(987654, 1, [(topic, 0, 0)]))
        assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert (int(unknown.session_id), list(unknown.responses)) == (0, [])
        full = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(0, 0, [(topic, 0, 0)]))
        session_id = int(full.session_id)
        assert session_id != 0
        for wrong in (2, 0x7FFFFFFF):
            stale = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(session_id, wrong, []))
            assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
            assert (int(stale.session_id), list(stale.responses)) == (0, [])
        # The errors left the session as it was: its epoch still works.
        step = raw.call(ApiKey.FETCH, FETCH_V, fetch_body(session_id, 1, [(topic, 0, 1)]))
        assert (step.error_code, int(step.session_id)) == (ErrorCode.NONE, session_id)
        # The connection stays usable after the errors.
        assert produce(raw, topic, 0, batch(b"b")).error_code == 0
    finally:
        raw.close()


# --- real clients through a sniffing proxy --------------------------------------------------


@dataclass(frozen=True)
class SeenFetch:
    session_id: int
    epoch: int
    partitions: int
    forgotten: int


class FetchSniffer:
    """A loopback proxy that forwards every byte to the broker and records the session
    fields of each Fetch request passing through (a packet-level look for the tests)."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]
        self.target_port = 0
        self.fetches: list[SeenFetch] = []
        self._sockets: list[socket.socket] = [self.listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def seen(self) -> list[SeenFetch]:
        with self._lock:
            return list(self.fetches)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def _requests(self, source: socket.socket, sink: socket.socket) -> None:
        buffer = b""
        try:
            while data := source.recv(1 << 16):
                # Noted before it is forwarded: the answer (and the client's return) can
                # never come before the request is in ``fetches``.
                buffer += data
                while len(buffer) >= 4:
                    (size,) = struct.unpack_from(">i", buffer)
                    if len(buffer) < 4 + size:
                        break
                    self._note(buffer[4 : 4 + size])
                    buffer = buffer[4 + size :]
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def _note(self, frame: bytes) -> None:
        header, _ = decode_request_header(frame)
        if header.api_key != ApiKey.FETCH:
            return
        _, body = decode_request(frame)
        # Below v7 a Fetch has no session fields: sessionless (id 0, epoch -1).
        seen = SeenFetch(
            int(getattr(body, "session_id", 0)),
            int(getattr(body, "session_epoch", -1)),
            sum(len(t.partitions) for t in body.topics),
            sum(len(t.partitions) for t in getattr(body, "forgotten_topics_data", ())),
        )
        with self._lock:
            self.fetches.append(seen)


@pytest.fixture
def sniffed(
    new_broker: Callable[..., BrokerProcess],
) -> Iterator[tuple[BrokerProcess, FetchSniffer]]:
    """A broker whose advertised address is a sniffing proxy: every client connection after
    the bootstrap goes through it too."""
    sniffer = FetchSniffer()
    try:
        broker = new_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{sniffer.port}"})
        sniffer.target_port = broker.port
        yield broker, sniffer
    finally:
        sniffer.close()


def produce_values(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """One record a batch, so that small fetches take many rounds."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 1}
    )
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % partitions)
    assert producer.flush(30) == 0


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=10)


def test_kafka_python_consumes_everything_through_incremental_fetches(
    sniffed: tuple[BrokerProcess, FetchSniffer],
) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    _broker, sniffer = sniffed
    bootstrap = f"127.0.0.1:{sniffer.port}"
    topic = unique("kp-fs")
    create_topic(bootstrap, topic, 3)
    first = [b"first-%d" % i for i in range(600)]
    produce_values(bootstrap, topic, first, 3)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        consumer_timeout_ms=3000,
        # Small fetches: many rounds, each moving the fetch offsets of a few partitions.
        max_partition_fetch_bytes=2048,
        fetch_max_bytes=4096,
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([KTopicPartition(topic, p) for p in range(3)])
        consumer.seek_to_beginning()
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 30
        second = [b"second-%d" % i for i in range(150)]
        sent_second = False
        while len(got) < len(first) + len(second) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.partition, r.offset, r.value) for r in records]
            if not sent_second and len(got) >= len(first):
                # Records arriving while the session is established and idle.
                produce_values(bootstrap, topic, second, 3)
                sent_second = True
        # Idle for a while: the session's fetches list nothing and get nothing.
        assert not consumer.poll(timeout_ms=1000)
    finally:
        consumer.close()
    assert sorted(v for *_, v in got) == sorted(first + second)
    for p in range(3):
        offsets = [o for q, o, _ in got if q == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: {offsets[:20]}"
    fetches = sniffer.seen()
    sessions = {f.session_id for f in fetches if f.epoch > 0}
    assert len(sessions) == 1, fetches[:5]
    epochs = [f.epoch for f in fetches if f.session_id in sessions]
    # One session, its epochs counting up from 1 with no error in between.
    assert epochs[:10] == list(range(1, 11)), fetches
    # Incremental requests list only what changed: some list nothing at all.
    assert any(f.partitions == 0 for f in fetches if f.epoch > 0)


def test_librdkafka_and_aiokafka_fetch_without_sessions(
    sniffed: tuple[BrokerProcess, FetchSniffer],
) -> None:
    import aiokafka

    _broker, sniffer = sniffed
    bootstrap = f"127.0.0.1:{sniffer.port}"
    topic = unique("nosession")
    create_topic(bootstrap, topic, 2)
    produce_values(bootstrap, topic, [b"v%d" % i for i in range(40)], 2)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False}
    )
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(2)])
    got = 0
    deadline = time.monotonic() + 15
    try:
        while got < 40 and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(100, timeout=0.5) if m.error() is None)
    finally:
        consumer.close()
    assert got == 40
    librdkafka = sniffer.seen()
    assert librdkafka
    assert {(f.session_id, f.epoch) for f in librdkafka} == {(0, -1)}

    async def aio() -> int:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await c.start()
        try:
            c.assign([aiokafka.TopicPartition(topic, p) for p in range(2)])
            await c.seek_to_beginning()
            n = 0
            end = time.monotonic() + 15
            while n < 40 and time.monotonic() < end:
                batch = await c.getmany(timeout_ms=500)
                n += sum(len(rs) for rs in batch.values())
            return n
        finally:
            await c.stop()

    assert asyncio.run(aio()) == 40
    aio_fetches = sniffer.seen()[len(librdkafka) :]
    assert aio_fetches
    assert {(f.session_id, f.epoch) for f in aio_fetches} == {(0, -1)}
