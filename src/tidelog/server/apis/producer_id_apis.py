"""InitProducerId (22) for idempotent producers: a producer id from the metadata backend
(the lone broker's counter, or a ZooKeeper-claimed block in a cluster: Kafka's
ZkProducerIdManager), epoch 0. Transactional ids are the transaction coordinator's
(``tidelog.server.coordinators.txn``), which hands the others to this handler.

Sequence numbers are stored with the batches but not checked: no de-duplication yet. A
producer id that cannot be had now (ZooKeeper unreachable) is COORDINATOR_LOAD_IN_PROGRESS
(14, retriable), as Kafka 3.x answers while its next block is pending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.server.apis.eager import eager
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.metadata.backend import MetadataBackend, ProducerIdUnavailableError

log = logging.getLogger(__name__)


class ProducerIdApis:
    """InitProducerId of one broker for idempotent producers."""

    def __init__(self, helper: RequestHelper, backend: MetadataBackend) -> None:
        self.helper = helper
        self.backend = backend

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id}

    def idempotent_refusal(self, header: RequestHeader, body: Any) -> Any:
        """KIP-679 (Kafka's handleInitProducerIdRequest): an idempotent producer needs
        IDEMPOTENT_WRITE on the cluster or WRITE on some topic, else
        CLUSTER_AUTHORIZATION_FAILED. None when allowed (or transactional: the transaction
        coordinator checks WRITE on the transactional id)."""
        authorizer = self.helper.authorizer
        if authorizer is None or getattr(body, "transactional_id", None):
            return None
        if authz.idempotent_write_allowed(authorizer, header.api_key):
            return None
        return self.helper.respond(
            header,
            {
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )

    def handle_init_producer_id(self, header: RequestHeader, body: Any) -> Any:
        if (refused := self.idempotent_refusal(header, body)) is not None:
            return refused
        if getattr(body, "transactional_id", None):
            return self.helper.respond(
                header, {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            )

        async def run() -> Any:
            try:
                producer_id = await self.backend.allocate_producer_id()
            except ProducerIdUnavailableError as exc:
                log.warning("InitProducerId: no producer id block: %s", exc)
                return self.helper.respond(
                    header,
                    {
                        "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        "producer_id": -1,
                        "producer_epoch": -1,
                    },
                )
            return self.helper.respond(
                header,
                {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0},
            )

        return eager(run())


__all__ = ["ProducerIdApis"]
