"""Prometheus metrics: what a broker does, in the names Kafka's dashboards already use.

With ``metrics.listener`` set (``http://host:port``; port 0 picks a free one, logged), the
broker answers ``GET /metrics`` there in Prometheus' text format (version 0.0.4), from a
registry of its own (never ``prometheus_client``'s global one: tests run several brokers in
one process). docs/metrics.md lists every metric.

1. Names. A Kafka MBean ``kafka.<domain>:type=<Type>,name=<Name>[,<tag>=<value>]`` becomes
   ``kafka_<domain>_<type>_<name>`` in lower case, each tag a lower-case label: what the
   Prometheus JMX exporter's Kafka rules produce, so existing dashboards and alerts map. A
   ``...PerSec`` meter is a counter without the ``PerSec`` (``_total`` added); a ``...Ms``
   timer is a histogram in milliseconds (``_bucket``/``_sum``/``_count``); the count of a
   ``...RateAndTimeMs`` timer is a counter named without ``RateAndTimeMs``. Each HELP text
   names the MBean. Python process figures come from ``prometheus_client``'s
   ``ProcessCollector`` (``process_*``).
2. Gauges derived from state (leaders, under-replicated partitions, the controller's
   offline partitions, purgatory sizes, the ZooKeeper session, each hosted partition's log
   size, segments and offsets, each followed partition's lag) are computed at scrape time
   by ``BrokerCollector`` from the replica manager, the fetchers, the controller and the
   ZooKeeper client: the request paths pay nothing for them. A scrape walks the hosted
   partitions once; with 5,000 of them the answer has ~25,000 samples (docs/metrics.md,
   "Cost", has the time it takes).
3. Counters bumped where things happen are plain ints on the objects that own the event
   (``ReplicaManager.isr_shrinks``, ``Controller.leader_elections``, ...), read at scrape
   time. The per-topic ``BrokerTopicMetrics`` are ``TopicStats`` in the replica manager's
   ``topic_stats``: a dict lookup and a few integer additions per partition appended or
   read. The all-topics series are summed at scrape time; a topic no longer hosted here
   leaves its counts in them (``BrokerTopicStats.retire``) and loses its own series.
   Follower lag is Kafka's: the leader's high watermark in the last fetch answer (kept by
   the fetcher) minus this replica's log end offset, not below 0.
4. The endpoint is an asyncio server on the broker's loop (``MetricsEndpoint``), not
   ``prometheus_client``'s thread server: the collectors read state that belongs to the
   loop, so they run on it, reading plain values; the samples of the per-partition
   families are made from those values (``LazyFamily``) and the text is formatted in a
   worker thread, so the loop is held only while the values are read. One request per
   connection: ``GET /metrics`` (or ``HEAD``) answers 200, another path 404, another
   method 405, a request line that is not HTTP/1.x (or a line over 8 KiB) 400; the
   connection closes after each answer (after an error answer, once the client has closed
   its side or 1 s has passed, so that it reads the answer), and without an answer when
   the client sends nothing for 10 s.
5. Request times (Kafka's RequestMetrics), per API name, one ``RequestStats`` each made up
   front (no label lookup, no lock: everything runs on the event loop). A request is
   marked with ``time.monotonic()``: *received* (the connection's read that brought it),
   *started* (its handler called, after the decode and any wait behind the readiness
   gate), *local done* (the handler returned: an answer, or parked in a purgatory),
   *ready* (the parked request's answer is there), *dequeued* (the connection takes the
   answer, after the answers before it on the connection) and *sent* (written to the
   transport). RequestQueueTimeMs is started - received, LocalTimeMs local done - started,
   RemoteTimeMs ready - local done (the acks=all or long-poll wait), ResponseQueueTimeMs
   dequeued - ready, ResponseSendTimeMs sent - dequeued, TotalTimeMs sent - received. A
   request is counted (RequestsPerSec) when its answer is written, or when it is done if
   it has none (acks=0). Four clock reads and six bisects per request (more if parked),
   only with ``metrics.listener`` set. Fetch is also counted as FetchConsumer or
   FetchFollower, as in Kafka. Histograms are shown for request names seen at least once.
6. ``NetworkProcessorAvgIdlePercent``: one thread runs the network, the handlers and the
   replication here, so the figure is the share of wall time that thread was not on a CPU
   since the previous scrape (``time.thread_time`` against ``time.monotonic``; 1.0 idle,
   0.0 saturated). Time blocked in a system call or waiting for a CPU counts as idle; a
   window under 0.5 s keeps the previous figure.

Where each rule lives: ``request_metrics`` (rule 5), ``broker_collector`` (rules 2, 3,
6 and the ``broker_registry``), ``zk_session`` (the ZooKeeper session figures), ``endpoint``
(rule 4); rule 1 holds for all of them.
"""
