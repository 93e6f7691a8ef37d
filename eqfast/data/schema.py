"""Dataset schema 2.1 (docs/DATASET.md): the fields of a decision record, the
`DecisionRecords` container, the train/val/test split and the invariant checks.

One row per decision (one play of one simulated game). Per-slot fields index the actor's
CURRENT hand in the order of its hand tokens (sorted by tile id), padded to 7; see
docs/DATASET.md for the meaning of every field.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..engine.transcript import MAX_TOKENS, N_FEATURES, TOKENIZER_VERSION  # noqa: F401

SCHEMA_VERSION = "2.1"
SCHEMA_SEMANTICS = {
    "q_semantics": "minimax_value_to_go",
    "q_units": "points",
    "q_normalization": "raw",
    "tokenizer_version": TOKENIZER_VERSION,
}
Q_BOUND = 42.0

SPLIT_NAMES = ("train", "val", "test")
SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST = 0, 1, 2
#: share of games in train / val / test (the rest of the hash range goes to test)
SPLIT_FRACTIONS = {"train": 0.90, "val": 0.05, "test": 0.05}
_SPLIT_SALT = 0x5EED_5B1D_0000_0042


@dataclass(frozen=True)
class Field:
    dtype: torch.dtype
    shape: tuple          # per-record shape ("N" = worlds per decision)
    doc: str


FIELDS: dict[str, Field] = {
    "transcript_tokens": Field(torch.int8, (MAX_TOKENS, N_FEATURES),
                               "transcript tokens: decl, current hand, plays; zero padded"),
    "transcript_lengths": Field(torch.int64, (), "tokens before padding (1 + hand + plays)"),
    "e_q_mean": Field(torch.float32, (7,), "E[Q] per current-hand slot, points, actor frame; "
                                           "-inf beyond the hand size"),
    "e_q_var": Field(torch.float32, (7,), "Var[Q] per current-hand slot; 0 beyond the hand size"),
    "legal_mask": Field(torch.bool, (7,), "legal current-hand slots; False beyond the hand size"),
    "action_taken": Field(torch.int64, (), "current-hand slot played"),
    "game_idx": Field(torch.int64, (), "the game's seed (equal to `seed` in eqfast-generate output)"),
    "decision_idx": Field(torch.int64, (), "plays before this decision (0..27)"),
    "train_mask": Field(torch.bool, (), "game is in the train split"),
    "split": Field(torch.int8, (), "0 train, 1 val, 2 test (stable hash of the game seed)"),
    "u_mean": Field(torch.float32, (), "mean over legal slots of sqrt(e_q_var)"),
    "u_max": Field(torch.float32, (), "max over legal slots of sqrt(e_q_var)"),
    "ess": Field(torch.float32, (), "effective sample size 1/sum w^2 of the world weights"),
    "max_w": Field(torch.float32, (), "largest normalized world weight"),
    "exploration_mode": Field(torch.int8, (), "0 greedy, 1 boltzmann, 2 epsilon, 3 blunder, "
                                              "4 policy (a play policy's own choice)"),
    "q_gap": Field(torch.float32, (), "best legal E[Q] minus E[Q] of the move taken"),
    "n_worlds": Field(torch.int64, (), "worlds behind this decision (sampled or enumerated)"),
    "enumerated": Field(torch.bool, (), "all consistent worlds were enumerated"),
    "actor": Field(torch.int8, (), "absolute seat of the acting player"),
    "seed": Field(torch.int64, (), "deal seed of the game"),
}
#: debug fields, written only when requested (N = worlds per decision of the run)
DEBUG_FIELDS: dict[str, Field] = {
    "world_q": Field(torch.float32, ("N", 7), "per-world Q, current-hand order (0 beyond hand)"),
    "world_weight": Field(torch.float32, ("N",), "normalized per-world weight (0 = padding)"),
    "world_owner": Field(torch.int8, ("N", 28), "seat (absolute) holding each tile id at the "
                         "deal in each world"),
}
#: what happened in the game after the decision; written by eqfast-generate (both pipelines),
#: absent from files written before these fields existed and from re-run single decisions
OUTCOME_FIELDS: dict[str, Field] = {
    "realized_to_go": Field(torch.float32, (), "points the actor's team won minus the "
                            "opponents' from this decision to the end of the hand, as played "
                            "(the realized counterpart of E[Q] of the move taken)"),
    "final_points": Field(torch.int8, (2,), "points of team 0 and team 1 at the end of the "
                          "hand (they add up to 42)"),
}
#: written with eqfast-generate --q-pdf
PDF_FIELDS: dict[str, Field] = {
    "q_pdf": Field(torch.float32, (7, 85), "per current-hand slot, the weight of the worlds "
                   "whose Q rounds to each whole point -42..42 (bin b = b - 42 points), "
                   "weighted like e_q_mean; a legal slot sums to 1, 0 elsewhere"),
}
#: written with eqfast-generate --control-variate (docs/DATASET.md "Control variate")
CV_FIELDS: dict[str, Field] = {
    "cv_shift": Field(torch.float32, (7,), "the control variate's correction of e_q_mean: its "
                      "oracle's mean on cv_worlds worlds minus its mean on the n_worlds worlds "
                      "(e_q_mean - cv_shift = the main oracle's mean on those); 0 where not "
                      "applied and beyond the hand"),
    "cv_se": Field(torch.float32, (7,), "standard error of e_q_mean under the control "
                   "variate, points (docs/DATASET.md); 0 where not applied, at illegal slots "
                   "and beyond the hand"),
    "cv_worlds": Field(torch.int64, (), "worlds of the control variate's oracle (0 where not "
                       "applied: the n_worlds worlds were every consistent one)"),
}
#: the exploration policy's spread at the decision (000 §4.7); written by eqfast-generate (both
#: pipelines), absent from files written before it existed
POLICY_FIELDS: dict[str, Field] = {
    "policy_entropy": Field(torch.float32, (), "entropy (nats) of softmax(e_q_mean) over the "
                            "legal slots at temperature 1: 0 for one legal move, at most "
                            "log(legal moves)"),
}
#: the posterior's per-decision health (engine.posterior); written with --posterior by both
#: pipelines, absent with uniform weights and from relabelled datasets (stored weights)
POSTERIOR_FIELDS: dict[str, Field] = {
    "ess_before_remix": Field(torch.float32, (), "ESS 1/sum w^2 of the clipped weights before "
                              "ESS-triggered re-mixing (ess is after it); in [1, n_worlds]"),
    "window_nll": Field(torch.float32, (), "-sum_i w_i log-lik_i: the weighted negative "
                        "log-likelihood of the window's observed plays (nats, >= 0)"),
    "n_invalid_worlds": Field(torch.int64, (), "worlds that contradict the transcript (an "
                              "observed tile outside its actor's hand; weight 0)"),
    "n_illegal": Field(torch.int64, (), "(world, window step) pairs whose observed tile was "
                       "in hand but illegal, skipped (a reconstruction bug if ever > 0)"),
    "remix_lambda": Field(torch.float32, (), "uniform share mixed into the weights by "
                          "re-mixing (0 = not re-mixed, 1 = uniform over the consistent worlds)"),
    "fallback_uniform": Field(torch.bool, (), "every world contradicted the transcript: the "
                              "weights fell back to uniform"),
}
OPTIONAL_FIELDS: dict[str, Field] = {**DEBUG_FIELDS, **OUTCOME_FIELDS, **PDF_FIELDS,
                                     **CV_FIELDS, **POLICY_FIELDS, **POSTERIOR_FIELDS}
#: fields a shard written before they existed lacks: `DecisionRecords.cat` keeps them only
#: when every part has them (a resumed directory may mix older and newer shards) and warns
#: (DroppedFieldsWarning) naming those it drops
LATER_FIELDS = (*POLICY_FIELDS, *POSTERIOR_FIELDS)


class DroppedFieldsWarning(UserWarning):
    """Records concatenated from parts of which only some hold a field of LATER_FIELDS:
    the field is left out of the result (a reader would otherwise see it for some rows
    and not others)."""


def policy_entropy(e_q_mean: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """[R] entropy (nats) of softmax(e_q_mean) over the legal slots (temperature 1)."""
    legal = legal.bool()
    logits = torch.where(legal, e_q_mean.float(), torch.full_like(e_q_mean.float(), float("-inf")))
    logp = torch.log_softmax(logits, dim=-1)
    p = torch.exp(logp)
    # + 0.0: a single legal move gives -0.0
    return -torch.where(legal, p * logp, torch.zeros_like(p)).sum(-1) + 0.0


def split_of_seed(seeds) -> torch.Tensor:
    """Split [R] int8 of each game seed: a stable hash, so a game never changes split.

    h = SplitMix64 finalizer of (seed XOR salt), computed in numpy uint64 (wrapping, logical
    shifts); u = top 53 bits / 2^53; train if u < 0.90, val if u < 0.95, else test.
    """
    s = np.asarray(torch.as_tensor(seeds).cpu().numpy(), dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (s ^ np.uint64(_SPLIT_SALT)) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    train, val = SPLIT_FRACTIONS["train"], SPLIT_FRACTIONS["train"] + SPLIT_FRACTIONS["val"]
    split = np.where(u < train, SPLIT_TRAIN, np.where(u < val, SPLIT_VAL, SPLIT_TEST))
    return torch.as_tensor(split.astype(np.int8))


def label_variance(records: "DecisionRecords", ess_offset: float = 0.0) -> torch.Tensor:
    """[R, 7] float64: the sampling variance of each e_q_mean, points²: cv_se² where a
    control variate corrected it, else e_q_var / (ess - ess_offset) (the variance of a
    weighted mean of worlds; the divisor clamped at 1, ess_offset 1 for the small-sample
    form), and 0 where every consistent world was enumerated (the label is then exact given
    its oracle). Padding and illegal slots carry whatever e_q_var holds there (0 / the
    oracle's)."""
    se2 = records["e_q_var"].double() / (records["ess"].double() - ess_offset).clamp(min=1.0)[:, None]
    if "cv_se" in records:
        se2 = torch.where((records["cv_worlds"] > 0)[:, None], records["cv_se"].double() ** 2, se2)
    return torch.where(records["enumerated"][:, None], torch.zeros_like(se2), se2)


class DecisionRecords:
    """A batch of decision records: one tensor per schema field, all with R rows.

    Build with `eqfast.engine.records.records_from_step`, combine with `cat`, index fields
    with `records["e_q_mean"]`. Tensors are validated against `FIELDS` on construction.
    """

    def __init__(self, tensors: dict[str, torch.Tensor]):
        missing = [f for f in FIELDS if f not in tensors]
        if missing:
            raise ValueError(f"DecisionRecords: missing fields {missing}")
        unknown = [f for f in tensors if f not in FIELDS and f not in OPTIONAL_FIELDS]
        if unknown:
            raise ValueError(f"DecisionRecords: unknown fields {unknown}")
        n = tensors["game_idx"].shape[0]
        for name, t in tensors.items():
            spec = FIELDS.get(name) or OPTIONAL_FIELDS[name]
            if t.dtype != spec.dtype:
                raise ValueError(f"DecisionRecords: field {name} has dtype {t.dtype}, "
                                 f"schema says {spec.dtype}")
            fixed = tuple(d for d in spec.shape if d != "N")
            tail = tuple(t.shape[1:])
            ok = (t.dim() == 1 + len(spec.shape) and t.shape[0] == n
                  and tuple(d for d, s in zip(tail, spec.shape) if s != "N") == fixed)
            if not ok:
                raise ValueError(f"DecisionRecords: field {name} has shape {tuple(t.shape)}, "
                                 f"schema says [{n}, {', '.join(map(str, spec.shape))}]")
        self.tensors = dict(tensors)

    def __len__(self) -> int:
        return self.tensors["game_idx"].shape[0]

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    @property
    def has_debug(self) -> bool:
        """Per-world values present (world_q, world_weight); world_owner may be missing in
        files written before the worlds themselves were stored."""
        return "world_q" in self.tensors and "world_weight" in self.tensors

    @property
    def has_outcomes(self) -> bool:
        """The game's outcome is stored (realized_to_go, final_points)."""
        return all(k in self.tensors for k in OUTCOME_FIELDS)

    def select(self, index) -> "DecisionRecords":
        """Rows `index` (bool mask, index tensor or slice)."""
        return DecisionRecords({k: v[index] for k, v in self.tensors.items()})

    def to(self, device) -> "DecisionRecords":
        return DecisionRecords({k: v.to(device) for k, v in self.tensors.items()})

    def sort_by_game(self) -> "DecisionRecords":
        """Rows ordered by (game_idx, decision_idx): each game's decisions together, in order."""
        key = self["game_idx"] * 64 + self["decision_idx"]
        return self.select(torch.argsort(key, stable=True))

    @staticmethod
    def cat(parts) -> "DecisionRecords":
        parts = list(parts)
        if not parts:
            raise ValueError("DecisionRecords.cat: nothing to concatenate")
        if any(k in p.tensors for p in parts for k in CV_FIELDS):
            # runs with and without a control variate: a record without one reads as one
            # with cv_worlds 0 (not applied), as the schema and label_variance define it
            parts = [p if any(k in p.tensors for k in CV_FIELDS) else DecisionRecords(
                {**p.tensors, **{k: torch.zeros((len(p), *f.shape), dtype=f.dtype)
                                 for k, f in CV_FIELDS.items()}}) for p in parts]
        names = set(parts[0].tensors)
        later = {k for p in parts for k in p.tensors if k in LATER_FIELDS}
        common = {k for k in later if all(k in p.tensors for p in parts)}
        drop = later - common
        if drop:
            have = sum(1 for p in parts if drop & set(p.tensors))
            warnings.warn(f"{', '.join(sorted(drop))}: held by {have} of {len(parts)} parts "
                          "(shards written by an older eqfast lack them); left out of the "
                          "concatenated records", DroppedFieldsWarning, stacklevel=2)
            parts = [DecisionRecords({k: v for k, v in p.tensors.items() if k not in drop})
                     for p in parts]
            names = set(parts[0].tensors)
        for p in parts[1:]:
            if set(p.tensors) != names:
                raise ValueError("DecisionRecords.cat: parts have different fields "
                                 f"({sorted(names ^ set(p.tensors))})")
        return DecisionRecords({k: torch.cat([p.tensors[k].cpu() for p in parts])
                                for k in parts[0].tensors})

    @staticmethod
    def empty(n_worlds: int | None = None) -> "DecisionRecords":
        """Zero rows (with the debug fields when n_worlds is given)."""
        def make(spec):
            shape = [0] + [n_worlds if d == "N" else d for d in spec.shape]
            return torch.zeros(shape, dtype=spec.dtype)
        tensors = {k: make(s) for k, s in FIELDS.items()}
        if n_worlds is not None:
            tensors.update({k: make(s) for k, s in DEBUG_FIELDS.items()})
        return DecisionRecords(tensors)


def _rows(mask: torch.Tensor) -> str:
    idx = torch.nonzero(mask.reshape(mask.shape[0], -1).any(1))[:, 0]
    head = ", ".join(str(int(i)) for i in idx[:5])
    return f"{len(idx)} row(s) (first: {head})"


class InvariantError(RuntimeError):
    """Records that break the schema's invariants (raised before they are written)."""


def require_invariants(records: DecisionRecords, seeds,
                       relabelled: bool = False) -> DecisionRecords:
    """`records` if `check_invariants` finds nothing, else InvariantError naming the seeds
    and the first problems (the generator never writes records that break the schema)."""
    problems = check_invariants(records, relabelled=relabelled)
    if problems:
        raise InvariantError(f"records of seeds {seeds[0]}..{seeds[-1]} fail the invariants: "
                             f"{problems[:5]}")
    return records


def check_invariants(records: DecisionRecords, atol: float = 1e-4,
                     relabelled: bool = False) -> list[str]:
    """The record invariants (docs/DATASET.md, "Invariants") and the layout rules of schema 2.1; a list of problems (empty =
    clean), each naming the field and the offending rows. relabelled: the labels are not
    those the moves were chosen by (eqfast-relabel: metadata `relabel`), so a greedy move
    may have a q_gap above 0."""
    from ..rules.tables import torch_tables

    r = {k: v.cpu() for k, v in records.tensors.items()}
    problems: list[str] = []

    def fail(mask, what):
        if bool(mask.any()):
            problems.append(f"{what}: {_rows(mask)}")

    R = len(records)
    if R == 0:
        return problems
    tokens = r["transcript_tokens"].long()
    lengths = r["transcript_lengths"]
    ttype = tokens[..., 7]
    pos = torch.arange(MAX_TOKENS)[None, :]
    live = pos < lengths[:, None]
    n_hand = ((ttype == 1) & live).sum(1)
    n_play = ((ttype == 2) & live).sum(1)
    slot = torch.arange(7)[None, :]
    in_hand = slot < n_hand[:, None]
    legal, mean, var = r["legal_mask"], r["e_q_mean"], r["e_q_var"]

    # transcript layout
    fail((lengths < 2) | (lengths > MAX_TOKENS), "transcript_lengths out of [2, 36]")
    fail(lengths != 1 + n_hand + n_play, "transcript_lengths != 1 + hand tokens + play tokens")
    fail(n_play != r["decision_idx"], "decision_idx != number of play tokens")
    fail((r["decision_idx"] < 0) | (r["decision_idx"] > 27), "decision_idx out of [0, 27]")
    fail((tokens != 0).any(-1) & ~live, "transcript_tokens not zero beyond transcript_lengths")
    fail(ttype[:, 0] != 0, "transcript_tokens: position 0 is not the declaration token")
    fail((n_hand < 1) | (n_hand > 7), "hand size (hand tokens) out of [1, 7]")

    # per-slot targets
    fail(legal & ~in_hand, "legal_mask True beyond the hand size")
    fail(~legal.any(1), "legal_mask has no legal move")
    legal_mean = torch.where(legal, mean, torch.zeros_like(mean))
    fail(legal & ~torch.isfinite(mean), "e_q_mean NaN/Inf at a legal slot")
    fail(in_hand & ~torch.isfinite(mean), "e_q_mean NaN/Inf at an in-hand slot")
    fail(legal_mean.abs() > Q_BOUND + atol, f"|e_q_mean| > {Q_BOUND} at a legal slot")
    fail(~in_hand & (mean != float("-inf")), "e_q_mean padding is not -inf")
    fail(~in_hand & (var != 0), "e_q_var padding is not 0")
    fail(in_hand & ~(var >= 0), "e_q_var negative or NaN")
    fail(in_hand & (var > Q_BOUND ** 2 + atol), f"e_q_var > {Q_BOUND}^2")

    # legality from the rules: follow the led suit of the current trick when possible
    T = torch_tables("cpu")
    hi, lo = tokens[..., 0], tokens[..., 1]
    tile = hi * (hi + 1) // 2 + lo
    decl = tokens[:, 0, 6]
    hand_tile = torch.gather(tile, 1, (1 + slot).expand(R, 7))
    trick_len = r["decision_idx"] % 4
    lead_pos = 1 + n_hand + r["decision_idx"] - trick_len
    lead = torch.gather(tile, 1, lead_pos.clamp(max=MAX_TOKENS - 1)[:, None])[:, 0]
    led = T["LED_SUIT"][decl.clamp(0, 9), lead]
    follows = T["FOLLOWS"][decl.clamp(0, 9)[:, None], led[:, None], hand_tile] & in_hand
    follows &= (trick_len > 0)[:, None]
    rules_legal = torch.where(follows.any(1, keepdim=True), follows, in_hand)
    fail(legal != rules_legal, "legal_mask disagrees with the rules (follow suit)")

    # action and exploration
    act = r["action_taken"]
    fail((act < 0) | (act >= n_hand), "action_taken out of the current hand")
    fail(~legal.gather(1, act.clamp(0, 6)[:, None])[:, 0], "action_taken is not legal")
    mode = r["exploration_mode"]
    fail((mode < 0) | (mode > 4), "exploration_mode out of [0, 4]")
    best = torch.where(legal, mean, torch.full_like(mean, float("-inf"))).max(1).values
    taken = mean.gather(1, act.clamp(0, 6)[:, None])[:, 0]
    fail(~(r["q_gap"] >= -atol), "q_gap negative or NaN")
    fail((r["q_gap"] - (best - taken)).abs() > atol * (1 + best.abs()),
         "q_gap != best legal e_q_mean - e_q_mean of action_taken")
    if not relabelled:
        fail((mode == 0) & (r["q_gap"].abs() > atol), "greedy decision with q_gap != 0")

    # uncertainty and posterior health
    sd = torch.sqrt(var.clamp(min=0))
    u_max_rules = torch.where(legal, sd, torch.zeros_like(sd)).max(1).values
    fail(~torch.isfinite(r["u_mean"]) | ~torch.isfinite(r["u_max"]), "u_mean/u_max NaN/Inf")
    fail(r["u_mean"] > r["u_max"] + atol, "u_mean > u_max")
    fail(r["u_mean"] < -atol, "u_mean negative")
    fail((r["u_max"] - u_max_rules).abs() > atol * (1 + u_max_rules),
         "u_max != max over legal slots of sqrt(e_q_var)")
    n = r["n_worlds"].float()
    ess, max_w = r["ess"], r["max_w"]
    fail(r["n_worlds"] < 1, "n_worlds < 1")
    fail(~((ess >= 1 - atol) & (ess <= n * (1 + atol))), "ess outside [1, n_worlds] or NaN")
    fail(~((max_w <= 1 + atol) & (max_w >= 1 / n - atol)), "max_w outside [1/n_worlds, 1] or NaN")

    # the per-move distribution (when stored): a distribution whose mean is E[Q] up to the
    # rounding of Q to whole points
    if "q_pdf" in r:
        pdf = r["q_pdf"].double()
        fail((pdf < -atol).any(-1).any(-1) | ~torch.isfinite(pdf).all(-1).all(-1),
             "q_pdf negative or NaN")
        fail(legal & ((pdf.sum(-1) - 1).abs() > 1e-3), "q_pdf of a legal slot does not sum to 1")
        fail(~legal & (pdf.abs().sum(-1) > 0), "q_pdf not 0 at an illegal or padding slot")
        centre = (pdf * torch.arange(-42, 43, dtype=torch.float64)).sum(-1)
        fail(legal & ((centre - mean.double()).abs() > 0.5 + 1e-3),
             "q_pdf's mean is more than half a point from e_q_mean")

    # the control variate (when applied): a finite correction on the legal slots only, from
    # at least as many worlds as the main oracle's, none where those were enumerated
    if "cv_shift" in r:
        shift, cv_n = r["cv_shift"], r["cv_worlds"]
        fail(~torch.isfinite(shift).all(1), "cv_shift NaN/Inf")
        fail((~legal & (shift != 0)).any(1), "cv_shift not 0 at an illegal or padding slot")
        fail((cv_n != 0) & (cv_n < r["n_worlds"]), "cv_worlds below n_worlds")
        fail(r["enumerated"] & (cv_n != 0), "cv_worlds not 0 where the worlds were enumerated")
        fail((cv_n == 0) & (shift != 0).any(1), "cv_shift not 0 where cv_worlds is 0")
        se = r["cv_se"]
        fail(~(se >= 0).all(1) | ~torch.isfinite(se).all(1), "cv_se negative or NaN/Inf")
        fail(((~legal | (cv_n == 0)[:, None]) & (se != 0)).any(1),
             "cv_se not 0 at an illegal slot or where cv_worlds is 0")

    # the policy's entropy (when stored): a distribution's over the legal slots (not
    # recomputed from e_q_mean: a label edited afterwards, e.g. one eqfast-validate
    # --recompute is to flag, must still read)
    if "policy_entropy" in r:
        h = r["policy_entropy"]
        top = torch.log(legal.sum(1).clamp(min=1).float())
        fail(~torch.isfinite(h) | (h < -atol) | (h > top + atol),
             "policy_entropy NaN/Inf or outside [0, log(legal moves)]")

    # the posterior's diagnostics (when stored): re-mixing only lifts the ESS, by a share
    # in [0, 1] that is 0 exactly where it did not lift it
    if "ess_before_remix" in r:
        before, lam = r["ess_before_remix"], r["remix_lambda"]
        fail(~((before >= 1 - atol) & (before <= n * (1 + atol))),
             "ess_before_remix outside [1, n_worlds] or NaN")
        fail(before > ess * (1 + atol) + atol, "ess_before_remix above ess (re-mixing lowered it)")
        fail(~((lam >= 0) & (lam <= 1)), "remix_lambda outside [0, 1] or NaN")
        fail((lam == 0) & ((ess - before).abs() > atol * (1 + ess)),
             "ess != ess_before_remix where remix_lambda is 0")
        fail(~torch.isfinite(r["window_nll"]) | (r["window_nll"] < -atol),
             "window_nll negative or NaN/Inf")
        bad = r["n_invalid_worlds"]
        fail((bad < 0) | (bad > r["n_worlds"]), "n_invalid_worlds outside [0, n_worlds]")
        fail(r["n_illegal"] < 0, "n_illegal negative")

    # the game's outcome (when stored): a hand's 42 points, a value to go the hand allows
    if "final_points" in r:
        final = r["final_points"].long()
        fail((final < 0).any(1) | (final.sum(1) != 42), "final_points not two counts adding to 42")
        to_go = r["realized_to_go"]
        fail(~torch.isfinite(to_go) | (to_go.abs() > 42) | (to_go != to_go.round()),
             "realized_to_go not a whole number of points in [-42, 42]")
        last = r["decision_idx"] == 27
        fail(last & (to_go.abs() < 1), "realized_to_go of the last play is not the last trick's")

    # split and identity
    split = r["split"]
    fail((split < 0) | (split > 2), "split out of [0, 2]")
    fail(r["train_mask"] != (split == SPLIT_TRAIN), "train_mask != (split == train)")
    fail(split != split_of_seed(r["seed"]), "split != split_of_seed(seed)")
    fail((r["actor"] < 0) | (r["actor"] > 3), "actor out of [0, 3]")
    # one game = one seed = one split
    g = r["game_idx"]
    order = torch.argsort(g, stable=True)
    gs, ss = g[order], r["seed"][order]
    same_game = gs[1:] == gs[:-1]
    fail(torch.cat([torch.zeros(1, dtype=torch.bool), same_game & (ss[1:] != ss[:-1])]),
         "rows of one game_idx with different seeds (rows in game order)")

    if records.has_debug:
        w = r["world_weight"]
        fail(~((w >= 0).all(1)), "world_weight negative or NaN")
        fail((w.sum(1) - 1).abs() > 1e-3, "world_weight does not sum to 1")
        fail((w > 0).sum(1) > r["n_worlds"], "more nonzero world weights than n_worlds")
    if "world_owner" in r:
        owner = r["world_owner"].long()
        fail(((owner < 0) | (owner > 3)).flatten(1).any(1), "world_owner outside seats 0..3")
        per_seat = torch.stack([(owner == s).sum(-1) for s in range(4)], -1)
        fail((per_seat != 7).flatten(1).any(1), "a world whose deal does not give 7 tiles a seat")
    return problems
