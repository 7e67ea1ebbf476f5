"""A bare Kafka connection for tests that need exact bytes: kio bodies built with the
server's version-independent builder, encoded by tidelog's codec."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema

from tests.harness import BrokerProcess
from tidelog.client.records import Record, build_batch
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, decode_response, encode_request
from tidelog.protocol.framing import FrameDecoder
from tidelog.protocol.messages import build

PRODUCE_V = 9
FETCH_V = 12
METADATA_V = 12


class RawSocket:
    """A bare connection over any connected socket (plain or TLS): exact bytes out,
    frames in."""

    client_id = "bad-input-test"

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder(1 << 30)
        self.frames: list[bytes] = []
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def encode(self, api: ApiKey, version: int, data: Mapping[str, Any]) -> tuple[int, bytes]:
        self.correlation_id += 1
        body = build(load_request_schema(api, version), dict(data))
        header = RequestHeader(int(api), version, self.correlation_id, self.client_id)
        return self.correlation_id, encode_request(header, body)

    def recv_frame(self, timeout: float = 10.0) -> bytes | None:
        """The next response frame, or None if the broker closed the connection."""
        self.sock.settimeout(timeout)
        while not self.frames:
            try:
                data = self.sock.recv(1 << 20)
            except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
                return None
            if not data:
                return None
            self.frames += self.decoder.feed(data)
        return self.frames.pop(0)

    def call(self, api: ApiKey, version: int, data: Mapping[str, Any]) -> Any:
        correlation_id, frame = self.encode(api, version, data)
        self.send_bytes(frame)
        response = self.recv_frame()
        assert response is not None, f"the broker closed the connection instead of answering {api}"
        got_id, body = decode_response(api, version, response)
        assert got_id == correlation_id
        return body

    def is_closed_by_peer(self) -> bool:
        return self.recv_frame(timeout=10.0) is None


class Raw(RawSocket):
    """A bare plaintext connection to one broker process."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(socket.create_connection((broker.host, broker.port), timeout=10))


def produce(raw: Raw, topic: str, partition: int, records: bytes, acks: int = 1) -> Any:
    body = raw.call(
        ApiKey.PRODUCE,
        PRODUCE_V,
        {
            "acks": acks,
            "timeout": 10_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return body.responses[0].partition_responses[0]


def fetch(raw: Raw, topic: str, partition: int, offset: int, max_wait_ms: int = 0) -> Any:
    body = raw.call(
        ApiKey.FETCH,
        FETCH_V,
        {
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    return body.responses[0].partitions[0]


def batch(*values: bytes) -> bytes:
    return build_batch([Record(value=v, key=b"k") for v in values], base_timestamp_ms=1_000)


def create(raw: Raw, name: str, **configs: str) -> Any:
    body = raw.call(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    return body.topics[0]
