"""``tidelog bench``, measuring tidelog side by side with its peers and the machine's limits.

One run measures, on this machine and in this order (so every ratio comes from one run):

1. limits: the same bytes written three times to one disk by a plain loop, loopback
   ``sendfile`` (:mod:`tidelog.bench.limits`);
2. produce throughput and send->ack latency of a three-broker tidelog cluster (RF=3,
   min.insync.replicas=2, acks=all; and RF=1, acks=1) for 100 B, 1 KiB and 64 KiB records,
   from confluent-kafka producers (:mod:`tidelog.bench.kafka`);
3. consumer catch-up over the backlog those runs left, and produce->consume latency at
   fixed rates; then transactions (:mod:`tidelog.bench.transactions`): a transactional
   producer's throughput beside an idempotent one's, and read_committed latency;
4. the same produce workloads on NATS JetStream R3 and RabbitMQ Streams with three nodes
   (:mod:`tidelog.bench.peers`), installed from Debian's packages when absent;
5. failover of 1,000 partitions (SIGKILL and SIGTERM of a broker) and the brokers' RSS and
   idle CPU with 1,000 and 5,000 partition replicas each.

With ``--bootstrap-server`` nothing is started: the produce, catch-up and end-to-end rows
(and the limits, when asked for) are measured on that cluster instead
(:mod:`tidelog.bench.external`).

Results go to ``benchmarks/results/`` (``results.json``, ``results.md``, PNG charts; see
:mod:`tidelog.bench.report`). Every process started is stopped by its PID. Nothing here
is imported by the broker: this package is a load generator and a reporter.
"""
