"""The broker's metadata: the topic image and the backend the handlers ask where a lone
broker (its own controller, ``MetadataStore`` on disk) and a ZooKeeper cluster broker
differ."""
