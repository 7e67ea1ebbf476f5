"""The broker in a ZooKeeper cluster: registration, the controller's requests, follower
fetchers, ISR changes sent to the controller, and whether clients may be answered yet."""
