"""An ensemble member's zoo.cfg and myid (``ZooKeeperProcess`` with ``ensemble``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing.hosts import ensemble_settled
from tidelog.testing.zookeeper import ZooKeeperProcess, ZooKeeperStartError

ENSEMBLE = {1: "10.77.9.1", 2: "10.77.9.2", 3: "10.77.9.3"}


def test_a_member_binds_to_its_address_and_names_every_member(tmp_path: Path) -> None:
    zk = ZooKeeperProcess(
        tmp_path, client_port=2181, host="10.77.9.2", server_id=2, ensemble=ENSEMBLE
    )
    lines = zk.config_lines()
    assert "clientPortAddress=10.77.9.2" in lines
    assert "quorumListenOnAllIPs=false" in lines
    assert "4lw.commands.whitelist=srvr,ruok,mntr" in lines
    assert [line for line in lines if line.startswith("server.")] == [
        "server.1=10.77.9.1:2888:3888",
        "server.2=10.77.9.2:2888:3888",
        "server.3=10.77.9.3:2888:3888",
    ]
    assert zk.connect_string == "10.77.9.2:2181"


def test_a_standalone_server_stays_on_loopback_with_the_four_letter_words_off(
    tmp_path: Path,
) -> None:
    lines = ZooKeeperProcess(tmp_path, client_port=2181).config_lines()
    assert "clientPortAddress=127.0.0.1" in lines
    assert "4lw.commands.whitelist=" in lines
    assert not [line for line in lines if line.startswith("server.")]


@pytest.mark.parametrize(("server_id", "ensemble"), [(4, ENSEMBLE), (1, None), (None, ENSEMBLE)])
def test_a_member_must_be_in_its_ensemble(
    tmp_path: Path, server_id: int | None, ensemble: dict[int, str] | None
) -> None:
    with pytest.raises(ZooKeeperStartError, match="needs its server_id in the ensemble"):
        ZooKeeperProcess(tmp_path, client_port=2181, server_id=server_id, ensemble=ensemble)


def test_launch_needs_a_port_and_mode_is_none_when_nothing_answers(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperStartError, match="launch\\(\\) needs a client_port"):
        ZooKeeperProcess(tmp_path).launch()
    # Port 1 on loopback: nothing listens there.
    assert ZooKeeperProcess(tmp_path, client_port=1).mode(timeout_s=0.5) is None


@pytest.mark.parametrize(
    ("modes", "settled"),
    [
        ({1: "follower", 2: "leader", 3: "follower"}, True),
        ({1: "standalone"}, True),
        ({1: "follower", 2: None, 3: "follower"}, False),
        ({1: "leader", 2: "leader", 3: "follower"}, False),
        ({1: None, 2: None, 3: None}, False),
    ],
)
def test_an_ensemble_is_settled_with_one_leader_and_the_rest_followers(
    modes: dict[int, str | None], settled: bool
) -> None:
    assert ensemble_settled(modes) is settled
