"""The dataset: schema 2.1 records, shards on disk (safetensors + JSON sidecar), invariants."""
from .schema import (DEBUG_FIELDS, FIELDS, SCHEMA_SEMANTICS, SCHEMA_VERSION, SPLIT_FRACTIONS,
                     SPLIT_NAMES, DecisionRecords, check_invariants, split_of_seed)
from .shards import (ShardError, completed_seed_ranges, read_dataset, read_shard, shard_path,
                     write_shard, write_split_shards)

__all__ = ["DEBUG_FIELDS", "FIELDS", "SCHEMA_SEMANTICS", "SCHEMA_VERSION", "SPLIT_FRACTIONS",
           "SPLIT_NAMES", "DecisionRecords", "check_invariants", "split_of_seed", "ShardError",
           "read_shard", "read_dataset", "completed_seed_ranges", "shard_path", "write_shard", "write_split_shards"]
