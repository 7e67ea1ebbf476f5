"""DescribeTransactions v0 responses, read with the start time as the plain int64 it is.

A broker answers ``transaction_start_time`` -1 for a transactional id with no running
transaction (Empty, CompleteCommit, CompleteAbort) or an unknown one; Kafka's admin client
reads -1 as "none". kio types the field ``datetime_i64`` and its reader refuses a negative
timestamp, so exactly the answers a client most often needs cannot be decoded with kio's
schema. ``decode`` reads the same response with that one field declared ``int64``; the
client passes it to ``BrokerConnection.send`` for this request only.

(No ``from __future__ import annotations`` here: kio builds its readers from the fields'
runtime types, which postponed annotations would turn into strings.)
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from tidelog.protocol import schema_walk
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import skip_tagged_fields
from tidelog.protocol.errors import InvalidResponseError

VERSION: Final = 0
_API: Final = i16(int(ApiKey.DESCRIBE_TRANSACTIONS))


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionStateV0:
    """DescribeTransactionsResponse v0's TransactionState; start time int64 ms (-1: none)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
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
class DescribeTransactionsResponseV0:
    """DescribeTransactionsResponse v0 made of ``TransactionStateV0`` entries."""

    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _API
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[TransactionStateV0, ...]


_read = entity_reader(DescribeTransactionsResponseV0)


def decode(frame: bytes) -> Any:
    """A DescribeTransactions v0 response frame (size removed, correlation id first) ->
    its body; ``InvalidResponseError`` when it does not fit."""
    try:
        pos = skip_tagged_fields(frame, 4)  # correlation id, then the v1 header's tags
        cleaned = schema_walk.check_body(DescribeTransactionsResponseV0, frame, pos)
        if cleaned is not None:
            frame, pos = cleaned, 0
        body, _size = _read(frame, pos)
    except Exception as exc:
        raise InvalidResponseError(
            f"cannot decode DescribeTransactions v0 response: {type(exc).__name__}: {exc}"
        ) from exc
    return body
