"""The replication core: pure, IO-free partition state (docs/design.md, replication rules 2-9).

- :mod:`tidelog.replication.epoch` — ``LeaderEpochCache`` (which epoch began where).
- :mod:`tidelog.replication.partition` — ``Partition`` (leader/follower state of one replica:
  HW, ISR with in-flight AlterPartition changes, acks checks, fencing), ``ReplicaState``,
  ``LeaderAndIsr``, ``AlterPartitionProposal``.
- :mod:`tidelog.replication.truncation` — the follower's divergence decision from
  OffsetForLeaderEpoch answers and DivergingEpoch (``follower_truncation_offset``,
  ``diverging_epoch``, ``leader_end_offset_for_epoch``).

Exceptions: ``ReplicationStateError(TidelogError)`` — a caller bug (a leader-only method on a
follower); expected outcomes are returned as ``ErrorCode`` values.
"""
