"""The confidence ladder's settings (eqfast/analysis/ladder.py), in a module without torch
so that eqfast-oracle-ladder --help shows their defaults at once (importing torch takes
1.5-12 s)."""
from __future__ import annotations

from dataclasses import dataclass, field


def _default_arch() -> dict:
    from ..oracle.network import DEFAULT_CONFIGS
    return dict(DEFAULT_CONFIGS["mlp"])


@dataclass
class LadderConfig:
    arch: dict = field(default_factory=_default_arch)
    train_steps: int = 2000
    batch: int = 256
    lr: float = 2e-3
    one_deal_games: int = 300
    deals: int = 100
    games_per_deal: int = 10
    test_deals: int = 10
    spot_deals: int = 100
    spot_show: int = 20
    pimc_games: int = 16
    pimc_worlds: int = 50
    seed: int = 0
