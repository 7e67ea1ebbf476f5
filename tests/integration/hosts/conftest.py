"""The hosts fixture: three network namespaces on a bridge, each with a ZooKeeper ensemble
member and a broker bound to its own 10.x address (``tidelog.testing.hosts``). Needs root;
skipped with the reason otherwise. Every namespace and link made is removed at teardown,
also when a test fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tidelog.cli.launcher import client_metadata_view
from tidelog.testing.hosts import HostsCluster
from tidelog.testing.netns import HostNetwork, NetnsError, unique_prefix

#: Failures noticed within seconds: the partition test waits for a session expiry and an
#: ISR shrink.
HOSTS_OVERRIDES = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "4000",
    "min.insync.replicas": "2",
}
#: The operator's guide's settings on top (docs/deploy.md): znodes closed to other ZooKeeper
#: clients, owned by tidelog's digest identity.
GUIDE_OVERRIDES = {
    **HOSTS_OVERRIDES,
    "zookeeper.set.acl": "true",
    "tidelog.zookeeper.digest": "tidelog:a-long-random-password",
}


def _netns_unavailable() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = HostNetwork(unique_prefix(), 1, (77, 255))
    try:
        probe.runner(("netns", "add", probe.namespace(1)))
    except NetnsError as exc:
        return f"`ip netns add` fails here: {exc}"
    probe.runner(("netns", "del", probe.namespace(1)))
    return None


def _three_hosts(
    tmp_path_factory: pytest.TempPathFactory, name: str, overrides: dict[str, str]
) -> Iterator[HostsCluster]:
    """Three hosts (ZooKeeper member + broker each) with ``overrides``, skipped without
    namespaces; stopped and removed afterwards, with no teardown error."""
    reason = _netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    cluster = HostsCluster(
        tmp_path_factory.mktemp(name),
        hosts=3,
        overrides=overrides,
        metadata_view=client_metadata_view,
    )
    try:
        cluster.start(timeout_s=60.0)
        yield cluster
    finally:
        errors = cluster.stop()
        assert errors == [], errors


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostsCluster]:
    """Three hosts, stopped and removed after the module."""
    yield from _three_hosts(tmp_path_factory, "hosts", HOSTS_OVERRIDES)


@pytest.fixture(scope="module")
def guide_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostsCluster]:
    """Three hosts with the guide's settings (``GUIDE_OVERRIDES``), one cluster per module:
    the tests that restart or stop processes leave it as they found it or end with it."""
    yield from _three_hosts(tmp_path_factory, "guide-hosts", GUIDE_OVERRIDES)


@pytest.fixture
def netns_available() -> None:
    """Skips (with the reason) unless this machine can make network namespaces."""
    reason = _netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
