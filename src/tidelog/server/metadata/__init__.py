"""The broker's metadata image: what topics exist, their ids, partitions and config overrides."""
