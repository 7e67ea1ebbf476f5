"""A host cut from chosen peers by blackhole routes (``HostNetwork.cut_from``), with a fake
runner: both ways, /32 routes only (the root namespace's /24 untouched), healed exactly."""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.testing.netns import HostNetwork, NetnsError


class FakeIp:
    def __init__(self, fail_prefix: tuple[str, ...] = ()) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.fail_prefix = fail_prefix

    def __call__(self, argv: Sequence[str]) -> None:
        self.commands.append(tuple(argv))
        if self.fail_prefix and tuple(argv[: len(self.fail_prefix)]) == self.fail_prefix:
            raise NetnsError(f"`ip {' '.join(argv)}` failed: RTNETLINK answers: No such process")


def test_cut_from_adds_a_blackhole_route_each_way_per_peer() -> None:
    ip = FakeIp()
    HostNetwork("tlab", 3, (77, 5), ip).cut_from(2, [1, 3])
    assert ip.commands == [
        ("-n", "tlab-h2", "route", "add", "blackhole", "10.77.5.1/32"),
        ("-n", "tlab-h1", "route", "add", "blackhole", "10.77.5.2/32"),
        ("-n", "tlab-h2", "route", "add", "blackhole", "10.77.5.3/32"),
        ("-n", "tlab-h3", "route", "add", "blackhole", "10.77.5.2/32"),
    ]
    # Never the gateway (the root namespace, where the clients run).
    assert not any("10.77.5.254" in " ".join(c) for c in ip.commands)


def test_heal_cut_removes_every_route_and_reports_what_was_already_gone() -> None:
    ip = FakeIp(fail_prefix=("-n", "tlab-h1"))
    errors = HostNetwork("tlab", 3, (77, 5), ip).heal_cut(2, [1, 3])
    assert ip.commands == [
        ("-n", "tlab-h2", "route", "del", "blackhole", "10.77.5.1/32"),
        ("-n", "tlab-h1", "route", "del", "blackhole", "10.77.5.2/32"),
        ("-n", "tlab-h2", "route", "del", "blackhole", "10.77.5.3/32"),
        ("-n", "tlab-h3", "route", "del", "blackhole", "10.77.5.2/32"),
    ]
    assert len(errors) == 1
    assert "No such process" in errors[0]
