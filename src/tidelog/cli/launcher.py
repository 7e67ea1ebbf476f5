"""``tidelog cluster up``'s local cluster: ``tidelog.testing.cluster.LocalCluster`` (ZooKeeper +
N broker processes, the state file, signals by PID) with the CLI's two collaborators wired
in: Metadata read through tidelog's own client, and the secured modes of
``tidelog.cli.local_security`` (TLS and/or SASL listeners, ACLs, the admin's SCRAM
credentials written to ZooKeeper before any broker starts).

Exceptions: ``tidelog.testing.cluster.ClusterError`` (an unknown ``--security`` mode too).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tidelog.cli import local_security
from tidelog.security.client_config import ClientSecurity
from tidelog.testing import cluster
from tidelog.testing.cluster import DEFAULT_DIR, ClusterError


def client_metadata_view(
    bootstrap: str, security: ClientSecurity
) -> tuple[tuple[int, ...], int] | None:
    """(broker ids, controller id) from one broker's Metadata, or None when it does not
    answer (``tidelog.testing.cluster.MetadataView``)."""
    from tidelog.client import BlockingClient, ClientError  # noqa: PLC0415 - CLI start cost

    try:
        with BlockingClient(bootstrap, request_timeout_s=3.0, security=security) as client:
            md = client.metadata([])
    except (ClientError, OSError):
        return None
    return tuple(sorted(md.brokers)), md.controller_id


class LocalCluster(cluster.LocalCluster):
    """A ``tidelog.testing.cluster.LocalCluster`` that reads Metadata with tidelog's client
    and may be secured (``security``: one of ``local_security.MODES``)."""

    def __init__(
        self,
        directory: Path = DEFAULT_DIR,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        *,
        zookeeper: bool = True,
        python: str = sys.executable,
        event_loop: str = "uvloop",
        security: str = "plaintext",
        racks: Sequence[str] = (),
    ) -> None:
        if security not in local_security.MODES:
            raise ClusterError(
                f"--security must be one of {', '.join(local_security.MODES)}, not {security!r}"
            )
        super().__init__(
            directory,
            brokers,
            overrides,
            zookeeper=zookeeper,
            python=python,
            event_loop=event_loop,
            security=security,
            metadata_view=client_metadata_view,
            racks=racks,
        )
        self._local_security: local_security.LocalSecurity | None = None

    @property
    def security(self) -> local_security.LocalSecurity | None:
        """The cluster's secrets and settings (None: plaintext), ``local_security``."""
        if self._local_security is None and self.security_mode != "plaintext":
            self._local_security = local_security.prepare(self.directory, self.security_mode)
        return self._local_security

    def bootstrap_security(self, zookeeper_connect: str) -> None:
        """The admin's SCRAM credentials in ZooKeeper (``local_security.bootstrap_admin``)."""
        security = self.security
        if security is not None:
            asyncio.run(local_security.bootstrap_admin(zookeeper_connect, security))


__all__ = ["LocalCluster", "client_metadata_view"]
