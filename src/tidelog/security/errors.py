"""The security package's exceptions (hierarchy in ``tidelog.security``'s docstring)."""

from __future__ import annotations

from tidelog.errors import TidelogError


class SecurityError(TidelogError):
    """Root of the security package's failures."""


class AuthenticationError(SecurityError):
    """A login failed: wrong password, unknown user, bad SASL message. The message is what
    the client is told (Kafka's SaslAuthenticate ``error_message``): never a secret."""


class SecurityConfigError(SecurityError):
    """A security property is missing or wrong; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
