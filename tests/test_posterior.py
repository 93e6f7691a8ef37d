"""Posterior weights (eqfast/engine/posterior.py): hand-computed cases, beta = 1, delta clipping, ESS,
-inf and padding worlds, integrity errors, re-mixing, and a loop reference on random input."""
import math

import pytest
import torch

from eqfast.engine.posterior import (PosteriorConfig, behaviour_log_likelihood,
                                     posterior_log_weights, stabilize_log_weights)

NO_REMIX = dict(ess_remix_threshold=0.0)


def _inputs(G, N, K, seed, p_legal=0.6):
    gen = torch.Generator().manual_seed(seed)
    q = torch.rand(G, N, K, 7, generator=gen) * 84 - 42
    legal = torch.rand(G, N, K, 7, generator=gen) < p_legal
    legal[..., 3] = True
    # observe a legal slot in each (game, world, step)
    scores = torch.rand(G, N, K, 7, generator=gen) * legal
    observed = scores.argmax(-1)
    step_valid = torch.ones(G, K, dtype=torch.bool)
    return q, legal, observed, step_valid


def test_two_worlds_one_step_by_hand():
    # world 0: the observed slot 0 is the better move (Q 2 vs 0); world 1: the worse one
    q = torch.zeros(1, 2, 1, 7)
    q[0, 0, 0, :2] = torch.tensor([2.0, 0.0])
    q[0, 1, 0, :2] = torch.tensor([0.0, 2.0])
    legal = torch.zeros(1, 2, 1, 7, dtype=torch.bool)
    legal[..., :2] = True
    observed = torch.zeros(1, 2, 1, dtype=torch.long)
    cfg = PosteriorConfig(tau=1.0, beta=0.1, **NO_REMIX)
    logw, diag = posterior_log_weights(q, legal, observed, torch.ones(1, 1, dtype=torch.bool), cfg)
    # advantages +-1, p_soft(obs) = sigmoid(+-2), pi = 0.9 p_soft + 0.1 / 2
    pi0 = 0.9 / (1 + math.exp(-2)) + 0.05
    pi1 = 0.9 / (1 + math.exp(2)) + 0.05
    w = torch.tensor([pi0, pi1], dtype=torch.float64) / (pi0 + pi1)
    torch.testing.assert_close(logw.exp()[0].double(), w, rtol=1e-6, atol=1e-7)
    assert diag.ess[0].item() == pytest.approx(1 / float((w * w).sum()), rel=1e-5)
    assert diag.max_w[0].item() == pytest.approx(float(w.max()), rel=1e-6)
    assert int(diag.n_invalid[0]) == 0 and not bool(diag.remixed[0])


def test_log_likelihood_sums_over_window_steps():
    q, legal, observed, sv = _inputs(1, 3, 4, seed=1)
    cfg = PosteriorConfig(**NO_REMIX)
    full, _ = behaviour_log_likelihood(q, legal, observed, sv, cfg)
    per_step = [behaviour_log_likelihood(q[:, :, k:k + 1], legal[:, :, k:k + 1],
                                         observed[:, :, k:k + 1], sv[:, k:k + 1], cfg)[0]
                for k in range(4)]
    torch.testing.assert_close(full, sum(per_step), rtol=1e-5, atol=1e-5)


def _loop_loglik(q, legal, observed, step_valid, cfg):
    """Plain loops over games, worlds and steps, in float64."""
    G, N, K, _ = q.shape
    out = torch.zeros(G, N, dtype=torch.float64)
    for g in range(G):
        for i in range(N):
            for k in range(K):
                if not step_valid[g, k]:
                    continue
                s = int(observed[g, i, k])
                if s < 0:
                    out[g, i] = float("-inf")
                    continue
                ql = [float(q[g, i, k, a]) for a in range(7) if legal[g, i, k, a]]
                mean = sum(ql) / len(ql)
                z = sum(math.exp((x - mean) / cfg.tau) for x in ql)
                p_soft = math.exp((float(q[g, i, k, s]) - mean) / cfg.tau) / z
                out[g, i] += math.log((1 - cfg.beta) * p_soft + cfg.beta / len(ql))
    return out


@pytest.mark.parametrize("tau,beta", [(10.0, 0.1), (1.0, 0.0), (0.5, 0.3)])
def test_matches_loop_reference(tau, beta):
    q, legal, observed, sv = _inputs(3, 5, 4, seed=2)
    observed[1, 2, 0] = -1          # a contradicting world
    sv[2, 1] = False                # a step outside the window
    cfg = PosteriorConfig(tau=tau, beta=beta, **NO_REMIX)
    got, n_illegal = behaviour_log_likelihood(q, legal, observed, sv, cfg)
    want = _loop_loglik(q, legal, observed, sv, cfg)
    assert torch.isinf(got[1, 2]) and got[1, 2] < 0
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    assert n_illegal.tolist() == [0, 0, 0]


def test_beta_one_is_uniform_when_legal_sets_agree():
    q, legal, observed, sv = _inputs(2, 6, 5, seed=3)
    legal = legal[:, :1].expand_as(legal).clone()      # same legal sets in every world
    observed = observed[:, :1].expand_as(observed).clone()
    logw, diag = posterior_log_weights(q, legal, observed, sv, PosteriorConfig(beta=1.0))
    torch.testing.assert_close(logw.exp(), torch.full((2, 6), 1 / 6))
    torch.testing.assert_close(diag.ess, torch.full((2,), 6.0))


def test_delta_clips_log_likelihood_ratios():
    loglik = torch.tensor([[0.0, -100.0, -5.0, float("-inf")]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    logw, d = stabilize_log_weights(loglik, valid, PosteriorConfig(delta=30.0, **NO_REMIX))
    raw = torch.tensor([1.0, math.exp(-30), math.exp(-5), 0.0], dtype=torch.float64)
    torch.testing.assert_close(logw.exp()[0].double(), raw / raw.sum(), rtol=1e-6, atol=1e-12)
    assert logw[0, 3] == float("-inf")           # -inf is not lifted to -delta
    assert int(d["n_invalid"][0]) == 1


def test_ess_formula_and_shift_invariance():
    gen = torch.Generator().manual_seed(4)
    loglik = torch.randn(4, 9, generator=gen) * 3
    valid = torch.ones(4, 9, dtype=torch.bool)
    cfg = PosteriorConfig(**NO_REMIX)
    logw, d = stabilize_log_weights(loglik, valid, cfg)
    w = logw.exp()
    torch.testing.assert_close(w.sum(1), torch.ones(4))
    torch.testing.assert_close(d["ess"], 1 / (w * w).sum(1))
    torch.testing.assert_close(d["max_w"], w.max(1).values)
    logw2, _ = stabilize_log_weights(loglik + 1234.5, valid, cfg)
    torch.testing.assert_close(logw2, logw, rtol=1e-4, atol=1e-4)


def test_padding_worlds_get_zero_weight_and_are_not_counted():
    q, legal, observed, sv = _inputs(2, 5, 3, seed=5)
    valid = torch.ones(2, 5, dtype=torch.bool)
    valid[0, 3:] = False
    observed[0, 4, 0] = -1           # contradicts, but it is padding anyway
    logw, d = posterior_log_weights(q, legal, observed, sv, PosteriorConfig(**NO_REMIX), valid)
    assert torch.isinf(logw[0, 3:]).all()
    assert logw.exp()[0, :3].sum().item() == pytest.approx(1.0, rel=1e-6)
    assert d.n_invalid.tolist() == [0, 0]
    assert d.ess[0] <= 3.0 + 1e-5


def test_strict_raises_on_in_hand_illegal_observation():
    q, legal, observed, sv = _inputs(2, 4, 3, seed=6)
    legal[1, 2, 1, :] = False
    legal[1, 2, 1, 0] = True
    observed[1, 2, 1] = 5            # in hand, illegal
    with pytest.raises(ValueError, match=r"game 1, window step 1, world 2"):
        posterior_log_weights(q, legal, observed, sv, PosteriorConfig(strict=True))
    loglik, n_illegal = behaviour_log_likelihood(q, legal, observed, sv,
                                                 PosteriorConfig(strict=False))
    assert n_illegal.tolist() == [0, 1]
    # the illegal step is skipped for that world: equal to scoring the other two steps only
    sv_other = sv.clone()
    sv_other[:, 1] = False
    other, _ = behaviour_log_likelihood(q, legal, observed, sv_other, PosteriorConfig())
    keep = torch.tensor([0, 2])
    fresh, _ = behaviour_log_likelihood(q[:, :, keep], legal[:, :, keep], observed[:, :, keep],
                                        sv[:, keep], PosteriorConfig())
    torch.testing.assert_close(loglik[1, 2], fresh[1, 2])
    torch.testing.assert_close(other, fresh)


def test_invalid_steps_are_ignored():
    q, legal, observed, sv = _inputs(1, 3, 2, seed=7)
    sv[0, 1] = False
    observed[0, 0, 1] = -1           # would contradict, but the step is outside the window
    a, _ = behaviour_log_likelihood(q, legal, observed, sv, PosteriorConfig())
    b, _ = behaviour_log_likelihood(q[:, :, :1], legal[:, :, :1], observed[:, :, :1], sv[:, :1],
                                    PosteriorConfig())
    torch.testing.assert_close(a, b)


def test_remix_lifts_ess_exactly_to_threshold_and_keeps_dead_worlds_dead():
    loglik = torch.tensor([[0.0, -8.0, -9.0, -10.0, -12.0, -20.0, float("-inf"), -15.0]])
    valid = torch.ones(1, 8, dtype=torch.bool)
    cfg = PosteriorConfig(ess_remix_threshold=0.5)
    logw, d = stabilize_log_weights(loglik, valid, cfg)
    assert bool(d["remixed"][0]) and 0 < float(d["remix_lambda"][0]) < 1
    assert float(d["ess_before_remix"][0]) < 4.0
    assert float(d["ess"][0]) == pytest.approx(4.0, rel=1e-4)        # 0.5 * 8 valid worlds
    assert logw[0, 6] == float("-inf")
    assert logw.exp().sum().item() == pytest.approx(1.0, rel=1e-6)
    # target above the consistent count: plain uniform over the 7 consistent worlds
    _, d2 = stabilize_log_weights(loglik, valid, PosteriorConfig(ess_remix_threshold=1.0))
    assert float(d2["remix_lambda"][0]) == pytest.approx(1.0)
    assert float(d2["ess"][0]) == pytest.approx(7.0, rel=1e-5)
    # healthy rows are left alone
    _, d3 = stabilize_log_weights(torch.zeros(1, 8), valid, cfg)
    assert not bool(d3["remixed"][0])


def test_all_worlds_contradicting():
    loglik = torch.full((2, 3), float("-inf"))
    loglik[1] = 0.0
    valid = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="decision 0"):
        stabilize_log_weights(loglik, valid, PosteriorConfig(strict=True))
    logw, d = stabilize_log_weights(loglik, valid, PosteriorConfig(strict=False))
    torch.testing.assert_close(logw.exp(), torch.full((2, 3), 1 / 3))
    assert d["fallback_uniform"].tolist() == [True, False]
    assert d["n_invalid"].tolist() == [3, 0]


def test_bad_config_and_shapes():
    with pytest.raises(ValueError, match="beta"):
        PosteriorConfig(beta=1.5)
    with pytest.raises(ValueError, match="tau"):
        PosteriorConfig(tau=0)
    q, legal, observed, sv = _inputs(1, 2, 2, seed=8)
    with pytest.raises(ValueError, match="step_valid"):
        posterior_log_weights(q, legal, observed, sv[:, :1])
