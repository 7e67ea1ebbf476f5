"""``tidelog bench --bootstrap-server --command-config`` on a SASL_PLAINTEXT cluster with the
ACL authorizer on (real ZooKeeper and broker processes): the admin's ``client.properties``
(Java's names) logs in every client of the run, the bench's producers and consumer
included; a wrong password is one error line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.security.conftest import Secured

pytestmark = pytest.mark.integration


def _bench(secured: Secured, config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "tidelog", "bench", "--bootstrap-server", secured.bootstrap,
            "--command-config", str(config), "--only", "produce", "--seconds", "1",
            "--sizes", "100", "--quick", "--no-charts", "--output", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize("secured", ["sasl_plaintext"], indirect=True)
def test_the_command_config_logs_in_every_client_of_the_run(
    secured: Secured, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    ran = _bench(secured, secured.directory / "client.properties", out)
    assert ran.returncode == 0, ran.stderr
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["skipped"] == []
    assert data["external_cluster"]["security_protocol"] == "SASL_PLAINTEXT"
    rows = {(r["section"], r["workload"]): r["values"] for r in data["rows"]}
    assert sorted(rows) == [
        ("catch-up", "RF=1 backlog 100 B"),
        ("produce", "RF=1 acks=1 100 B"),
        ("produce", "RF=1 acks=all 100 B"),
    ]
    produced = rows[("produce", "RF=1 acks=all 100 B")]
    assert produced["records"] == produced["sent"] > 0
    assert rows[("catch-up", "RF=1 backlog 100 B")]["records"] == produced["records"]
    topics = AdminClient(secured.admin_conf()).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith("tidelog-bench-")]


@pytest.mark.parametrize("secured", ["sasl_plaintext"], indirect=True)
def test_a_wrong_password_is_one_error_line(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "wrong.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=admin\nsasl.password=not-the-password\n",
        encoding="utf-8",
    )
    out = tmp_path / "results"
    ran = _bench(secured, config, out)
    assert ran.returncode == 1
    assert re.fullmatch(
        r"tidelog bench: error: SASL_AUTHENTICATION_FAILED: the cluster at 127\.0\.0\.1:\d+ "
        r"refused the login: .*Authentication failed.*\n"
        r"hint: check sasl\.username/sasl\.password \(or sasl\.jaas\.config\) in "
        r"--command-config\n",
        ran.stderr,
    ), ran.stderr
    assert not out.exists()
