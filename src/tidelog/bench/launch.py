"""What the benchmark needs from a local cluster launcher, as types the CLI satisfies.

``tidelog bench`` (in :mod:`tidelog.cli.bench`) hands in its ``LocalCluster`` class, its
``free_port`` and the name of the client settings file a secured cluster writes, so this
package, a layer below ``tidelog.cli``, never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self

from tidelog.security.client_config import ClientSecurity


class Broker(Protocol):
    """One broker process of a local cluster."""

    @property
    def broker_id(self) -> int: ...
    @property
    def port(self) -> int: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def bootstrap(self) -> str: ...
    @property
    def output_path(self) -> Path: ...


class ClusterState(Protocol):
    @property
    def brokers(self) -> Sequence[Broker]: ...


class Cluster(Protocol):
    """ZooKeeper and brokers as processes under ``directory``."""

    @property
    def directory(self) -> Path: ...
    @property
    def event_loop(self) -> str: ...
    @property
    def state(self) -> ClusterState | None: ...
    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def security(self) -> object | None: ...
    def client_security(self) -> ClientSecurity: ...
    def start(self, timeout_s: float = ...) -> Self: ...
    def stop(self, timeout_s: float = ...) -> None: ...
    def broker(self, broker_id: int) -> Broker: ...
    def stop_broker(self, broker_id: int, timeout_s: float = ...) -> None: ...
    def start_broker(self, broker_id: int, timeout_s: float = ...) -> None: ...
    def controller_id(self) -> int | None: ...


class ClusterFactory(Protocol):
    """A not yet started cluster of ``brokers`` brokers with ``overrides`` in each
    broker's configuration, secured as ``security`` (a mode of the launcher)."""

    def __call__(
        self,
        directory: Path,
        brokers: int = ...,
        overrides: Mapping[str, str] | None = ...,
        *,
        security: str = ...,
        racks: Sequence[str] = ...,
    ) -> Cluster: ...


@dataclass(frozen=True, slots=True)
class Launcher:
    """The launcher's parts the benchmark uses."""

    cluster: ClusterFactory
    #: A TCP port on 127.0.0.1 free a moment ago (for the peers' nodes).
    free_port: Callable[[], int]
    #: File name, under a secured cluster's directory, of its clients' settings.
    client_properties: str
