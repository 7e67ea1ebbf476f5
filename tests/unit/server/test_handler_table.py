"""The handler table: groups merged once, an API claimed by two groups refused at start-up."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.protocol.apis import ApiKey
from tidelog.server.apis.handler_table import (
    DuplicateHandlerError,
    Handler,
    HandlerTable,
    merge_handlers,
)


def _answer(_header: Any, _body: Any) -> Any:
    return None


class Produce:
    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.PRODUCE: _answer}


class Fetch:
    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.FETCH: _answer, ApiKey.LIST_OFFSETS: _answer}


class AlsoProduce:
    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.PRODUCE: _answer}


def test_groups_are_merged() -> None:
    table = HandlerTable([Produce(), Fetch()])
    assert set(table.handlers) == {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS}


def test_an_api_claimed_twice_is_refused_naming_both_groups() -> None:
    with pytest.raises(
        DuplicateHandlerError, match="PRODUCE is handled by both Produce and AlsoProduce"
    ):
        merge_handlers([Produce(), Fetch(), AlsoProduce()])
