"""The log dir APIs (KIP-113, JBOD): what ``kafka-log-dirs.sh``, ``kafka-reassign-partitions.sh
--reassignment-json-file`` (its ``log_dirs``) and ``Admin.describeLogDirs`` /
``alterReplicaLogDirs`` ask a broker. The work is ``tidelog.server.replica.alter_log_dirs``'s.

- DescribeLogDirs (35, v1-v4; kio has no v0, which is v1's format): DESCRIBE on the
  cluster, else the request's ``error_code`` (v3+) is CLUSTER_AUTHORIZATION_FAILED and no
  log dir is listed (Kafka's ``handleDescribeLogDirsRequest``). ``topics`` null asks for
  every partition with a log here; otherwise the listed partitions.
- AlterReplicaLogDirs (34, v1-v2): ALTER on the cluster, else every partition's answer is
  CLUSTER_AUTHORIZATION_FAILED. Each partition of each dir gets
  ``ReplicaAlterLogDirsManager.alter_replica_log_dir``'s answer; results are grouped by
  topic. A partition named twice is answered for
  the last dir naming it, as Kafka's map does (the earlier move is replaced by the later).

Both are answered at once: a move runs in the background after its answer, and goes on
after a broker restart (``tidelog.server.replica.alter_log_dirs`` rule d); meanwhile
DescribeLogDirs lists its future log with ``is_future_key`` true.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.replica.alter_log_dirs import ReplicaAlterLogDirsManager

#: What the broker advertises for these APIs (``tidelog.protocol.apis``).
LOG_DIR_API_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
}


class LogDirApis:
    """DescribeLogDirs and AlterReplicaLogDirs of one broker."""

    def __init__(self, helper: RequestHelper, mover: ReplicaAlterLogDirsManager) -> None:
        self.helper = helper
        self.mover = mover

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self.handle_alter_replica_log_dirs,
        }

    def handle_describe_log_dirs(self, header: RequestHeader, body: Any) -> Any:
        if not authz.cluster_allowed(self.helper.authorizer, AclOperation.DESCRIBE, header.api_key):
            return self.helper.respond(
                header, {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
            )
        partitions = (
            None
            if body.topics is None
            else [TopicPartition(str(t.topic), int(p)) for t in body.topics for p in t.partitions]
        )
        results = self.mover.describe_log_dirs(partitions)
        return self.helper.respond(header, {"error_code": ErrorCode.NONE, "results": results})

    def handle_alter_replica_log_dirs(self, header: RequestHeader, body: Any) -> Any:
        allowed = authz.cluster_allowed(self.helper.authorizer, AclOperation.ALTER, header.api_key)
        wanted: dict[TopicPartition, str] = {}
        for log_dir in body.dirs:
            for topic in log_dir.topics:
                for p in topic.partitions:
                    tp = TopicPartition(str(topic.name), int(p))
                    wanted.pop(tp, None)  # the last dir naming it wins, in its place
                    wanted[tp] = str(log_dir.path)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, path in wanted.items():
            error = (
                self.mover.alter_replica_log_dir(tp, path)
                if allowed
                else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "error_code": error}
            )
        return self.helper.respond(
            header,
            {
                "results": [
                    {"topic_name": topic, "partitions": parts} for topic, parts in by_topic.items()
                ]
            },
        )


__all__ = ["LOG_DIR_API_VERSIONS", "LogDirApis"]
