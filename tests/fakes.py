"""Test doubles shared by the engine tests."""
from __future__ import annotations

import torch

from eqfast.oracle.protocol import legal_slots


class HashOracle:
    """A cheap deterministic fake oracle: Q is a smooth hash of the full position (hands,
    remaining slots, actor), so different worlds give different Q and equal rows equal Q.
    Counts the rows it evaluates."""

    def __init__(self):
        self.rows = 0

    def query(self, b):
        self.rows += len(b)
        dev = b.hands.device
        x = (b.hands.clamp(min=0).double() * torch.arange(1, 8, device=dev)).sum((1, 2))
        x = x + 0.37 * b.remaining.double().sum(1) + 0.11 * b.actor.double()
        q = 20 * torch.sin(x[:, None] * 0.731 + torch.arange(7, device=dev))
        return q.float(), legal_slots(b)
