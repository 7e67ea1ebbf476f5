"""What every handler group shares (Kafka's ``RequestHandlerHelper`` / ``AuthHelper``):
building a response of the negotiated version, the ACL authorizer, this broker's address
on the request's listener, a topic's effective config and the KIP-108/133 policies.

A handler group receives this and the two or three collaborators it uses (the metadata
backend, the replica manager, ...), never the whole set of handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.config.policies import Policies
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import TopicInfo
from tidelog.server.network.request_context import current_request

if TYPE_CHECKING:
    from tidelog.server.auth.authorizer import AclAuthorizer


class RequestHelper:
    """Shared by the handler groups of one broker; see the module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        endpoint = config.advertised_listener
        self.host, self.port = endpoint.host, endpoint.port
        self._advertised = {e.name: e for e in config.advertised_listeners}
        #: Listener name -> bound port, set by the broker once it listens (for port 0).
        self.bound_ports: Mapping[str, int] = {}
        #: The ACL authorizer (``tidelog.server.auth.authorizer``); None: everything is allowed.
        self.authorizer: AclAuthorizer | None = None
        #: KIP-108/133 policies (``tidelog.server.config.policies``); both absent by default.
        self.policies = Policies.from_config(config.values)

    @staticmethod
    def response_class(header: RequestHeader) -> type[Any]:
        cls: type[Any] = load_response_schema(header.api_key, header.api_version)
        return cls

    def respond(self, header: RequestHeader, data: Mapping[str, Any]) -> Any:
        """The response entity of ``header``'s version from ``data`` (every version's
        fields; ``tidelog.protocol.messages.build`` narrows them)."""
        return build(self.response_class(header), data)

    def own_address(self) -> tuple[str, int]:
        """This broker's advertised address on the listener the request came in on (a
        client on the SSL listener must be sent back to the SSL port, Kafka's rule)."""
        name = current_request().listener_name
        endpoint = self._advertised.get(name)
        if endpoint is None:
            return self.host, self.port
        return endpoint.host, endpoint.port or self.bound_ports.get(name, endpoint.port)

    def topic_config(self, info: TopicInfo) -> dict[str, object]:
        """``info``'s effective config: its overrides over the broker's topic defaults."""
        return effective_topic_config(self.config, info.configs)


__all__ = ["RequestHelper"]
