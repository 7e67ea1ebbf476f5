"""The broker's metadata: the topic image, the backend interface the handlers ask where a
lone broker and a ZooKeeper cluster broker differ, and the lone broker's backend (its own
controller, ``MetadataStore`` on disk; the cluster broker's is ``cluster.backend``)."""
