"""Stage 1 perfect-information oracles: the protocol, the exact solver oracle, the network."""
from .protocol import Oracle, OracleBatch, legal_slots
