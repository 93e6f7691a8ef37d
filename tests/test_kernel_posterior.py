"""Triton `posterior_log_weights` (kernels/posterior.py) against the PyTorch reference
(eqfast/engine/posterior.py): the same -inf entries, log-weights within 1e-4 relative /
1e-5 absolute (both compute in float32; the kernels sum in another order), integer and
boolean diagnostics equal, float diagnostics within the same tolerance.

Inputs are random Q and legal sets with contradicting worlds (observed slot -1), invalid
window steps, padding worlds, re-mixing on and off, beta 0 and 1, a decision whose every
world contradicts (the uniform fallback), N across several blocks. Every output is poisoned
before each run. Runs under TRITON_INTERPRET=1 on the CPU (conftest sets it) and natively
on CUDA when present.
"""
from __future__ import annotations

import pytest
import torch

from conftest import poison
from eqfast.engine.posterior import PosteriorConfig, posterior_log_weights as reference
from eqfast.utils.checks import host_checks_off

import eqfast.kernels
import eqfast.kernels.posterior as kernel_module

pytestmark = pytest.mark.interpreter
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = dict(rtol=1e-4, atol=1e-5)


def random_inputs(G, N, K, seed, p_contradict=0.03):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(G, N, K, 7, generator=gen) * 15
    legal = torch.rand(G, N, K, 7, generator=gen) < 0.6
    legal[..., 0] |= ~legal.any(-1)
    slot = torch.where(legal, torch.rand(G, N, K, 7, generator=gen), -1.0).argmax(-1)
    slot = torch.where(torch.rand(G, N, K, generator=gen) < p_contradict, -1, slot)
    step_valid = torch.rand(G, K, generator=gen) < 0.8
    world_valid = torch.rand(G, N, generator=gen) < 0.9
    world_valid[:, 0] = True
    return q, legal, slot, step_valid, world_valid


def run_both(inputs, cfg, monkeypatch):
    allocate = kernel_module._empty_outputs
    monkeypatch.setattr(kernel_module, "_empty_outputs",
                        lambda *a: {k: poison(v) for k, v in allocate(*a).items()})
    want = reference(*inputs[:4], cfg, inputs[4])
    got = eqfast.kernels.posterior_log_weights(*(t.to(DEVICE) for t in inputs[:4]), cfg,
                                               inputs[4].to(DEVICE))
    return want, got


def assert_close_results(want, got):
    (w_logw, w_diag), (g_logw, g_diag) = want, got
    g_logw = g_logw.cpu()
    finite = torch.isfinite(w_logw)
    assert torch.equal(finite, torch.isfinite(g_logw))
    assert torch.equal(w_logw[~finite], g_logw[~finite])          # the same -inf entries
    torch.testing.assert_close(g_logw[finite], w_logw[finite], **TOL)
    for name in w_diag.__dataclass_fields__:
        a, b = getattr(w_diag, name), getattr(g_diag, name).cpu()
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.is_floating_point():
            torch.testing.assert_close(b, a, **TOL, msg=name)
        else:
            assert torch.equal(a, b), name


CONFIGS = {
    "default": PosteriorConfig(),
    "sharp-beta0": PosteriorConfig(tau=2.0, beta=0.0),
    "beta1-remix": PosteriorConfig(beta=1.0, ess_remix_threshold=0.5),
    "clip3-no-remix": PosteriorConfig(delta=3.0, ess_remix_threshold=0.0),
    "strong-remix": PosteriorConfig(tau=1.0, ess_remix_threshold=0.9),
}


@pytest.mark.parametrize("shape", [(3, 7, 4), (2, 300, 8), (4, 16, 1), (1, 1, 2), (3, 50, 5),
                                   (2, 37, 16)],
                         ids=lambda s: "G%d-N%d-K%d" % s)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_kernel_equals_reference(shape, name, monkeypatch):
    want, got = run_both(random_inputs(*shape, seed=sum(shape) + len(name)), CONFIGS[name],
                         monkeypatch)
    assert_close_results(want, got)


@pytest.mark.parametrize("rows, warps", [(32, 1), (1024, 8)])
def test_likelihood_launch_configurations_agree(rows, warps):
    # the sweep's configurations (benchmarks/gpu_posterior_tune.py) compute the same
    # log-likelihoods and counts as the shipped one, K not a power of two, N over blocks
    q, legal, slot, step_valid, world_valid = (t.to(DEVICE) for t in
                                               random_inputs(3, 90, 6, seed=5))
    G, N = world_valid.shape
    outs = []
    for r, w in ((kernel_module.LIKELIHOOD_ROWS, kernel_module.LIKELIHOOD_WARPS), (rows, warps)):
        ll = poison(torch.empty(G, N, device=DEVICE))
        ill = poison(torch.empty(G, N, dtype=torch.int64, device=DEVICE))
        kernel_module._likelihood(q, legal, slot, step_valid, world_valid, PosteriorConfig(),
                                  ll, ill, rows=r, num_warps=w)
        outs.append((ll.cpu(), ill.cpu()))
    (a, ia), (b, ib) = outs
    assert torch.equal(ia, ib) and torch.equal(torch.isfinite(a), torch.isfinite(b))
    torch.testing.assert_close(b[torch.isfinite(b)], a[torch.isfinite(a)], **TOL)


def test_remixing_and_contradictions_are_exercised(monkeypatch):
    inputs = random_inputs(4, 200, 8, seed=1, p_contradict=0.05)
    want, got = run_both(inputs, CONFIGS["strong-remix"], monkeypatch)
    assert bool(want[1].remixed.any()) and int(want[1].n_invalid.sum()) > 0
    assert_close_results(want, got)


def test_uniform_fallback_when_every_world_contradicts(monkeypatch):
    q, legal, slot, step_valid, world_valid = random_inputs(3, 40, 3, seed=2)
    step_valid[1] = True
    slot[1, :, 0] = -1                         # decision 1: no world holds the observed tile
    cfg = PosteriorConfig(strict=False)
    want, got = run_both((q, legal, slot, step_valid, world_valid), cfg, monkeypatch)
    assert want[1].fallback_uniform.tolist() == [False, True, False]
    assert_close_results(want, got)
    on_device = [t.to(DEVICE) for t in (q, legal, slot, step_valid, world_valid)]
    with pytest.raises(ValueError, match="every one of its"):     # strict: the reference's error
        eqfast.kernels.posterior_log_weights(*on_device[:4], PosteriorConfig(), on_device[4])
    with host_checks_off():                   # inside a captured step: no check, the fallback
        got_unchecked = eqfast.kernels.posterior_log_weights(*on_device[:4], PosteriorConfig(),
                                                             on_device[4])
        want_unchecked = reference(q, legal, slot, step_valid, PosteriorConfig(), world_valid)
    assert_close_results(want_unchecked, got_unchecked)


def test_in_hand_illegal_observation(monkeypatch):
    q, legal, slot, step_valid, world_valid = random_inputs(2, 20, 3, seed=3)
    step_valid[:] = True
    world_valid[0, 5] = True
    legal[0, 5, 1] = False
    legal[0, 5, 1, 6] = True
    slot[0, 5, 1] = 2                          # in hand, but not a legal slot
    with pytest.raises(ValueError, match="illegal there"):
        eqfast.kernels.posterior_log_weights(*(t.to(DEVICE) for t in (q, legal, slot, step_valid)),
                                             PosteriorConfig(), world_valid.to(DEVICE))
    want, got = run_both((q, legal, slot, step_valid, world_valid),
                         PosteriorConfig(strict=False), monkeypatch)
    assert want[1].n_illegal.tolist() == [1, 0]
    assert_close_results(want, got)


def test_rejects_bad_shapes():
    q, legal, slot, step_valid, world_valid = random_inputs(2, 5, 3, seed=4)
    with pytest.raises(ValueError, match="legal_past"):
        eqfast.kernels.posterior_log_weights(q, legal[:, :4], slot, step_valid)
