"""Stage 1 perfect-information oracles: the protocol, the exact solver oracle, the network."""
from .protocol import Oracle, OracleBatch, legal_slots
from .exact import ExactOracle
from .network import NetworkOracle, OracleModule, build_network
from .tokenizer import TOKEN_LAYOUT_VERSION, tokenize, tokenize_batch
from .weights import (DEFAULT_MODEL, OracleWeightsError, load_default_oracle, load_network,
                      load_oracle, save_weights)

__all__ = ["Oracle", "OracleBatch", "legal_slots", "ExactOracle", "NetworkOracle", "OracleModule",
           "build_network", "TOKEN_LAYOUT_VERSION", "tokenize", "tokenize_batch", "DEFAULT_MODEL",
           "OracleWeightsError", "load_default_oracle", "load_network", "load_oracle",
           "save_weights"]
