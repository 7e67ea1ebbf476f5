"""The operator's guide's files against the code they configure (docs/deploy.md): the
systemd unit runs a command that exists, stops within a bound the broker keeps, and does
not restart a broker refused for a bad setting; the guide's server.properties is a valid
broker config; its zoo.cfg is the one the host tests run each ensemble member with."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Final

import pytest

from tests.integration.hosts.guide import guide_block
from tidelog.cli.main import build_parser
from tidelog.server.cluster.controlled_shutdown import (
    CONTROLLED_SHUTDOWN_TIMEOUT_S,
    DEMOTION_WAIT_S,
)
from tidelog.server.config.broker_config import load_broker_config_file, parse_properties
from tidelog.testing.zookeeper import ZooKeeperProcess

ROOT: Final = Path(__file__).resolve().parents[2]
UNIT: Final = ROOT / "deploy" / "tidelog.service"
GUIDE: Final = ROOT / "docs" / "deploy.md"


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    return parser["Service"]


def _guide_properties(first_line: str) -> str:
    """The guide's ```properties block whose first line is ``first_line``."""
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(rf"```properties\n({re.escape(first_line)}\n.*?)```", text, re.S)
    assert found is not None, f"no properties block starting {first_line!r} in {GUIDE}"
    return found.group(1)


def test_exec_start_is_the_tidelog_console_scripts_broker_command() -> None:
    argv = shlex.split(_service()["ExecStart"])
    assert Path(argv[0]).name == "tidelog"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tidelog"] == "tidelog.cli.main:console"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "broker"
    assert args.config == Path("/etc/tidelog/server.properties")
    shown = subprocess.run(
        [sys.executable, "-m", "tidelog", *argv[1:2], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--config" in shown.stdout


def test_a_bad_setting_exits_with_the_status_the_unit_does_not_restart(tmp_path: Path) -> None:
    service = _service()
    assert service["Restart"] == "on-failure"
    bad = tmp_path / "server.properties"
    bad.write_text("broker.id=1\nnum.partitions=0\n")
    done = subprocess.run(
        [sys.executable, "-m", "tidelog", "broker", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert str(done.returncode) in service["RestartPreventExitStatus"].split()
    assert "num.partitions" in done.stderr


def test_the_stop_is_a_controlled_shutdown_within_timeout_stop_sec() -> None:
    service = _service()
    assert signal.Signals[service["KillSignal"]] == signal.SIGTERM
    bound_s = CONTROLLED_SHUTDOWN_TIMEOUT_S + DEMOTION_WAIT_S
    assert int(service["TimeoutStopSec"]) > bound_s
    assert int(service["LimitNOFILE"]) >= 100_000
    assert service["User"] == "tidelog"


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    console_script = shutil.which("tidelog", path=str(Path(sys.executable).parent))
    if analyze is None or console_script is None:
        pytest.skip("systemd-analyze or the tidelog console script is not installed here")
    # The unit names /opt/tidelog/bin/tidelog; this machine's console script stands in.
    text = UNIT.read_text(encoding="utf-8").replace("/opt/tidelog/bin/tidelog", console_script)
    unit = tmp_path / "tidelog.service"
    unit.write_text(text)
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tidelog.service" not in done.stdout + done.stderr


def test_the_guides_server_properties_is_a_valid_broker_config(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(_guide_properties("# /etc/tidelog/server.properties on kafka1"))
    config = load_broker_config_file(path)
    assert dict(config.ignored) == {}
    values = parse_properties(path.read_text())
    # What the host tests run with (GUIDE_OVERRIDES, HostsCluster.broker_properties).
    assert values["zookeeper.set.acl"] == "true"
    assert values["tidelog.zookeeper.digest"].startswith("tidelog:")
    assert values["min.insync.replicas"] == "2"
    assert values["default.replication.factor"] == "3"
    assert values["listeners"] == values["advertised.listeners"] == "PLAINTEXT://10.0.0.1:9092"
    assert values["zookeeper.connect"].count(":2181") == 3
    assert values["broker.rack"]


def test_the_guides_zoo_cfg_is_the_tested_ensemble_members(tmp_path: Path) -> None:
    guide = parse_properties(_guide_properties("# /etc/zookeeper/conf/zoo.cfg on kafka1"))
    member = ZooKeeperProcess(
        tmp_path,
        client_port=2181,
        host="10.0.0.1",
        server_id=1,
        ensemble={1: "10.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3"},
    )
    tested = dict(line.split("=", 1) for line in member.config_lines())
    # Timings and paths differ (a 500 ms tick, a temporary dataDir, no purge in tests);
    # the tests' session bounds suit their 4 s sessions, the guide keeps ZooKeeper's.
    differ = {"tickTime", "dataDir", "autopurge.purgeInterval", "autopurge.snapRetainCount"}
    tests_only = {"minSessionTimeout", "maxSessionTimeout"}
    assert {k: v for k, v in guide.items() if k not in differ} == {
        k: v for k, v in tested.items() if k not in differ | tests_only
    }


@pytest.mark.parametrize(
    "name",
    [
        "zk-mode",
        "zk-acl-check",
        "under-replicated",
        "preferred-election",
        "zk-backup",
        "zk-restore",
    ],
)
def test_the_blocks_the_host_tests_run_are_in_the_guide(name: str) -> None:
    assert guide_block(name).strip()


def test_every_metric_the_guide_alerts_on_is_on_the_dashboard() -> None:
    """So each is served by the brokers: test_grafana_dashboard.py scrapes every name the
    dashboard uses."""
    section = GUIDE.read_text(encoding="utf-8").split("## What to monitor", 1)[1]
    names = re.findall(r"^\| `([a-z_]+)`", section, re.M)
    assert len(names) >= 8, section
    dashboard = (ROOT / "deploy" / "grafana" / "tidelog-dashboard.json").read_text()
    assert [n for n in names if n not in dashboard] == []
