"""BrokerSecurity's own APIs and what it exposes to the ACL and SCRAM handler groups."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.server.auth.broker_security import BrokerSecurity
from tidelog.server.auth.credentials import MemoryUserCredentialStore
from tidelog.server.config.broker_config import load_broker_config


def _security(tmp_path: Path) -> BrokerSecurity:
    return BrokerSecurity(load_broker_config({"log.dirs": str(tmp_path)}), clustered=False)


def test_sasl_apis_after_the_login_answer_illegal_sasl_state(tmp_path: Path) -> None:
    handlers = _security(tmp_path).handlers()
    assert set(handlers) == {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    handshake = handlers[ApiKey.SASL_HANDSHAKE](RequestHeader(ApiKey.SASL_HANDSHAKE, 1, 7), None)
    assert handshake.error_code.value == ErrorCode.ILLEGAL_SASL_STATE
    assert handshake.mechanisms == ()
    authenticate = handlers[ApiKey.SASL_AUTHENTICATE](
        RequestHeader(ApiKey.SASL_AUTHENTICATE, 2, 8), None
    )
    assert authenticate.error_code.value == ErrorCode.ILLEGAL_SASL_STATE
    assert "after successful authentication" in authenticate.error_message


def test_a_lone_broker_keeps_credentials_in_memory(tmp_path: Path) -> None:
    security = _security(tmp_path)
    asyncio.run(security.start(None))
    assert isinstance(security.user_store, MemoryUserCredentialStore)
    assert security.authorize_cluster("ALTER")  # no authorizer: everything is allowed
