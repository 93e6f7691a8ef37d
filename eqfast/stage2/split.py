"""Two Stage 2 models in one file: one for the early tricks, another from a given trick on.

A decision's trick is public (the number of plays so far), so a player may read one model
before trick T and another from T on and still make one forward pass a decision. The
models may differ in architecture: the shipped player is the transcript transformer for
the first tricks, where it plays best, and the belief model (belief.py) from the trick
where that plays better (docs/STAGE2.md, "The belief model"). `SplitModel` has the
transformer's call, `forward(tokens, lengths) -> (mu, log_var)`, so every Stage 2 tool
takes it; its config is {"arch": "split", "first_trick": T, "early": CONFIG, "late":
CONFIG}, its tensors those of the two models under "early." and "late.". `join_split`
writes one from two weights files; the arena's `split:T:LATE[:EARLY]` player plays the
same moves from the two files without joining them.
"""
from __future__ import annotations


import torch
from torch import nn

from ..rules.tables import N_SEATS, N_TRICKS


class SplitModel(nn.Module):
    """`early` answers the rows with fewer than 4 (first_trick - 1) plays, `late` the rest;
    each model sees only its own rows."""

    def __init__(self, early: nn.Module, late: nn.Module, first_trick: int):
        super().__init__()
        self.early = early
        self.late = late
        self.first_trick = int(first_trick)
        self.first_decision = N_SEATS * (int(first_trick) - 1)
        self.var_head = int(bool(early.var_head) and bool(late.var_head))

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor):
        live = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths[:, None]
        plays = ((tokens[..., 7] == 2) & live).sum(1)
        is_late = plays >= self.first_decision
        mu = torch.zeros(tokens.shape[0], 7, device=tokens.device)
        log_var = torch.zeros(tokens.shape[0], 7, device=tokens.device)
        # two blocks, not a loop over (model, rows): TorchScript cannot iterate over
        # modules of different types
        late_rows = torch.nonzero(is_late)[:, 0]
        early_rows = torch.nonzero(~is_late)[:, 0]
        if early_rows.numel() > 0:
            m, v = self.early(tokens[early_rows], lengths[early_rows])
            mu = mu.index_put((early_rows,), m.to(mu.dtype))
            log_var = log_var.index_put((early_rows,), v.to(log_var.dtype))
        if late_rows.numel() > 0:
            m, v = self.late(tokens[late_rows], lengths[late_rows])
            mu = mu.index_put((late_rows,), m.to(mu.dtype))
            log_var = log_var.index_put((late_rows,), v.to(log_var.dtype))
        return mu, log_var


def check_split_config(config: dict, check) -> dict:
    """The split config with both parts checked by `check` (model.check_config);
    ValueError naming the problem. A part may itself be split (three models or more,
    each for its own tricks)."""
    unknown = sorted(set(config) - {"arch", "first_trick", "early", "late"})
    if unknown:
        raise ValueError(f"split config keys: unknown {unknown}")
    t = config.get("first_trick")
    if isinstance(t, bool) or not isinstance(t, int) or not 2 <= t <= N_TRICKS:
        raise ValueError(f"config 'first_trick' must be an integer in [2, {N_TRICKS}], "
                         f"got {t!r}")
    out = {"arch": "split", "first_trick": t}
    for part in ("early", "late"):
        sub = config.get(part)
        if not isinstance(sub, dict):
            raise ValueError(f"config {part!r} must be a model config, got {sub!r}")
        out[part] = check(sub)
    return out


def join_split(early, late, first_trick: int, out) -> dict:
    """Write the split model of `early` and `late` (weights files, or parts of split files:
    `load_part`) to `out` atomically; return its training record (each part's path,
    SHA-256 and own steps).
    Stage2WeightsError for an unreadable file, ValueError for a bad trick."""
    parts = {"early": load_part(early), "late": load_part(late)}
    record = {"split": {"first_trick": first_trick,
                        **{name: card for name, (_, _, card) in parts.items()}}}
    join_models(*parts["early"][:2], *parts["late"][:2], first_trick, out, record)
    return record


PARTS = ("early", "late")


def parse_part(spec: str) -> tuple[str, str | None]:
    """'FILE' -> (FILE, None); 'FILE:early' or 'FILE:late' -> (FILE, that part)."""
    head, sep, tail = str(spec).rpartition(":")
    if sep and tail in PARTS and head:
        return head, tail
    return str(spec), None


def load_part(spec) -> tuple[nn.Module, dict, dict]:
    """(model, config, source card) of what `spec` names: a whole Stage 2 weights file
    (a bare name is a file in eqfast/models), or one part of a split file ('FILE:early',
    'FILE:late'). Stage2WeightsError for an unreadable file, ValueError for a part of a
    file that is not split."""
    from ..paths import stage2_weights
    from .average import source_card
    from .weights import load_stage2_with_meta

    name, part = parse_part(spec)
    path = stage2_weights(name)
    model, meta = load_stage2_with_meta(path)
    card = source_card(path, meta)
    if part is None:
        return model, meta["config"], card
    if meta["config"].get("arch") != "split":
        raise ValueError(f"{spec}: {path} is not a split file, so it has no {part!r} part")
    return getattr(model, part), meta["config"][part], {**card, "part": part}


def join_models(early: nn.Module, early_config: dict, late: nn.Module, late_config: dict,
                first_trick: int, out, record: dict) -> None:
    """Write the split model of two loaded models to `out` atomically (`record`: its
    training record)."""
    from .model import check_config
    from .weights import save_stage2

    config = check_config({"arch": "split", "first_trick": first_trick,
                           "early": early_config, "late": late_config})
    save_stage2(out, SplitModel(early, late, first_trick), config, "", {}, record)
