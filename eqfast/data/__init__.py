"""The dataset: schema 2.1 records, shards on disk (safetensors + JSON sidecar), invariants."""
from .schema import (DEBUG_FIELDS, FIELDS, OPTIONAL_FIELDS, OUTCOME_FIELDS, SCHEMA_SEMANTICS,
                     SCHEMA_VERSION, SPLIT_FRACTIONS, SPLIT_NAMES, DecisionRecords,
                     check_invariants, split_of_seed)
from .shards import (OutputError, ShardError, completed_seed_ranges, incomplete_seed_ranges,
                     lock_output, output_problem, read_dataset, read_shard, shard_path,
                     split_shards, write_shard, write_split_shards)

__all__ = ["DEBUG_FIELDS", "FIELDS", "OPTIONAL_FIELDS", "OUTCOME_FIELDS", "SCHEMA_SEMANTICS",
           "SCHEMA_VERSION", "SPLIT_FRACTIONS", "SPLIT_NAMES", "DecisionRecords", "check_invariants", "split_of_seed", "OutputError",
           "ShardError", "read_shard", "read_dataset", "split_shards", "completed_seed_ranges",
           "incomplete_seed_ranges", "lock_output", "output_problem", "shard_path",
           "write_shard", "write_split_shards"]
