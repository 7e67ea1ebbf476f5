"""The network-namespace wrapper's ``ip`` commands and its cleanup, with a fake runner."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tidelog.testing.netns import HostNetwork, Made, NetnsError, subnet_users, unique_prefix


class FakeIp:
    """Records every ``ip`` command; fails the one that starts with ``fail_on``."""

    def __init__(self, fail_on: tuple[str, ...] = ()) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str]) -> None:
        self.commands.append(tuple(argv))
        if self.fail_on and tuple(argv[: len(self.fail_on)]) == self.fail_on:
            raise NetnsError(f"`ip {' '.join(argv)}` failed: RTNETLINK answers: File exists")


def test_create_makes_a_bridge_and_one_namespace_with_a_veth_per_host() -> None:
    ip = FakeIp()
    network = HostNetwork("tlab", 2, (77, 5), ip).create()
    assert ip.commands == [
        ("link", "add", "tlabbr", "type", "bridge"),
        ("addr", "add", "10.77.5.254/24", "dev", "tlabbr"),
        ("link", "set", "tlabbr", "up"),
        *(
            cmd
            for i in (1, 2)
            for cmd in (
                ("netns", "add", f"tlab-h{i}"),
                ("link", "add", f"tlabv{i}", "type", "veth", "peer", "name", f"tlabp{i}"),
                ("link", "set", f"tlabp{i}", "netns", f"tlab-h{i}"),
                ("link", "set", f"tlabv{i}", "master", "tlabbr"),
                ("link", "set", f"tlabv{i}", "up"),
                ("-n", f"tlab-h{i}", "addr", "add", f"10.77.5.{i}/24", "dev", f"tlabp{i}"),
                ("-n", f"tlab-h{i}", "link", "set", f"tlabp{i}", "up"),
                ("-n", f"tlab-h{i}", "link", "set", "lo", "up"),
            )
        ),
    ]
    assert network.made == [
        Made("link", "tlabbr"),
        Made("netns", "tlab-h1"),
        Made("link", "tlabv1"),
        Made("netns", "tlab-h2"),
        Made("link", "tlabv2"),
    ]
    assert network.address(2) == "10.77.5.2"
    assert network.gateway == "10.77.5.254"
    assert network.exec_prefix(1)[1:] == ["netns", "exec", "tlab-h1"]


def test_destroy_removes_what_was_made_newest_first_and_only_that() -> None:
    ip = FakeIp()
    network = HostNetwork("tlab", 2, (77, 5), ip).create()
    ip.commands.clear()
    assert network.destroy() == []
    assert ip.commands == [
        ("link", "del", "tlabv2"),
        ("netns", "del", "tlab-h2"),
        ("link", "del", "tlabv1"),
        ("netns", "del", "tlab-h1"),
        ("link", "del", "tlabbr"),
    ]
    assert network.made == []
    ip.commands.clear()
    assert network.destroy() == []
    assert ip.commands == []


def test_a_failed_create_removes_what_it_made_and_raises_ips_message() -> None:
    ip = FakeIp(fail_on=("netns", "add", "tlab-h2"))
    network = HostNetwork("tlab", 3, (77, 5), ip)
    with pytest.raises(NetnsError, match="RTNETLINK answers: File exists"):
        network.create()
    # tlab-h2 was not made by us (its `netns add` failed): it is not deleted.
    removals = [cmd for cmd in ip.commands if cmd[1] == "del"]
    assert removals == [
        ("link", "del", "tlabv1"),
        ("netns", "del", "tlab-h1"),
        ("link", "del", "tlabbr"),
    ]
    assert network.made == []


def test_destroy_goes_on_after_a_failed_removal_and_reports_it() -> None:
    ip = FakeIp()
    network = HostNetwork("tlab", 1, (77, 5), ip).create()
    ip.fail_on = ("netns", "del")
    errors = network.destroy()
    assert len(errors) == 1
    assert "`ip netns del tlab-h1` failed" in errors[0]
    assert ip.commands[-1] == ("link", "del", "tlabbr")


def test_link_down_and_up_set_the_root_side_of_the_hosts_veth() -> None:
    ip = FakeIp()
    network = HostNetwork("tlab", 3, (77, 5), ip)
    network.link_down(2)
    network.link_up(2)
    assert ip.commands == [("link", "set", "tlabv2", "down"), ("link", "set", "tlabv2", "up")]


def test_names_fit_linux_interface_names_and_bad_sizes_are_refused() -> None:
    prefix = unique_prefix()
    assert prefix != unique_prefix()
    network = HostNetwork(prefix, 250, runner=FakeIp())
    assert max(len(network.veth_peer(250)), len(network.bridge)) <= 15
    with pytest.raises(NetnsError, match="--hosts must be between 1 and 250, not 0"):
        HostNetwork(prefix, 0, runner=FakeIp())
    with pytest.raises(NetnsError, match="too long for interface names"):
        HostNetwork("a-very-long-prefix", 3, runner=FakeIp())


def test_subnet_users_reads_ip_addr_output() -> None:
    output = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
        "7: tlabbr    inet 10.77.5.254/24 scope global tlabbr\\       valid_lft forever\n"
        "9: tlcdbr    inet 10.77.5.254/24 scope global tlcdbr\\       valid_lft forever\n"
        "4: eth0    inet 10.0.3.2/24 brd 10.0.3.255 scope global eth0\n"
    )
    assert subnet_users(output) == {(77, 5): {"tlabbr", "tlcdbr"}, (0, 3): {"eth0"}}
