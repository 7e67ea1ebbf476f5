"""Kafka's wire error codes, and the root of tidelog's exception hierarchy.

``ErrorCode`` carries Kafka's numbers (clients act on them) and Kafka's ``retriable`` flag
(a retriable error means the same request may succeed later, e.g. after a metadata refresh).
Expected outcomes travel as ``ErrorCode`` values; exceptions are for bugs and local faults.

Exception hierarchy (each package adds its own subclasses, documented in its docstring)::

    TidelogError
     ├── ConfigError             a setting is unknown or invalid (names the key)
     └── KafkaError              carries an ErrorCode to put on the wire
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Kafka's error codes (``org.apache.kafka.common.protocol.Errors``)."""

    retriable: bool

    def __new__(cls, code: int, retriable: bool) -> ErrorCode:
        member = int.__new__(cls, code)
        member._value_ = code
        member.retriable = retriable
        return member

    UNKNOWN_SERVER_ERROR = (-1, False)
    NONE = (0, False)
    OFFSET_OUT_OF_RANGE = (1, False)
    CORRUPT_MESSAGE = (2, True)
    UNKNOWN_TOPIC_OR_PARTITION = (3, True)
    INVALID_FETCH_SIZE = (4, False)
    LEADER_NOT_AVAILABLE = (5, True)
    NOT_LEADER_OR_FOLLOWER = (6, True)
    REQUEST_TIMED_OUT = (7, True)
    BROKER_NOT_AVAILABLE = (8, False)
    REPLICA_NOT_AVAILABLE = (9, True)
    MESSAGE_TOO_LARGE = (10, False)
    STALE_CONTROLLER_EPOCH = (11, False)
    OFFSET_METADATA_TOO_LARGE = (12, False)
    NETWORK_EXCEPTION = (13, True)
    COORDINATOR_LOAD_IN_PROGRESS = (14, True)
    COORDINATOR_NOT_AVAILABLE = (15, True)
    NOT_COORDINATOR = (16, True)
    INVALID_TOPIC_EXCEPTION = (17, False)
    RECORD_LIST_TOO_LARGE = (18, False)
    NOT_ENOUGH_REPLICAS = (19, True)
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (20, True)
    INVALID_REQUIRED_ACKS = (21, False)
    ILLEGAL_GENERATION = (22, False)
    INCONSISTENT_GROUP_PROTOCOL = (23, False)
    INVALID_GROUP_ID = (24, False)
    UNKNOWN_MEMBER_ID = (25, False)
    INVALID_SESSION_TIMEOUT = (26, False)
    REBALANCE_IN_PROGRESS = (27, False)
    INVALID_COMMIT_OFFSET_SIZE = (28, False)
    TOPIC_AUTHORIZATION_FAILED = (29, False)
    GROUP_AUTHORIZATION_FAILED = (30, False)
    CLUSTER_AUTHORIZATION_FAILED = (31, False)
    INVALID_TIMESTAMP = (32, False)
    UNSUPPORTED_SASL_MECHANISM = (33, False)
    ILLEGAL_SASL_STATE = (34, False)
    UNSUPPORTED_VERSION = (35, False)
    TOPIC_ALREADY_EXISTS = (36, False)
    INVALID_PARTITIONS = (37, False)
    INVALID_REPLICATION_FACTOR = (38, False)
    INVALID_REPLICA_ASSIGNMENT = (39, False)
    INVALID_CONFIG = (40, False)
    NOT_CONTROLLER = (41, True)
    INVALID_REQUEST = (42, False)
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (43, False)
    POLICY_VIOLATION = (44, False)
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, False)
    DUPLICATE_SEQUENCE_NUMBER = (46, False)
    INVALID_PRODUCER_EPOCH = (47, False)
    INVALID_TXN_STATE = (48, False)
    INVALID_PRODUCER_ID_MAPPING = (49, False)
    INVALID_TRANSACTION_TIMEOUT = (50, False)
    CONCURRENT_TRANSACTIONS = (51, True)
    TRANSACTION_COORDINATOR_FENCED = (52, False)
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = (53, False)
    SECURITY_DISABLED = (54, False)
    OPERATION_NOT_ATTEMPTED = (55, False)
    KAFKA_STORAGE_ERROR = (56, True)
    LOG_DIR_NOT_FOUND = (57, False)
    SASL_AUTHENTICATION_FAILED = (58, False)
    UNKNOWN_PRODUCER_ID = (59, False)
    REASSIGNMENT_IN_PROGRESS = (60, False)
    DELEGATION_TOKEN_AUTH_DISABLED = (61, False)
    DELEGATION_TOKEN_NOT_FOUND = (62, False)
    DELEGATION_TOKEN_OWNER_MISMATCH = (63, False)
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = (64, False)
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = (65, False)
    DELEGATION_TOKEN_EXPIRED = (66, False)
    INVALID_PRINCIPAL_TYPE = (67, False)
    NON_EMPTY_GROUP = (68, False)
    GROUP_ID_NOT_FOUND = (69, False)
    FETCH_SESSION_ID_NOT_FOUND = (70, True)
    INVALID_FETCH_SESSION_EPOCH = (71, True)
    LISTENER_NOT_FOUND = (72, True)
    TOPIC_DELETION_DISABLED = (73, False)
    FENCED_LEADER_EPOCH = (74, True)
    UNKNOWN_LEADER_EPOCH = (75, True)
    UNSUPPORTED_COMPRESSION_TYPE = (76, False)
    STALE_BROKER_EPOCH = (77, False)
    OFFSET_NOT_AVAILABLE = (78, True)
    MEMBER_ID_REQUIRED = (79, False)
    PREFERRED_LEADER_NOT_AVAILABLE = (80, True)
    GROUP_MAX_SIZE_REACHED = (81, False)
    FENCED_INSTANCE_ID = (82, False)
    ELIGIBLE_LEADERS_NOT_AVAILABLE = (83, True)
    ELECTION_NOT_NEEDED = (84, True)
    NO_REASSIGNMENT_IN_PROGRESS = (85, False)
    GROUP_SUBSCRIBED_TO_TOPIC = (86, False)
    INVALID_RECORD = (87, False)
    UNSTABLE_OFFSET_COMMIT = (88, True)
    THROTTLING_QUOTA_EXCEEDED = (89, True)
    PRODUCER_FENCED = (90, False)
    RESOURCE_NOT_FOUND = (91, False)
    DUPLICATE_RESOURCE = (92, False)
    UNACCEPTABLE_CREDENTIAL = (93, False)
    INCONSISTENT_VOTER_SET = (94, False)
    INVALID_UPDATE_VERSION = (95, False)
    FEATURE_UPDATE_FAILED = (96, False)
    PRINCIPAL_DESERIALIZATION_FAILURE = (97, False)
    SNAPSHOT_NOT_FOUND = (98, False)
    POSITION_OUT_OF_RANGE = (99, False)
    UNKNOWN_TOPIC_ID = (100, True)
    DUPLICATE_BROKER_REGISTRATION = (101, False)
    BROKER_ID_NOT_REGISTERED = (102, False)
    INCONSISTENT_TOPIC_ID = (103, True)
    INCONSISTENT_CLUSTER_ID = (104, False)
    TRANSACTIONAL_ID_NOT_FOUND = (105, False)
    FETCH_SESSION_TOPIC_ID_ERROR = (106, True)
    INELIGIBLE_REPLICA = (107, False)
    NEW_LEADER_ELECTED = (108, False)
    INVALID_REGULAR_EXPRESSION = (128, False)


class TidelogError(Exception):
    """Root of every exception tidelog raises on purpose."""


class ConfigError(TidelogError):
    """A configuration key is unknown or its value invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class KafkaError(TidelogError):
    """An error that maps onto one Kafka error code for the client to see."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name} ({int(code)}){': ' + message if message else ''}")
        self.code = code
