"""The oracle contract: Q of the actor's 7 initial-hand slots in many full-information worlds.

An `OracleBatch` holds N perfect-information positions (one per world, or per training
row). Every field is a torch tensor on one device:

    hands     [N, 4, 7] int64  initial hands, each seat sorted by tile id ("slot" order)
    remaining [N, 4]    int64  7-bit masks: bit i set = slot i of that seat still in hand
    decl      [N]       int64  declaration 0..9
    leader    [N]       int64  seat that led the current trick
    trick     [N, 3]    int64  tile ids already played to the current trick, in play
                               order from `leader`, -1 padded (the actor plays next)
    actor     [N]       int64  acting seat, == (leader + #trick tiles) % 4

An oracle returns (q [N, 7] float32, legal [N, 7] bool): q in points, actor frame (team-0
value-to-go times +1 for seats 0/2, -1 for seats 1/3; docs/RULES.md), for the actor's slots;
legal marks the slots the actor may play. q at illegal slots is unspecified (finite).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import torch


@dataclass(frozen=True)
class OracleBatch:
    hands: torch.Tensor
    remaining: torch.Tensor
    decl: torch.Tensor
    leader: torch.Tensor
    trick: torch.Tensor
    actor: torch.Tensor

    def __len__(self) -> int:
        return self.hands.shape[0]

    def to(self, device) -> "OracleBatch":
        return OracleBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, index) -> "OracleBatch":
        """Rows `index` (a slice, a bool mask or an index tensor)."""
        return OracleBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def cat(batches) -> "OracleBatch":
        return OracleBatch(**{f.name: torch.cat([getattr(b, f.name) for b in batches])
                              for f in fields(OracleBatch)})


class Oracle(Protocol):
    """Anything that maps an OracleBatch to (q [N,7] actor frame, legal [N,7])."""

    def query(self, batch: OracleBatch) -> tuple[torch.Tensor, torch.Tensor]: ...


def legal_slots(batch: OracleBatch) -> torch.Tensor:
    """Legal slots [N, 7] of the actor (follow suit if possible), from the rules tables."""
    from ..rules.tables import torch_tables

    T = torch_tables(batch.hands.device)
    rows = torch.arange(len(batch), device=batch.hands.device)
    tiles = batch.hands[rows, batch.actor]
    in_hand = ((batch.remaining[rows, batch.actor, None]
                >> torch.arange(7, device=tiles.device)) & 1).bool()
    lead = batch.trick[:, 0]
    led = T["LED_SUIT"][batch.decl, lead.clamp(min=0)]
    follows = T["FOLLOWS"][batch.decl[:, None], led[:, None], tiles.clamp(min=0)]
    follows = follows & in_hand & (lead >= 0)[:, None]
    return torch.where(follows.any(1, keepdim=True), follows, in_hand)
