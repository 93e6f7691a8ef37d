"""The Stage 2 defaults a command's --help shows, in a module without torch (importing torch
takes 1.5-12 s): the model's default architecture, the loss weight of a forced decision,
the trainer's forwards per step and the parser of its --label-tricks. model.py, data.py and
train.py use them from here."""

from ..rules.tables import N_TRICKS   # numpy only, no torch

#: the default architecture (model.check_config gives every key's range)
DEFAULT_CONFIG = {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 128, "var_head": 1,
                  "seen_tiles": 0, "policy_head": 0}
#: default loss weight of a decision with one legal move (docs/STAGE2.md)
FORCED_WEIGHT = 0.1
#: default forwards per training step, each on the batch's rows of similar length trimmed
#: to their longest (model.forward_by_length): 66 ms a step instead of 119 for the default
#: model (256 records, one thread of the 2-core VM; 2 groups 74 ms, 6 and 8 groups 64-65)
LENGTH_GROUPS = 4
#: the trainer's forward arithmetic: fp32, or bf16 under autocast (loss and optimizer in fp32)
PRECISIONS = ("fp32", "bf16")


def parse_tricks(text: str) -> tuple[int, ...]:
    """'5,6' or '4-7' (or a mix: '1,5-7') -> the sorted tricks, numbered 1..7; ValueError
    naming the problem."""
    tricks: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"tricks {text!r}: {part!r} is not a trick number (1..7) or a "
                             "range like 5-7") from None
        if not 1 <= a <= b <= N_TRICKS:
            raise ValueError(f"tricks {text!r}: {part!r} is outside 1..{N_TRICKS} or an "
                             "empty range")
        tricks.update(range(a, b + 1))
    return tuple(sorted(tricks))
