"""The float32 reference `weighted_moments` against float64 and against plain formulas."""
import pytest
import torch

from eqfast.engine.moments import uniform_log_weights, weighted_moments, weighted_moments_float64


def _inputs(G, N, seed, scale=20.0):
    gen = torch.Generator().manual_seed(seed)
    q = (torch.rand(G, N, 7, generator=gen) * 2 - 1) * scale
    legal = torch.rand(G, 7, generator=gen) < 0.5
    legal[:, 0] = True
    logw = torch.randn(G, N, generator=gen) * 3
    return q, legal, logw


def assert_moments_close(got, want, q_scale, rtol=1e-5):
    """Every output by name; tolerances relative to the output's natural scale."""
    atol = {"mean": rtol * q_scale, "var": rtol * q_scale ** 2, "u_mean": rtol * q_scale,
            "u_max": rtol * q_scale, "ess": 0.0, "max_w": 0.0}
    for name in want._fields:
        g, w = getattr(got, name).double(), getattr(want, name).double()
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol[name], equal_nan=True,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("G,N", [(1, 1), (3, 7), (32, 100), (3, 257)], ids=lambda x: str(x))
def test_float32_matches_float64(G, N):
    q, legal, logw = _inputs(G, N, seed=G * 1000 + N)
    assert_moments_close(weighted_moments(q, legal, logw), weighted_moments_float64(q, legal, logw),
                         q_scale=20.0)


def test_uniform_weights_are_plain_mean_and_population_variance():
    q, legal, _ = _inputs(4, 50, seed=1)
    m = weighted_moments(q, legal, torch.zeros(4, 50))
    torch.testing.assert_close(m.mean, q.mean(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(m.var, q.var(1, unbiased=False), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(m.ess, torch.full((4,), 50.0))
    torch.testing.assert_close(m.max_w, torch.full((4,), 1 / 50))
    sd = q.var(1, unbiased=False).sqrt()
    torch.testing.assert_close(m.u_max, torch.where(legal, sd, 0).max(1).values, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(m.u_mean, (sd * legal).sum(1) / legal.sum(1), rtol=1e-5, atol=1e-4)


def test_variance_is_stable_far_from_zero():
    # Q ~ 41 +- 0.01: E[x^2] - E[x]^2 in float32 would be pure rounding noise here
    gen = torch.Generator().manual_seed(2)
    q = 41.0 + 0.01 * torch.randn(2, 300, 7, generator=gen)
    legal = torch.ones(2, 7, dtype=torch.bool)
    logw = torch.randn(2, 300, generator=gen)
    got = weighted_moments(q, legal, logw).var.double()
    want = weighted_moments_float64(q, legal, logw).var
    torch.testing.assert_close(got, want, rtol=1e-3, atol=0.0)


def test_minus_inf_weights_ignore_their_worlds():
    q, legal, logw = _inputs(2, 10, seed=3)
    logw[:, 4:] = float("-inf")
    q_garbage = q.clone()
    q_garbage[:, 4:] = float("nan")          # a zero-weight world's Q is never read
    got = weighted_moments(q_garbage, legal, logw)
    want = weighted_moments_float64(q[:, :4], legal, logw[:, :4])
    assert_moments_close(got, want, q_scale=20.0)


def test_all_minus_inf_row_is_nan_and_other_rows_unaffected():
    q, legal, logw = _inputs(3, 6, seed=4)
    logw[1] = float("-inf")
    m = weighted_moments(q, legal, logw)
    for name in m._fields:
        assert torch.isnan(getattr(m, name)[1]).all(), name
        assert torch.isfinite(getattr(m, name)[[0, 2]]).all(), name


def test_dominant_weight():
    q, legal, logw = _inputs(2, 20, seed=5)
    logw[:, 7] = 200.0
    m = weighted_moments(q, legal, logw)
    torch.testing.assert_close(m.mean, q[:, 7])
    torch.testing.assert_close(m.ess, torch.ones(2))
    torch.testing.assert_close(m.max_w, torch.ones(2))
    assert (m.var < 1e-6).all()


def test_no_legal_move_gives_zero_uncertainty():
    q, legal, logw = _inputs(2, 5, seed=6)
    legal[0] = False
    m = weighted_moments(q, legal, logw)
    assert m.u_mean[0] == 0 and m.u_max[0] == 0


def test_uniform_log_weights():
    valid = torch.tensor([[True, True, False]])
    lw = uniform_log_weights(valid)
    assert lw.tolist() == [[0.0, 0.0, float("-inf")]]


def test_shape_errors_name_the_argument():
    q, legal, logw = _inputs(2, 5, seed=7)
    with pytest.raises(ValueError, match="logw"):
        weighted_moments(q, legal, logw[:, :4])
    with pytest.raises(ValueError, match="legal"):
        weighted_moments(q, legal[:1], logw)


@pytest.mark.parametrize("N", [7, 100, 129])
def test_each_row_is_independent_of_the_rest_of_the_batch(N):
    """Bit for bit: a decision's moments do not depend on how many decisions share the call
    (records must not depend on the batch size). A batched matmul reduction failed this:
    three moves worth exactly 28 became 28.000017 / 28.000025 / 28.000025 in a batch of
    24 games and equal alone, and greedy chose differently."""
    q, legal, logw = _inputs(64, N, seed=N)
    q[5] = 28.0                                   # every world worth the same: a pure tie
    logw[5] = 0.0
    whole = weighted_moments(q, legal, logw)
    for rows in (slice(5, 6), slice(0, 7), slice(3, 64)):
        part = weighted_moments(q[rows], legal[rows], logw[rows])
        for name in whole._fields:
            assert torch.equal(getattr(part, name), getattr(whole, name)[rows]), (name, rows)
    tie = whole.mean[5]
    assert bool((tie == tie[0]).all()), tie.tolist()      # equal Q stay equal
