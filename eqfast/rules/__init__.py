"""Texas 42 rules: lookup tables, deterministic deals, single and batched game state."""
from .deal import deal_from_seed, mix_seed
from .state import GameState, legal_tiles, trick_points, trick_winner
from .tables import (CALLED, DECL_NAMES, FOLLOW_MASK, FOLLOWS, HIGH, IN_CALLED, IS_DOUBLE,
                     LED_SUIT, LOW, N_DECLS, N_SEATS, N_TILES, POINTS, RANK, mask_of,
                     tile_id, tile_name, tiles_of, torch_tables)


def __getattr__(name):
    # BatchedGames needs torch: imported on first use, so that the tables and the
    # single-game rules (and a command's --help) do not load torch
    if name == "BatchedGames":
        from .batched import BatchedGames
        return BatchedGames
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["deal_from_seed", "mix_seed", "GameState", "legal_tiles", "trick_points",
           "trick_winner", "CALLED", "DECL_NAMES", "FOLLOW_MASK", "FOLLOWS", "HIGH",
           "IN_CALLED", "IS_DOUBLE", "LED_SUIT", "LOW", "N_DECLS", "N_SEATS", "N_TILES",
           "POINTS", "RANK", "mask_of", "tile_id", "tile_name", "tiles_of", "torch_tables",
           "BatchedGames"]
