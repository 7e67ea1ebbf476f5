"""RequestHeader: the value every request starts with."""

from __future__ import annotations

import pytest

from tidelog.protocol.codec import RequestHeader as CodecRequestHeader
from tidelog.protocol.header import RequestHeader


@pytest.mark.parametrize(
    ("api_key", "name"),
    [(0, "PRODUCE"), (1, "FETCH"), (18, "API_VERSIONS"), (9999, "9999"), (-1, "-1")],
)
def test_api_name_is_the_api_key_name_or_the_number(api_key: int, name: str) -> None:
    assert RequestHeader(api_key, 0, 1).api_name == name


def test_the_codec_names_the_same_class() -> None:
    assert CodecRequestHeader is RequestHeader
