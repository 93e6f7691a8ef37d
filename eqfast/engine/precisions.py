"""The arithmetic choices of a network oracle's forward (EngineConfig.oracle_precision), in a
module of their own so that a command's --help lists them without importing torch."""

ORACLE_PRECISIONS = ("fp32", "tf32", "bf16", "int8")
