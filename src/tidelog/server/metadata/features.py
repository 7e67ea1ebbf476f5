"""Feature versioning (KIP-584) as a ZooKeeper-mode Kafka broker does it: the features this
broker supports, the cluster's finalized features, and the rules UpdateFeatures applies.

Rules (Kafka 3.x's ZooKeeper ``KafkaController.validateFeatureUpdate``, whose errors are all
INVALID_REQUEST with these messages):

1. ``SUPPORTED_FEATURES`` are the features whose level says something true about tidelog:
   ``group.version`` 0 (classic groups only; KIP-848's consumer protocol is level 1) and
   ``transaction.version`` 0 (KIP-890's transaction protocol, level 2, is not built).
   ``metadata.version`` and ``kraft.version`` belong to KRaft and are not listed. Kafka's
   brokers list only features whose maximum is above 0, so a ZooKeeper-mode Kafka lists
   none (its kafka-features.sh describe prints nothing); tidelog lists these two so that a
   client can see it is at level 0 of both. ApiVersions below v4 leaves out features whose
   minimum is 0 (the schema's rule), so only v4 readers (Kafka 3.9+ clients) see them.
2. The finalized features live in the ``/feature`` znode (Kafka's ``FeatureZNode``, created
   once with none finalized); its data version is the finalized features' epoch.
3. An update names a feature and a maximum level. Level < 1 deletes a finalized feature:
   only with a downgrade type, and only one that is finalized. Level >= 1 must be
   supported (in the supported range); against a finalized level it may not be equal, may
   not go down without a downgrade type, and may not go up with one.

So with the features above no update changes anything: every one is refused with Kafka's
message, which is what a ZooKeeper-mode Kafka answers too (it supports none).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from tidelog.errors import ErrorCode

#: Rule 1: feature name -> (min level, max level) this broker supports.
SUPPORTED_FEATURES: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {"group.version": (0, 0), "transaction.version": (0, 0)}
)


class UpgradeType(enum.IntEnum):
    """UpdateFeatures' ``UpgradeType`` (v1+; v0's ``AllowDowngrade`` maps to 1 or 2)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def of(cls, value: int) -> UpgradeType:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """Rule 2: the cluster's finalized ``name -> max level`` and their epoch (-1: unknown,
    before ``/feature`` was read)."""

    epoch: int = -1
    levels: Mapping[str, int] = field(default_factory=dict)


#: An error code and Kafka's message for it.
Refusal = tuple[ErrorCode, str]


def validate_feature_update(
    feature: str,
    level: int,
    upgrade_type: UpgradeType,
    finalized: Mapping[str, int],
    supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES,
) -> Refusal | None:
    """Rule 3 for one update: None when it may be applied, else Kafka's refusal."""
    if not feature:
        return ErrorCode.INVALID_REQUEST, "Feature name can not be empty."
    if upgrade_type == UpgradeType.UNKNOWN:
        return ErrorCode.INVALID_REQUEST, "Received unknown upgrade type."
    downgrade = upgrade_type != UpgradeType.UPGRADE
    existing = finalized.get(feature)
    if level < 1:
        if not downgrade:
            return ErrorCode.INVALID_REQUEST, (
                f"Can not provide versionLevel: {level} less than 1 without setting the "
                "SAFE downgradeType in the request."
            )
        if existing is None:
            return ErrorCode.INVALID_REQUEST, "Can not delete non-existing finalized feature."
        return None
    if existing is not None:
        if level == existing:
            verb = "downgrade" if downgrade else "upgrade"
            return ErrorCode.INVALID_REQUEST, (
                f"Can not {verb} a finalized feature from existing versionLevel:{existing} "
                "to the same value."
            )
        if level < existing and not downgrade:
            return ErrorCode.INVALID_REQUEST, (
                f"Can not downgrade finalized feature from existing versionLevel:{existing} "
                f"to provided versionLevel:{level} without setting the downgradeType to SAFE "
                "in the request."
            )
        if level > existing and downgrade:
            return ErrorCode.INVALID_REQUEST, (
                f"When the downgradeType is set to SAFE in the request, the provided "
                f"versionLevel:{level} can not be greater than the existing "
                f"versionLevel:{existing}."
            )
    supported_range = supported.get(feature)
    if supported_range is None:
        return ErrorCode.INVALID_REQUEST, (
            "Could not apply finalized feature update because the provided feature is not "
            "supported."
        )
    low, high = supported_range
    if not low <= level <= high:
        return ErrorCode.INVALID_REQUEST, (
            "Could not apply finalized feature update because brokers were found to have "
            "incompatible versions for the feature."
        )
    return None


__all__ = [
    "SUPPORTED_FEATURES",
    "FinalizedFeatures",
    "Refusal",
    "UpgradeType",
    "validate_feature_update",
]
