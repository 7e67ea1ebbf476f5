"""What tests run tidelog under: the deterministic replication simulator, and the launcher
of real ZooKeeper and broker processes (docs/design.md, Layers).

- :mod:`tidelog.testing.sim` — ``Simulation(SimConfig, seed)``: brokers running the real
  ``tidelog.replication`` code, the real ``tidelog.controller.decisions``, a simulated clock
  and network, faults (crash, bounce, pause, network partition, preferred election,
  controlled shutdown, controller failover), partition reassignment (KIP-455), producers
  (acks 0/1/-1) and consumers. Its parts: ``sim_types`` (config, logs, messages, stats),
  ``sim_core`` (clock, event queue, network), ``sim_broker`` (the brokers' replication),
  ``sim_controller`` (the controller and reassignment); ``sim`` adds clients and faults.
- :mod:`tidelog.testing.invariants` — ``InvariantChecker``: the guarantees, checked after
  every event; violations are collected as values.
- :mod:`tidelog.testing.soak` — random seeds (``python -m tidelog.testing.soak``), each
  replayable with ``--replay SEED``.
- :mod:`tidelog.testing.processes` — free ports, a broker process started from its
  ``server.properties``, the ApiVersions readiness probe, a PID's state; used by
  :mod:`tidelog.testing.broker` (``BrokerProcess``: one broker a test owns),
  :mod:`tidelog.testing.zookeeper` (``ZooKeeperProcess``) and :mod:`tidelog.testing.cluster`
  (``LocalCluster``: ZooKeeper + N brokers with a state file; ``tidelog cluster up`` runs it
  through ``tidelog.cli.launcher``). Processes are stopped by their own PID only.
- :mod:`tidelog.testing.faults` — fault injection against a ``LocalCluster``.
"""
