"""DescribeTransactions v0 as ``tidelog transactions`` reads it.

The broker answers a ``transaction_start_time`` of -1 when no transaction runs (Kafka does;
its admin client reads -1 as "none"). kio's schema types that field ``datetime_i64`` and its
reader refuses a negative timestamp, so a response describing an Empty or completed
transaction cannot be read with kio's schema, and the client's connection, which decodes
with it, fails. This module declares the same response with that field as the plain int64
it is on the wire, and exchanges that one request on a connection of its own.

(No ``from __future__ import annotations`` here: kio builds its readers from the fields'
runtime types, which postponed annotations would turn into strings.)
"""

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from kio.index import load_request_schema
from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from tidelog.client.errors import ClientConnectionError, ClientTimeoutError
from tidelog.protocol import schema_walk
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, encode_request, skip_tagged_fields
from tidelog.server.messages import build

DESCRIBE_TRANSACTIONS_V: Final = 0
_API: Final = i16(int(ApiKey.DESCRIBE_TRANSACTIONS))
_CORRELATION_ID: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransaction:
    """DescribeTransactionsResponse v0's TransactionState (start time: int64 ms, -1 none)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _API
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: i16 = field(metadata={"kafka_type": "int16"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32 = field(metadata={"kafka_type": "int32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse:
    """DescribeTransactionsResponse v0 with ``DescribedTransaction`` entries."""

    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _API
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[DescribedTransaction, ...]


_read = entity_reader(DescribeTransactionsResponse)


def decode_response(payload: bytes, correlation_id: int = _CORRELATION_ID) -> Any:
    """A DescribeTransactions v0 response frame (without its size) -> the body; raises
    ``ClientConnectionError`` for anything else."""
    try:
        (got,) = struct.unpack_from(">i", payload, 0)
        if got != correlation_id:
            raise ValueError(f"answer to request {got}, not {correlation_id}")
        pos = skip_tagged_fields(payload, 4)
        cleaned = schema_walk.check_body(DescribeTransactionsResponse, payload, pos)
        if cleaned is not None:
            payload, pos = cleaned, 0
        body, _size = _read(payload, pos)
    except Exception as exc:
        raise ClientConnectionError(f"undecodable DescribeTransactions answer: {exc}") from exc
    return body


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = sock.recv(min(size, 1 << 16))
        if not chunk:
            raise ClientConnectionError("the broker closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def describe_transactions(
    host: str, port: int, transactional_ids: Sequence[str], timeout_s: float
) -> list[DescribedTransaction]:
    """DescribeTransactions v0 at ``host:port`` -> one entry per id, in order."""
    body = build(
        load_request_schema(int(ApiKey.DESCRIBE_TRANSACTIONS), DESCRIBE_TRANSACTIONS_V),
        {"transactional_ids": list(transactional_ids)},
    )
    header = RequestHeader(
        int(ApiKey.DESCRIBE_TRANSACTIONS), DESCRIBE_TRANSACTIONS_V, _CORRELATION_ID, "tidelog-cli"
    )
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(encode_request(header, body))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            payload = _recv_exactly(sock, size)
    except TimeoutError as exc:
        raise ClientTimeoutError(f"DescribeTransactions to {host}:{port}: no answer") from exc
    except OSError as exc:
        raise ClientConnectionError(f"DescribeTransactions to {host}:{port}: {exc}") from exc
    return list(decode_response(payload).transaction_states)
