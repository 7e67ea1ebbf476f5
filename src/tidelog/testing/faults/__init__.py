"""Fault injection against real processes (issue 7): does acks=all with RF=3,
min.insync.replicas=2 and no unclean election lose an acknowledged record, whatever fails?

- ``cluster``: ``FaultCluster``, ZooKeeper + brokers as real processes (``LocalCluster``),
  every broker behind a TCP proxy for clients/peers and for ZooKeeper, optionally one log
  dir on a small tmpfs;
- ``proxy``: the loopback TCP proxies that cut and heal links;
- ``workload``: confluent-kafka producers (acks=all) and consumers (assign) recording
  their histories;
- ``nemesis``: the faults (kills, pauses, restarts, partitions, torn tails, full disks);
- ``checker``: lost / moved / vanished / inconsistent / reordered / duplicated records,
  replicas diverging below the HW, unavailability per fault;
- ``run``: one run and its Markdown report; ``unclean``: the seed-000 data-loss scenario
  with ``unclean.leader.election.enable=true``, which the checker must catch;
- ``txn_workload``, ``txn_checker``, ``txn_run`` (issue 19): the transactional workload
  (confluent-kafka transactional producers committing, aborting, and fenced as zombies;
  read_committed consumers), its checker (nothing committed lost, nothing aborted visible,
  all or nothing, nothing visible before its commit, zombies fenced) and its run and report
  (``--workload transactions``).

IO is the point here: this package starts processes, signals them by PID, mounts tmpfs.
"""
