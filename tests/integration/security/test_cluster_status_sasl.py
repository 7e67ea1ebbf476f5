"""``tidelog cluster status --bootstrap-server --command-config`` on a SASL_PLAINTEXT broker
with the ACL authorizer on (real ZooKeeper and broker process): the admin's
``client.properties`` logs in and the status is healthy; a wrong password is one error line
and exit 1, as for every command; no ``--command-config`` cannot log in, so nothing
answers Metadata: exit 4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.security.conftest import Secured
from tidelog.cli.cluster_remote import EXIT_CRITICAL, EXIT_HEALTHY

pytestmark = pytest.mark.integration


def _status(secured: Secured, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["cluster", "status", "--bootstrap-server", secured.bootstrap, "--timeout", "5"]
    return subprocess.run(
        [sys.executable, "-m", "tidelog", *argv, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("secured", ["sasl_plaintext/1"], indirect=True)
def test_status_logs_in_with_the_command_config(secured: Secured, tmp_path: Path) -> None:
    ran = _status(secured, "--command-config", str(secured.directory / "client.properties"))
    assert ran.returncode == EXIT_HEALTHY, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert [line for line in lines if line.startswith("broker ")] == [
        f"broker 1 {secured.bootstrap} rack - up"
    ]
    assert lines[-1] == "health: healthy"

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=admin\nsasl.password=not-the-password\n",
        encoding="utf-8",
    )
    refused = _status(secured, "--command-config", str(wrong))
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.startswith("tidelog cluster: error: authentication failed: ")
    assert "not-the-password" not in refused.stderr
    assert "Traceback" not in refused.stderr

    plain = _status(secured)
    assert plain.returncode == EXIT_CRITICAL, plain.stdout + plain.stderr
    assert plain.stdout.splitlines()[-1] == "health: critical: cannot reach the cluster"
    assert "Traceback" not in plain.stderr
