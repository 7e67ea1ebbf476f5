"""Where to connect to a peer broker: its registered address on the inter-broker listener,
unless the testing-only ``tidelog.testing.peer.addresses`` names another for that peer
(``BrokerConfig.peer_address``): the fault harness puts a proxy on each link A -> B."""

from __future__ import annotations

from collections.abc import Callable

from tidelog.zk.znodes import BrokerRegistration

#: Where to connect to a peer broker: (broker id, registered host, registered port) ->
#: (host, port); ``BrokerConfig.peer_address`` (``tidelog.testing.peer.addresses``).
PeerAddress = Callable[[int, str, int], tuple[str, int]]


def registered_address(_broker_id: int, host: str, port: int) -> tuple[str, int]:
    """The registered address itself: no other address for any peer."""
    return host, port


def listener_address(registration: BrokerRegistration, listener_name: str) -> tuple[str, int]:
    """Where a registered broker listens on ``listener_name`` (the inter-broker listener:
    every broker of a cluster uses the same one, Kafka's rule); the legacy PLAINTEXT
    host/port when it registered no such listener (an older broker)."""
    for endpoint in registration.endpoints:
        if endpoint.listener_name == listener_name:
            return endpoint.host or "127.0.0.1", endpoint.port
    return registration.host or "127.0.0.1", registration.port


__all__ = ["PeerAddress", "listener_address", "registered_address"]
