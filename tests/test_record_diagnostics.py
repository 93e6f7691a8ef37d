"""The per-decision diagnostics a record keeps (docs/DATASET.md, "Policy entropy and
posterior health"): the policy entropy over the legal E[Q], and with --posterior the
posterior's ESS before re-mixing, window NLL, invalid and illegal counts, re-mix share and
fallback flag. Each is checked against an independent computation from other stored fields,
present exactly when it should be, kept truthful by `check_invariants`, summarized in the
metadata and shown by eqfast-view."""
from __future__ import annotations

import math

import pytest
import torch
from fakes import HashOracle

from eqfast.cli.view import render_record
from eqfast.data.metadata import summary_stats
from eqfast.data.schema import POSTERIOR_FIELDS, DecisionRecords, check_invariants
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig

SEEDS = [3, 4]
N = 16
# a re-mix threshold high enough that many decisions re-mix (lambda in (0, 1))
POSTERIOR = PosteriorConfig(window_k=4, ess_remix_threshold=0.9)


@pytest.fixture(scope="module")
def uniform():
    return Engine(HashOracle(), EngineConfig(n_samples=N, seed=1)).play(SEEDS)


@pytest.fixture(scope="module")
def posterior():
    cfg = EngineConfig(n_samples=N, seed=1, posterior=POSTERIOR, store_worlds=True)
    return Engine(HashOracle(), cfg).play(SEEDS)


def _entropy(mean, legal):
    """Entropy (nats) of softmax over the legal values, in plain float64 Python."""
    q = [float(m) for m, ok in zip(mean, legal) if ok]
    top = max(q)
    z = sum(math.exp(v - top) for v in q)
    p = [math.exp(v - top) / z for v in q]
    return -sum(x * math.log(x) for x in p if x > 0)


@pytest.mark.parametrize("which", ["uniform", "posterior"])
def test_policy_entropy_is_that_of_the_legal_e_q(which, request):
    rec = request.getfixturevalue(which)
    h = rec["policy_entropy"]
    want = torch.tensor([_entropy(rec["e_q_mean"][i], rec["legal_mask"][i])
                         for i in range(len(rec))], dtype=torch.float64)
    torch.testing.assert_close(h.double(), want, atol=1e-5, rtol=1e-5)
    forced = rec["legal_mask"].sum(1) == 1
    assert bool(forced.any()) and bool((h[forced] == 0).all())
    assert bool((h[~forced] > 0).all())
    assert check_invariants(rec) == []


def test_posterior_fields_only_with_the_posterior(uniform, posterior):
    assert not any(k in uniform for k in POSTERIOR_FIELDS)
    assert all(k in posterior for k in POSTERIOR_FIELDS)
    for name in POSTERIOR_FIELDS:
        t = posterior[name]
        assert not t.is_floating_point() or bool(torch.isfinite(t).all()), name
    assert "posterior_health" not in summary_stats(uniform)
    health = summary_stats(posterior)["posterior_health"]
    assert health["remix_fraction"] == float((posterior["remix_lambda"] > 0).float().mean())


def test_ess_before_remix_from_the_stored_weights(posterior):
    """The stored weights are after re-mixing: w' = (1 - lam) w + lam / n_c on the n_c
    consistent worlds (w' > 0). Undoing it gives w, whose 1 / sum w^2 must be the stored
    ess_before_remix; the invalid worlds are the zero-weight ones."""
    w_mixed = posterior["world_weight"].double()
    lam = posterior["remix_lambda"].double()
    cons = w_mixed > 0
    n_c = cons.sum(1, keepdim=True).double()
    remixed = (lam > 0) & (lam < 1)
    assert 0 < int(remixed.sum()) < len(lam)           # both kinds of decision are covered
    w = torch.where(cons, (w_mixed - lam[:, None] / n_c) / (1 - lam[:, None]),
                    torch.zeros_like(w_mixed))
    ess = 1.0 / (w * w).sum(1)
    ess = torch.minimum(ess, posterior["n_worlds"].double()).clamp(min=1.0)
    rows = lam < 1
    torch.testing.assert_close(posterior["ess_before_remix"].double()[rows], ess[rows],
                               rtol=1e-3, atol=1e-3)
    # re-mixing reaches the threshold exactly: ess = 0.9 N where it re-mixed
    sampled = remixed & ~posterior["enumerated"]
    torch.testing.assert_close(posterior["ess"][sampled].double(),
                               torch.full((int(sampled.sum()),), 0.9 * N, dtype=torch.float64),
                               rtol=1e-3, atol=1e-3)
    not_mixed = lam == 0
    torch.testing.assert_close(posterior["ess_before_remix"][not_mixed],
                               posterior["ess"][not_mixed], rtol=1e-4, atol=1e-4)
    valid_zero = (~cons).sum(1)[~posterior["enumerated"]]
    assert torch.equal(posterior["n_invalid_worlds"][~posterior["enumerated"]], valid_zero)
    assert int(posterior["n_illegal"].sum()) == 0
    assert not bool(posterior["fallback_uniform"].any())


def test_window_nll_is_zero_before_any_play_and_positive_after(posterior):
    first = posterior["decision_idx"] == 0
    assert bool((posterior["window_nll"][first] == 0).all())
    later = posterior["decision_idx"] >= 4
    assert bool((posterior["window_nll"][later] > 0).all())


def test_invariants_catch_untruthful_diagnostics(posterior):
    assert check_invariants(posterior) == []

    def broken(name, change):
        t = dict(posterior.tensors)
        t[name] = change(t[name].clone())
        return " | ".join(check_invariants(DecisionRecords(t)))

    assert "policy_entropy" in broken("policy_entropy", lambda h: h + 2.0)   # > log 7
    assert "policy_entropy" in broken("policy_entropy", lambda h: h * float("nan"))
    assert "ess_before_remix above ess" in broken("ess_before_remix", lambda e: e + 2.0)
    assert "remix_lambda outside" in broken("remix_lambda", lambda x: x + 1.5)
    assert "window_nll" in broken("window_nll", lambda x: x - 1.0)
    assert "n_invalid_worlds" in broken("n_invalid_worlds", lambda x: x + 100)
    assert "n_illegal" in broken("n_illegal", lambda x: x - 1)


def test_records_without_the_later_fields_concatenate_without_them(uniform):
    """A resumed directory may hold shards written before these fields existed: they go,
    with a warning naming them; parts that all hold them concatenate without one."""
    import warnings

    from eqfast.data.schema import DroppedFieldsWarning

    old = DecisionRecords({k: v for k, v in uniform.tensors.items() if k != "policy_entropy"})
    with pytest.warns(DroppedFieldsWarning, match="policy_entropy: held by 1 of 2 parts"):
        both = DecisionRecords.cat([old, uniform])
    assert "policy_entropy" not in both and len(both) == 2 * len(uniform)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "policy_entropy" in DecisionRecords.cat([uniform, uniform])
    with pytest.raises(ValueError, match="different fields"):
        DecisionRecords.cat([DecisionRecords({k: v for k, v in uniform.tensors.items()
                                              if k != "final_points"}), uniform])


def test_records_without_a_control_variate_join_records_with_one(uniform):
    """Runs with and without --control-variate concatenate (eqfast-train-stage2 --data A
    --data B): the rows without one get cv_worlds 0 and zero shift and standard error, the
    schema's "not applied", so their label variance is e_q_var / ess as before, the
    invariants hold, and the other rows keep theirs."""
    from eqfast.data.schema import CV_FIELDS, label_variance

    n = len(uniform)
    # a control variate on 400 worlds wherever the worlds were sampled (not enumerated)
    applied = ~uniform["enumerated"]
    assert applied.any()
    with_cv = DecisionRecords({**uniform.tensors,
                               "cv_shift": torch.zeros(n, 7),
                               "cv_se": torch.where(uniform["legal_mask"] & applied[:, None],
                                                    0.25, 0.0).float(),
                               "cv_worlds": torch.where(applied, 400, 0)})
    both = DecisionRecords.cat([uniform, with_cv])
    assert set(CV_FIELDS) <= set(both.tensors) and len(both) == 2 * n
    assert torch.all(both["cv_worlds"][:n] == 0)
    assert torch.equal(both["cv_worlds"][n:], with_cv["cv_worlds"])
    assert torch.all(both["cv_se"][:n] == 0) and torch.all(both["cv_shift"][:n] == 0)
    assert torch.equal(label_variance(both)[:n], label_variance(uniform))
    assert torch.equal(label_variance(both)[n:], label_variance(with_cv))
    assert not torch.equal(label_variance(uniform), label_variance(with_cv))
    assert check_invariants(both) == []


def test_viewer_shows_the_diagnostics(uniform, posterior):
    i = int(torch.nonzero(posterior["remix_lambda"] > 0)[0])
    text = "\n".join(render_record(posterior, i))
    assert f"entropy {float(posterior['policy_entropy'][i]):.3f} nats" in text
    assert f"ess before re-mixing {float(posterior['ess_before_remix'][i]):.1f}" in text
    assert f"re-mixed lambda {float(posterior['remix_lambda'][i]):.3f}" in text
    assert "window nll" in text and "invalid worlds" in text and "no fallback" in text
    plain = "\n".join(render_record(uniform, 5))
    assert "entropy" in plain and "posterior:" not in plain
