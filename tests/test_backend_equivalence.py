"""End to end: the Triton backend (interpreter on CPU, compiled on CUDA) and the reference,
both on the test device, give the same worlds, tokens and actions, and E[Q] within the
float tolerance of the reduction."""
from __future__ import annotations

import pytest
import torch
from conftest import TEST_DEVICE
from fakes import HashOracle

from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig


def _network_oracle():
    from eqfast.oracle.network import NetworkOracle, build_network, script_module
    torch.manual_seed(0)
    net = build_network({"arch": "mlp", "hidden": 32, "depth": 1}).to(TEST_DEVICE).eval()
    return NetworkOracle(script_module(net), device=TEST_DEVICE)


@pytest.mark.interpreter
@pytest.mark.parametrize("oracle", ["hash", "network"])
@pytest.mark.parametrize("posterior", [None, PosteriorConfig(window_k=3)], ids=["uniform", "posterior"])
def test_triton_backend_matches_reference(posterior, oracle):
    """'network' goes through tokenize_worlds (the Triton kernel on the triton backend);
    'hash' through OracleBatch rows."""
    make = HashOracle if oracle == "hash" else _network_oracle
    cfg = EngineConfig(n_samples=7, posterior=posterior, seed=3, store_worlds=True)
    # one game under the interpreter (two take 2.3 times as long; the kernels' own tests
    # cover several games a launch), two on a GPU
    seeds = [10, 11] if TEST_DEVICE == "cuda" else [10]
    ref = Engine(make(), cfg, backend="reference", device=TEST_DEVICE).play(seeds).to("cpu")
    tri = Engine(make(), cfg, backend="triton", device=TEST_DEVICE).play(seeds).to("cpu")
    # integer / random-number driven outputs: identical
    for name in ("transcript_tokens", "transcript_lengths", "legal_mask", "action_taken",
                 "n_worlds", "enumerated", "exploration_mode"):
        assert torch.equal(ref[name], tri[name]), name
    # the sampled worlds are identical, so per-world Q is too
    assert torch.equal(ref["world_q"], tri["world_q"])
    # float reductions: within the kernel's stated tolerance (1e-5 relative, 42e-5 absolute)
    legal = ref["legal_mask"]
    for name, atol in (("e_q_mean", 42e-5), ("e_q_var", 42 * 42e-5), ("ess", 1e-3)):
        a, b = ref[name], tri[name]
        if a.dim() == 2:
            a, b = a[legal], b[legal]
        torch.testing.assert_close(b, a, rtol=1e-5, atol=atol, msg=name)


def test_triton_backend_on_cpu_refuses_compiled_kernels(monkeypatch):
    """Compiled kernels (a CUDA machine) cannot take CPU tensors: a clear error up front
    instead of Triton's 'Pointer argument cannot be accessed' at the first launch."""
    import eqfast.kernels
    from eqfast.engine.pipeline import make_backend

    monkeypatch.setattr(eqfast.kernels, "INTERPRETED", False)
    with pytest.raises(ValueError, match="compiled for CUDA.*device='cuda'"):
        make_backend("triton", "cpu")
    monkeypatch.setattr(eqfast.kernels, "INTERPRETED", True)
    assert make_backend("triton", "cpu").name == "triton"
