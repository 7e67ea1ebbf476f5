"""tidelog.storage: partition logs on disk (DESIGN.md "On disk"). Blocking IO, no asyncio.

Public API (see each module's docstring):
  * ``log``: ``LogConfig``, ``Log``, ``AppendInfo``, ``FetchSlice``
  * ``log_manager``: ``LogManager`` (all logs of a broker across its log dirs)
  * ``checkpoints``: ``OffsetCheckpointFile``, ``LeaderEpochCheckpointFile``,
    ``PartitionMetadataFile``
  * ``epoch_cache``: ``LeaderEpochFileCache`` (the persisted leader epoch cache)
  * ``errors``: ``StorageError`` and subclasses
  * ``producer_state``: ``ProducerStateManager`` (idempotent-producer state per partition,
    ``Log.producer_state``; snapshots ``<offset>.snapshot``)
  * ``producer_id``: ``ProducerIdManager`` (producer id blocks for InitProducerId)
"""
