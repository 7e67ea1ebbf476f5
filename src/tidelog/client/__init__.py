"""tidelog's own Kafka-protocol client. Async ``Client`` and
``BlockingClient``, ``BrokerConnection`` (one connection, pipelined), and a record batch
builder/decoder (``tidelog.client.records``). Used by the CLI, follower fetchers,
controller RPCs and the Spark source.

``Client`` routes requests; each API's request and answer live in the module of its job
(``metadata``, ``produce``, ``fetch``, ``offsets``, ``topic_admin``, ``transactions``, the
``*_admin`` modules) over ``wire`` (kio schema modules and error codes).
``fetched_records`` is what a consumer sees of a Fetch answer at its isolation level;
``group_member`` a blocking consumer-group member speaking the consumer protocol of
``consumer_protocol`` (subscription and assignment bytes, the range assignor).
"""

from tidelog.client.blocking import BlockingClient
from tidelog.client.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Client,
    ClusterMetadata,
    FetchRequestPartition,
    FetchResult,
    NewTopic,
)
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import (
    BrokerError,
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    NoCompatibleVersionError,
)
from tidelog.client.records import ConsumerRecord, Record, build_batch, decode_records
from tidelog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "BlockingClient",
    "BrokerConnection",
    "BrokerError",
    "Client",
    "ClientConnectionError",
    "ClientError",
    "ClientTimeoutError",
    "ClusterMetadata",
    "ConsumerRecord",
    "FetchRequestPartition",
    "FetchResult",
    "NewTopic",
    "NoCompatibleVersionError",
    "Record",
    "build_batch",
    "decode_records",
]
