"""The broker in a ZooKeeper cluster (``node.ClusterNode`` wires it): registration, the
controller's requests, follower fetchers, ISR changes and controlled shutdown sent to the
controller, log dir events, topic configs, whether clients may be answered yet, and the
metadata backend the request handlers ask (``backend.ZkBackend``)."""
