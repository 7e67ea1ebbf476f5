"""UpdateFeatures (57), as a ZooKeeper-mode Kafka broker answers it (KIP-584; Kafka's
``KafkaApis.handleUpdateFeatures`` and the controller's ``processFeatureUpdates``).

- ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level, no results);
- only the active controller updates, else NOT_CONTROLLER (top level), which makes Kafka's
  Admin client retry at the controller Metadata names;
- each update is checked on its own (``tidelog.server.metadata.features`` rule 3): a
  refused one gets its INVALID_REQUEST and message, the others are applied together, one
  compare-and-set write of ``/feature`` at the epoch they were checked against (a lost race
  or a ZooKeeper failure: FEATURE_UPDATE_FAILED for each of them); ``validate_only`` (v1)
  checks without writing. v0's ``allow_downgrade`` is the safe downgrade type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.metadata.backend import MetadataBackend, Outcome
from tidelog.server.metadata.features import UpgradeType, validate_feature_update

#: Kafka's message for NOT_CONTROLLER (``Errors.NOT_CONTROLLER``).
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


class FeatureApis:
    """UpdateFeatures over the metadata backend's finalized features."""

    def __init__(self, helper: RequestHelper, backend: MetadataBackend) -> None:
        self.helper = helper
        self.backend = backend

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {ApiKey.UPDATE_FEATURES: self.handle_update_features}

    def handle_update_features(self, header: RequestHeader, body: Any) -> Any:
        authorizer = self.helper.authorizer
        if authorizer is not None and not authz.cluster_allowed(
            authorizer, AclOperation.ALTER, header.api_key
        ):
            return self._top_level(
                header, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, authz.CLUSTER_AUTHORIZATION_MESSAGE
            )
        if not self.backend.is_active_controller():
            return self._top_level(header, ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
        finalized = self.backend.finalized_features()
        levels = dict(finalized.levels)
        results: dict[str, Outcome] = {}
        changed: list[str] = []
        for update in body.feature_updates:
            name = str(update.feature)
            level = int(update.max_version_level)
            if header.api_version == 0:
                kind = UpgradeType.SAFE_DOWNGRADE if update.allow_downgrade else UpgradeType.UPGRADE
            else:
                kind = UpgradeType.of(int(update.upgrade_type))
            refusal = validate_feature_update(name, level, kind, levels)
            if refusal is not None:
                results[name] = refusal
                continue
            results[name] = (ErrorCode.NONE, None)
            changed.append(name)
            if level < 1:
                levels.pop(name, None)
            else:
                levels[name] = level
        if not changed or getattr(body, "validate_only", False):
            return self._answer(header, results)

        async def write() -> Any:
            try:
                await self.backend.write_finalized_features(levels, finalized.epoch)
            except KafkaError as exc:
                for name in changed:
                    results[name] = (ErrorCode.FEATURE_UPDATE_FAILED, str(exc))
            return self._answer(header, results)

        return asyncio.ensure_future(write())

    def _top_level(self, header: RequestHeader, error: ErrorCode, message: str) -> Any:
        return self.helper.respond(
            header, {"error_code": error, "error_message": message, "results": []}
        )

    def _answer(
        self, header: RequestHeader, results: dict[str, tuple[ErrorCode, str | None]]
    ) -> Any:
        return self.helper.respond(
            header,
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "results": [
                    {"feature": name, "error_code": code, "error_message": message}
                    for name, (code, message) in results.items()
                ],
            },
        )


__all__ = ["FeatureApis"]
