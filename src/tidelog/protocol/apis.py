"""API keys (Kafka's numbers) and the table of versions the broker advertises.

``SUPPORTED_VERSIONS`` is the single source of what ApiVersions advertises and what
``decode_request`` accepts; the server narrows it with ``narrow_versions`` to the APIs it
actually implements and passes the result to both. Rules behind the default ranges
(PROTOCOL_NOTES.md):

- Metadata starts at v4: kafka-python infers the broker's age from the advertised ranges
  (below v4 it falls back to magic-1 batches) and librdkafka 2.16 fails on a Metadata v0
  response when v0 is all that is advertised.
- Produce v3+ and Fetch v4+ only: both carry record batch v2 (magic 2), the only format
  tidelog stores. kio knows nothing older anyway.
- Fetch v13+ and Metadata v10+ use topic ids; Produce v13 *only* uses topic ids, so it is
  left out (the clients seen here use Produce v7-v10).
- LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown (4-7) are tidelog's own
  schemas (``tidelog.protocol.control``), version 0 only; kio has none of them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


class ApiKey(enum.IntEnum):
    """Kafka's API keys (``org.apache.kafka.common.protocol.ApiKeys``)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


#: Our own control-plane APIs (kio lacks them): served by ``tidelog.protocol.control``.
CONTROL_APIS: Final = frozenset(
    {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN}
)

#: What the broker advertises by default: ``api key -> (min version, max version)``.
SUPPORTED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = MappingProxyType(
    {
        ApiKey.PRODUCE: (3, 12),
        ApiKey.FETCH: (4, 18),
        ApiKey.LIST_OFFSETS: (1, 11),
        ApiKey.METADATA: (4, 13),
        ApiKey.LEADER_AND_ISR: (0, 0),
        ApiKey.STOP_REPLICA: (0, 0),
        ApiKey.UPDATE_METADATA: (0, 0),
        ApiKey.CONTROLLED_SHUTDOWN: (0, 0),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 6),
        ApiKey.DELETE_RECORDS: (0, 2),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),
        ApiKey.ALTER_CONFIGS: (0, 2),
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.ALTER_PARTITION: (2, 3),
        ApiKey.DESCRIBE_CLUSTER: (0, 2),
        # KIP-1142 (v0: KIP-714's ListClientMetricsResources) and KIP-966's paged
        # topic metadata (tidelog.server.apis.config_apis, tidelog.server.apis.topic_partitions).
        ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
        # KIP-584 feature versioning as a ZooKeeper-mode Kafka does it (v2's all-or-nothing
        # answer is KRaft's; tidelog.server.apis.feature_apis).
        ApiKey.UPDATE_FEATURES: (0, 1),
        # Group coordination (tidelog.server.coordinators.group), classic protocol.
        ApiKey.OFFSET_COMMIT: (2, 9),
        ApiKey.OFFSET_FETCH: (1, 9),
        ApiKey.FIND_COORDINATOR: (0, 6),
        ApiKey.JOIN_GROUP: (0, 9),
        ApiKey.HEARTBEAT: (0, 4),
        ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.SYNC_GROUP: (0, 5),
        # DescribeGroups v6: KIP-1043's per-group error message; ListGroups v5: KIP-848's
        # type filter (every group here is "classic").
        ApiKey.DESCRIBE_GROUPS: (0, 6),
        ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.DELETE_GROUPS: (0, 2),
        ApiKey.OFFSET_DELETE: (0, 0),
        # KIP-98 TxnOffsetCommit (group coordinator); v5 is KIP-890's, not built.
        ApiKey.TXN_OFFSET_COMMIT: (0, 4),
        # Transactions (tidelog.server.coordinators.txn), KIP-98 / KIP-447 as clients use
        # them: AddPartitionsToTxn v4+ and WriteTxnMarkers v2 / EndTxn v5 / TxnOffsetCommit
        # v5 belong to KIP-890's transaction version 2 (server-side verification, an epoch
        # bump per transaction), not built; InitProducerId v6 is KIP-939's two-phase commit.
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
        ApiKey.END_TXN: (0, 4),
        ApiKey.WRITE_TXN_MARKERS: (1, 1),
        # Transaction admin (tidelog.server.apis.txn_admin), KIP-664; ListTransactions v2
        # is KIP-1152's transactional id pattern.
        ApiKey.DESCRIBE_PRODUCERS: (0, 0),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 2),
        # Security: SASL logins (handshake v0 is followed by raw tokens, v1 by
        # SaslAuthenticate), ACLs from v1 (v0 has no pattern type; Kafka 4 dropped it),
        # SCRAM credentials (KIP-554).
        ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2),
        ApiKey.DESCRIBE_ACLS: (1, 3),
        ApiKey.CREATE_ACLS: (1, 3),
        ApiKey.DELETE_ACLS: (1, 3),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        # Client quotas (KIP-546; tidelog.server.apis.client_quota_apis).
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
        # Log dirs (KIP-113; tidelog.server.apis.log_dir_apis). kio has no DescribeLogDirs v0.
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
        ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
    }
)

#: APIs a broker serves (``decode_request`` accepts them) but leaves out of ApiVersions.
#: DescribeQuorum (55) is a KRaft API (Kafka's listeners "broker" and "controller", not
#: "zkBroker"): a ZooKeeper-mode Kafka does not advertise it, so Kafka's Admin
#: ``describeMetadataQuorum`` (kafka-metadata-quorum.sh) fails at once with "The node does
#: not support DESCRIBE_QUORUM", and tools that take it for a KRaft cluster do not. A
#: tidelog broker in a cluster still answers it for topic partitions (ISR replication in
#: Raft's shape), which tidelog's own console and ``topics describe`` send.
UNADVERTISED: Final = frozenset({ApiKey.DESCRIBE_QUORUM})

#: APIs a server may add to the table once it implements them.
OPTIONAL_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = MappingProxyType(
    {
        ApiKey.ELECT_LEADERS: (0, 2),
    }
)


def narrow_versions(
    table: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
    *,
    only: frozenset[ApiKey] | set[ApiKey] | None = None,
    overrides: Mapping[ApiKey, tuple[int, int] | None] | None = None,
) -> Mapping[ApiKey, tuple[int, int]]:
    """A copy of ``table`` keeping only the ``only`` keys (if given), with ``overrides``
    applied: a range replaces or adds an entry, ``None`` removes it.

    Raises ``ValueError`` for an empty or inverted range, so a typo fails at start-up.
    """
    result = {k: v for k, v in table.items() if only is None or k in only}
    for key, value in (overrides or {}).items():
        if value is None:
            result.pop(key, None)
            continue
        low, high = value
        if low < 0 or high < low:
            raise ValueError(f"bad version range {value} for {ApiKey(key).name}")
        result[ApiKey(key)] = (low, high)
    return MappingProxyType(dict(sorted(result.items())))


def advertised_versions(table: Mapping[ApiKey, tuple[int, int]]) -> dict[ApiKey, tuple[int, int]]:
    """What ApiVersions lists of the served ``table``: all but ``UNADVERTISED``."""
    return {k: v for k, v in table.items() if k not in UNADVERTISED}


#: The DescribeQuorum version a tidelog cluster broker serves unadvertised (``UNADVERTISED``).
UNADVERTISED_DESCRIBE_QUORUM_VERSION: Final = 2


def is_tidelog_cluster_broker(advertised: Mapping[int, tuple[int, int]]) -> bool:
    """Whether a broker's ApiVersions ranges are a tidelog broker's in a cluster, which
    answers DescribeQuorum without advertising it: LeaderAndIsr exactly v0 (tidelog's own
    control-plane schema; Kafka's ZooKeeper-mode brokers advertise it up to v7, KRaft
    brokers not at all, a lone tidelog broker not at all)."""
    return advertised.get(int(ApiKey.LEADER_AND_ISR)) == (0, 0)
