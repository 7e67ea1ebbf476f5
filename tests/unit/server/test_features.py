"""UpdateFeatures' rules (``tidelog.server.metadata.features`` rule 3), table-driven with
Kafka's ZooKeeper-mode messages."""

from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode
from tidelog.server.metadata.features import (
    SUPPORTED_FEATURES,
    UpgradeType,
    validate_feature_update,
)

UP = UpgradeType.UPGRADE
SAFE = UpgradeType.SAFE_DOWNGRADE
UNSAFE = UpgradeType.UNSAFE_DOWNGRADE
SUPPORTED = {"f": (1, 3)}
NOT_SUPPORTED = (
    "Could not apply finalized feature update because the provided feature is not supported."
)
INCOMPATIBLE = (
    "Could not apply finalized feature update because brokers were found to have incompatible "
    "versions for the feature."
)


@pytest.mark.parametrize(
    ("feature", "level", "kind", "finalized", "expected"),
    [
        ("", 1, UP, {}, "Feature name can not be empty."),
        ("f", 1, UpgradeType.UNKNOWN, {}, "Received unknown upgrade type."),
        ("f", 0, UP, {"f": 2}, "Can not provide versionLevel: 0 less than 1 without setting "
                               "the SAFE downgradeType in the request."),
        ("f", 0, SAFE, {}, "Can not delete non-existing finalized feature."),
        ("f", 0, UNSAFE, {"f": 2}, None),
        ("f", 2, UP, {"f": 2}, "Can not upgrade a finalized feature from existing "
                               "versionLevel:2 to the same value."),
        ("f", 2, SAFE, {"f": 2}, "Can not downgrade a finalized feature from existing "
                                 "versionLevel:2 to the same value."),
        ("f", 1, UP, {"f": 2}, "Can not downgrade finalized feature from existing "
                               "versionLevel:2 to provided versionLevel:1 without setting the "
                               "downgradeType to SAFE in the request."),
        ("f", 3, SAFE, {"f": 2}, "When the downgradeType is set to SAFE in the request, the "
                                 "provided versionLevel:3 can not be greater than the existing "
                                 "versionLevel:2."),
        ("f", 1, SAFE, {"f": 2}, None),
        ("f", 3, UP, {"f": 2}, None),
        ("f", 3, UP, {}, None),
        ("f", 4, UP, {}, INCOMPATIBLE),
        ("g", 1, UP, {}, NOT_SUPPORTED),
    ],
)  # fmt: skip
def test_rules(
    feature: str, level: int, kind: UpgradeType, finalized: dict[str, int], expected: str | None
) -> None:
    refusal = validate_feature_update(feature, level, kind, finalized, SUPPORTED)
    if expected is None:
        assert refusal is None
    else:
        assert refusal == (ErrorCode.INVALID_REQUEST, expected)


def test_tidelog_features_refuse_every_change() -> None:
    # Level 0 of both is all tidelog has: no upgrade, and nothing finalized to delete.
    assert SUPPORTED_FEATURES == {"group.version": (0, 0), "transaction.version": (0, 0)}
    for name in SUPPORTED_FEATURES:
        assert validate_feature_update(name, 1, UP, {}) == (ErrorCode.INVALID_REQUEST, INCOMPATIBLE)
        assert validate_feature_update(name, 0, SAFE, {}) is not None
    assert validate_feature_update("metadata.version", 21, UP, {}) == (
        ErrorCode.INVALID_REQUEST,
        NOT_SUPPORTED,
    )


def test_upgrade_type_of_unknown_values() -> None:
    assert UpgradeType.of(3) is UNSAFE
    assert UpgradeType.of(9) is UpgradeType.UNKNOWN
