"""The coordinators over a test's ``KafkaApis``, wired as ``tidelog.server.broker`` wires them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.protocol.codec import RequestHeader
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.coordinators.group import GroupCoordinator
from tidelog.server.coordinators.txn import GroupOffsets, TransactionCoordinator


def group_coordinator(apis: KafkaApis) -> GroupCoordinator:
    helper = apis.helper
    return GroupCoordinator(
        apis.config,
        apis.backend,
        apis.replica_manager,
        authorizer=lambda: helper.authorizer,
        respond=helper.respond,
        own_address=helper.own_address,
    )


def transaction_coordinator(
    apis: KafkaApis,
    groups: GroupOffsets,
    allocate_producer_id: Callable[[], Awaitable[int]],
    non_transactional_init: Callable[[RequestHeader, Any], Any],
) -> TransactionCoordinator:
    helper = apis.helper
    return TransactionCoordinator(
        apis.config,
        apis.backend,
        apis.replica_manager,
        groups=groups,
        allocate_producer_id=allocate_producer_id,
        non_transactional_init=non_transactional_init,
        authorizer=lambda: helper.authorizer,
        respond=helper.respond,
        own_address=helper.own_address,
    )
