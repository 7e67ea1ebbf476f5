"""``tidelog.server.config.policies``: loading policy classes and asking them."""

from __future__ import annotations

import pytest

from tidelog.errors import ConfigError, ErrorCode
from tidelog.server.config.policies import (
    AlterConfigRequest,
    CreateTopicRequest,
    Policies,
    PolicyLoadError,
    load_policy,
)


def request(
    rf: int | None, assignments: dict[int, tuple[int, ...]] | None = None
) -> CreateTopicRequest:
    return CreateTopicRequest("t", None if assignments else 3, rf, assignments, {})


def test_min_replication_factor_policy_counts_assignments_too() -> None:
    policies = Policies.from_config(
        {
            "create.topic.policy.class.name": (
                "tidelog.server.config.policies.MinReplicationFactorPolicy"
            ),
            "tidelog.policy.min.replication.factor": 3,
        }
    )
    assert policies.check_create(request(3)) == (ErrorCode.NONE, None)
    error, message = policies.check_create(request(2))
    assert error is ErrorCode.POLICY_VIOLATION
    assert message == "Topic t has replication factor 2; the minimum is 3."
    assert policies.check_create(request(None, {0: (1, 2, 3), 1: (1, 2)}))[0] is (
        ErrorCode.POLICY_VIOLATION
    )
    # No alter policy configured: everything passes.
    assert policies.check_alter(AlterConfigRequest("TOPIC", "t", {})) == (ErrorCode.NONE, None)


class Broken:
    def validate(self, request: object) -> None:
        raise RuntimeError("oops")


def test_a_policy_that_crashes_refuses_with_the_exception_named() -> None:
    policies = Policies(None, Broken())
    error, message = policies.check_alter(AlterConfigRequest("BROKER", "1", {}))
    assert error is ErrorCode.POLICY_VIOLATION
    assert message == "The policy failed: RuntimeError: oops"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nope.Nothing", "cannot load 'nope.Nothing'"),
        ("tidelog.server.config.policies.Missing", "cannot load"),
        ("tidelog.server.config.policies:Policies", "cannot load"),  # needs arguments
        ("builtins.object", "has no validate(request) method"),
    ],
)
def test_load_errors_name_the_key(name: str, expected: str) -> None:
    with pytest.raises(PolicyLoadError, match=r"alter\.config\.policy\.class\.name") as raised:
        load_policy("alter.config.policy.class.name", name, {})
    assert expected in str(raised.value)
    assert isinstance(raised.value, ConfigError)


def test_empty_means_no_policy() -> None:
    assert load_policy("create.topic.policy.class.name", " ", {}) is None
