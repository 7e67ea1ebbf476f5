"""ZooKeeper security rules without a server: the digest setting, ACL choice by path."""

from __future__ import annotations

import base64
import hashlib

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from tidelog.zk.security import (
    AclKazooClient,
    ZkAuth,
    is_sensitive,
    secure_acls,
    secure_existing_tree_blocking,
)

AUTH = ZkAuth("broker", "pw")


def digest_id(user: str, password: str) -> str:
    raw = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(raw).decode()}"


def test_parse_splits_at_the_first_colon() -> None:
    auth = ZkAuth.parse("kafka:pa:ss")
    assert auth == ZkAuth("kafka", "pa:ss")
    assert auth.auth_data == ("digest", "kafka:pa:ss")
    assert auth.acl_id == digest_id("kafka", "pa:ss")


@pytest.mark.parametrize("value", ["", "kafka", ":pw", "kafka:"])
def test_parse_rejects_bad_forms_naming_the_setting(value: str) -> None:
    with pytest.raises(ValueError, match=r"tidelog\.zookeeper\.digest"):
        ZkAuth.parse(value)


def test_password_stays_out_of_repr() -> None:
    assert "s3cret" not in repr(ZkAuth("kafka", "s3cret"))


@pytest.mark.parametrize(
    ("path", "sensitive"),
    [
        ("/config/users", True),
        ("/config/users/alice", True),
        ("/config/users/alice/", True),
        ("/config/brokers/1", True),
        ("/delegation_token/tokens/t", True),
        ("/config", False),
        ("/config/topics/t", False),
        ("/config/usersx", False),
        ("/kafka-acl/Topic/t", False),  # world-readable in Kafka
        ("/brokers/ids/1", False),
        ("/", False),
    ],
)
def test_sensitive_paths_are_kafkas_credential_subtrees(path: str, sensitive: bool) -> None:
    assert is_sensitive(path) is sensitive


def test_secure_acls_give_the_world_read_except_on_credentials() -> None:
    ours = (Permissions.ALL, "digest", digest_id("broker", "pw"))
    world_read = (Permissions.READ, "world", "anyone")

    def key(path: str) -> set[tuple[int, str, str]]:
        return {(a.perms, a.id.scheme, a.id.id) for a in secure_acls(AUTH, path)}

    assert key("/brokers/topics/t") == {ours, world_read}
    assert key("/config/users/alice") == {ours}


def test_acls_for_follows_set_acl() -> None:
    secure = AclKazooClient(auth=AUTH, set_acl=True, hosts="127.0.0.1:1")
    assert secure.acls_for("/config/users/a") == secure_acls(AUTH, "/config/users/a")
    assert secure.acls_for("/brokers/ids") == secure_acls(AUTH, "/brokers/ids")
    # Authenticated but zookeeper.set.acl=false: Kafka's open ACL.
    open_client = AclKazooClient(auth=AUTH, set_acl=False, hosts="127.0.0.1:1")
    assert open_client.acls_for("/config/users/a") == OPEN_ACL_UNSAFE
    assert open_client.default_acl is None


def test_auth_goes_into_kazoos_auth_data_for_reconnects() -> None:
    client = AclKazooClient(auth=AUTH, set_acl=True, hosts="127.0.0.1:1")
    assert client.auth_data == {("digest", "broker:pw")}
    assert AclKazooClient(auth=None, set_acl=False, hosts="127.0.0.1:1").auth_data == set()


def test_set_acl_without_credentials_is_refused() -> None:
    with pytest.raises(ValueError, match=r"zookeeper\.set\.acl.*tidelog\.zookeeper\.digest"):
        AclKazooClient(auth=None, set_acl=True, hosts="127.0.0.1:1")


def test_transaction_creates_choose_acls_by_path_unless_given() -> None:
    client = AclKazooClient(auth=AUTH, set_acl=True, hosts="127.0.0.1:1")
    tx = client.transaction()
    tx.create("/config/users/a", b"")
    tx.create("/brokers/topics/t", b"")
    tx.create("/x", b"", acl=OPEN_ACL_UNSAFE)
    acls = [list(op.acl) for op in tx.operations]
    assert acls == [
        secure_acls(AUTH, "/config/users/a"),
        secure_acls(AUTH, "/brokers/topics/t"),
        OPEN_ACL_UNSAFE,
    ]


def test_securing_needs_a_set_acl_client() -> None:
    client = AclKazooClient(auth=AUTH, set_acl=False, hosts="127.0.0.1:1")
    with pytest.raises(ValueError, match=r"zookeeper\.set\.acl"):
        secure_existing_tree_blocking(client)
