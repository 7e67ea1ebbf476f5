"""``tidelog log-dirs`` without a broker: kafka-log-dirs.sh's JSON, the option checks, and
the client's pure request builders and response readers (``tidelog.client.log_dir_admin``)."""

from __future__ import annotations

import argparse

import pytest
from kio.index import load_response_schema

from tidelog.cli.log_dirs import absolute_dir, id_list, log_dirs_json, name_list, where_is
from tidelog.cli.main import main
from tidelog.client import log_dir_admin as lda
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)


def answer(*dirs: lda.LogDirDescription) -> lda.DescribeLogDirsResult:
    return lda.DescribeLogDirsResult(ErrorCode.NONE, dirs)


def test_json_is_kafka_log_dirs_documents() -> None:
    answers = {
        2: answer(lda.LogDirDescription("/d/x", ErrorCode.KAFKA_STORAGE_ERROR)),
        1: answer(
            lda.LogDirDescription(
                "/d/a",
                ErrorCode.NONE,
                (lda.ReplicaLogInfo(U0, 5, 0, False), lda.ReplicaLogInfo(T1, 7, 2, False)),
                100,
                40,
            ),
            lda.LogDirDescription("/d/b", ErrorCode.NONE, (lda.ReplicaLogInfo(T1, 3, 4, True),)),
        ),
    }
    assert log_dirs_json(answers) == {
        "version": 1,
        "brokers": [
            {
                "broker": 1,
                "logDirs": [
                    {
                        "logDir": "/d/a",
                        "error": None,
                        "partitions": [
                            {"partition": "t-1", "size": 7, "offsetLag": 2, "isFuture": False},
                            {"partition": "u-0", "size": 5, "offsetLag": 0, "isFuture": False},
                        ],
                        "totalBytes": 100,
                        "usableBytes": 40,
                    },
                    {
                        "logDir": "/d/b",
                        "error": None,
                        "partitions": [
                            {"partition": "t-1", "size": 3, "offsetLag": 4, "isFuture": True}
                        ],
                        "totalBytes": -1,
                        "usableBytes": -1,
                    },
                ],
            },
            {
                "broker": 2,
                "logDirs": [
                    {
                        "logDir": "/d/x",
                        "error": "org.apache.kafka.common.errors.KafkaStorageException",
                        "partitions": [],
                        "totalBytes": -1,
                        "usableBytes": -1,
                    }
                ],
            },
        ],
    }
    only_u = log_dirs_json(answers, ["u"])
    assert [p["partition"] for d in only_u["brokers"][0]["logDirs"] for p in d["partitions"]] == [
        "u-0"
    ]
    assert where_is(answers[1], T1) == (["/d/a"], ["/d/b"])
    assert where_is(answers[1], T0) == ([], [])


def test_option_parsers() -> None:
    assert id_list("1, 2,3") == [1, 2, 3]
    assert name_list("a,,b ") == ["a", "b"]
    assert absolute_dir("/data/b/") == "/data/b"
    for parse, text in ((id_list, "1,x"), (id_list, ","), (name_list, ","), (absolute_dir, "b")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_a_relative_log_dir_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            ["log-dirs", "move", "--bootstrap-server", "127.0.0.1:1", "--topic", "t",
             "--partition", "0", "--broker", "1", "--log-dir", "relative"]
        )  # fmt: skip
    assert exited.value.code == 2
    assert "not an absolute path" in capsys.readouterr().err


def test_requests_and_responses() -> None:
    request = lda.alter_replica_log_dirs_request({T0: "/a", T1: "/b", U0: "/a"}, version=2)
    assert [(d.path, [(t.name, list(t.partitions)) for t in d.topics]) for d in request.dirs] == [
        ("/a", [("t", [0]), ("u", [0])]),
        ("/b", [("t", [1])]),
    ]
    assert lda.describe_log_dirs_request(None, 4).topics is None
    [topic] = lda.describe_log_dirs_request({"t": [0, 1]}, 1).topics
    assert (topic.topic, list(topic.partitions)) == ("t", [0, 1])

    def response(api: ApiKey, version: int, data: dict[str, object]) -> object:
        return build(load_response_schema(api, version), data)

    described = lda.read_describe_log_dirs(
        response(
            ApiKey.DESCRIBE_LOG_DIRS,
            4,
            {
                "error_code": 0,
                "results": [
                    {
                        "error_code": 0,
                        "log_dir": "/a",
                        "total_bytes": 10,
                        "usable_bytes": 5,
                        "topics": [
                            {
                                "name": "t",
                                "partitions": [
                                    {
                                        "partition_index": 1,
                                        "partition_size": 9,
                                        "offset_lag": 3,
                                        "is_future_key": True,
                                    }
                                ],
                            }
                        ],
                    },
                    {"error_code": 56, "log_dir": "/b", "topics": []},
                ],
            },
        )
    )
    assert described == lda.DescribeLogDirsResult(
        ErrorCode.NONE,
        (
            lda.LogDirDescription(
                "/a", ErrorCode.NONE, (lda.ReplicaLogInfo(T1, 9, 3, True),), 10, 5
            ),
            lda.LogDirDescription("/b", ErrorCode.KAFKA_STORAGE_ERROR),
        ),
    )
    # v1 has neither the request-level error nor the volume's sizes.
    old = lda.read_describe_log_dirs(
        response(ApiKey.DESCRIBE_LOG_DIRS, 1, {"results": [{"log_dir": "/a", "topics": []}]})
    )
    assert old == answer(lda.LogDirDescription("/a", ErrorCode.NONE))
    altered = lda.read_alter_replica_log_dirs(
        response(
            ApiKey.ALTER_REPLICA_LOG_DIRS,
            2,
            {
                "results": [
                    {
                        "topic_name": "t",
                        "partitions": [
                            {"partition_index": 0, "error_code": 57},
                            {"partition_index": 1, "error_code": 0},
                        ],
                    }
                ]
            },
        )
    )
    assert altered == {T0: ErrorCode.LOG_DIR_NOT_FOUND, T1: ErrorCode.NONE}
