"""Oracle networks: eager == TorchScript, torch.export, the NetworkOracle contract, and a
real learning test (overfit a tiny solver-labelled set)."""
import copy

import numpy as np
import pytest
import torch

from eqfast.oracle import NetworkOracle, OracleBatch, OracleModule, build_network, legal_slots
from eqfast.oracle.dataset import COLUMNS, as_batch, position_of
from eqfast.oracle.export import example_inputs, export_program
from eqfast.oracle.network import count_parameters, script_module, tile_beaters, tile_roles
from eqfast.oracle.train import masked_mse, prepare_rows
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.state import GameState
from eqfast.rules.tables import IN_CALLED

CONFIGS = {
    "mlp-h48-d2": {"arch": "mlp", "hidden": 48, "depth": 2},
    "mlp-roles-h40-d1": {"arch": "mlp", "hidden": 40, "depth": 1, "roles": 1},
    "mlp-beaters-h40-d2": {"arch": "mlp", "hidden": 40, "depth": 2, "roles": 2},
    "tf-d24-l2": {"arch": "transformer", "d_model": 24, "n_layers": 2, "n_heads": 3, "d_ff": 40},
}


def random_batch(n, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        hands = deal_from_seed(2000 + i).astype(np.int64)
        state = GameState.new(hands.tolist(), int(rng.integers(10)), int(rng.integers(4)))
        for _ in range(int(rng.integers(28))):
            state = state.play(int(rng.choice(state.legal_moves())))
        rows.append(position_of(hands, state))
    return OracleBatch.cat(rows)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_eager_equals_torchscript(name):
    torch.manual_seed(0)
    net = build_network(CONFIGS[name]).eval()
    b = random_batch(37)
    args = (b.hands, b.remaining, b.decl, b.trick, b.actor)
    with torch.no_grad():
        eager = OracleModule(net)(*args)
        scripted = script_module(net)(*args)
    assert eager.shape == (37, 7) and eager.dtype == torch.float32
    assert torch.allclose(eager, scripted, atol=1e-5, rtol=0), (eager - scripted).abs().max()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_network_oracle_on_cuda_equals_cpu_past_the_profiling_runs():
    """TorchScript fuses its code into generated CUDA kernels after its profiling runs;
    fused, the module's own tokenizer gave Q up to 19.8 points off the CPU's from the 4th
    call on (H100, torch 2.11). NetworkOracle.query tokenizes outside TorchScript: 8 calls
    on CUDA, each equal to the CPU's within float32 noise, on positions at every depth."""
    torch.manual_seed(0)
    net = build_network(CONFIGS["mlp-h48-d2"]).eval()
    b = random_batch(300, seed=3)
    want, legal = NetworkOracle(script_module(net)).query(b)
    on_cuda = NetworkOracle(script_module(copy.deepcopy(net).cuda()), device="cuda")
    for call in range(8):
        got, got_legal = on_cuda.query(b)
        assert torch.equal(got_legal, legal)
        assert torch.allclose(got, want, atol=1e-3, rtol=1e-4), \
            f"call {call}: {(got - want).abs().max().item()}"


@pytest.mark.parametrize("name", ["mlp-roles-h40-d1", "tf-d24-l2"])
def test_torch_export_with_dynamic_batch(name):
    net = build_network(CONFIGS[name]).eval()
    program = export_program(net)
    x = example_inputs(11)  # a batch size other than the traced one
    with torch.no_grad():
        assert torch.allclose(program.module()(*x), OracleModule(net)(*x), atol=1e-5)


def test_network_oracle_contract():
    net = build_network(CONFIGS["mlp-h48-d2"]).eval()
    oracle = NetworkOracle(OracleModule(net))
    b = random_batch(20, seed=1)
    q, legal = oracle.query(b)
    assert q.shape == (20, 7) and q.dtype == torch.float32 and torch.isfinite(q).all()
    assert torch.equal(legal, legal_slots(b))


def test_q_is_per_tile_value_of_actor_slots():
    # The network scores tiles; Q of a slot is its tile's score, whatever the slot index.
    net = build_network(CONFIGS["mlp-h48-d2"]).eval()
    codes = torch.randint(0, 3080, (3, 28))
    tiles = torch.tensor([[0, 1, 2, 3, 4, 5, 6]] * 3)
    with torch.no_grad():
        a = net(codes, tiles)
        b = net(codes, tiles.flip(1))
    assert torch.equal(a, b.flip(1))


def test_roles_share_trump_order_across_declarations():
    role = tile_roles().view(10, 28)
    # The top trump under blanks (0-0) and under sixes (6-6) are both "order 6, no count".
    assert role[0, 0] == role[6, 27] == 18
    # The 5-5 under fives trump carries its 10 count: a different role from 6-6 under sixes.
    assert role[5, 20] != role[6, 27]
    # Plain (non-called) tiles keep their identity; called tiles never use plain roles.
    assert ((role >= 28) == torch.from_numpy(~IN_CALLED)).all()


def test_beaters_table_hand_checked():
    beats = tile_beaters()
    # Fives trump (decl 5): the 5-5 (20) is the top trump, the 5-0 (15) the lowest: all six
    # other fives beat it. The 6-4 (25) leads sixes; the 6-5 is a trump here, so within
    # sixes only the 6-6 (27) outranks it.
    assert beats[5, 20].sum() == 0 and beats[5, 15].sum() == 6
    assert beats[5, 25].nonzero().flatten().tolist() == [27]
    # No trump (decl 9): 6-6 leads sixes and is its boss; 6-0 (21) is beaten by the 6 others.
    assert beats[9, 27].sum() == 0 and beats[9, 21].sum() == 6


def test_live_higher_tile_counts_match_the_table():
    # The network counts live higher tiles with one matmul; check it against the table.
    from eqfast.oracle.tokenizer import tokenize_batch

    net = build_network(CONFIGS["mlp-beaters-h40-d2"])
    codes = tokenize_batch(random_batch(50, seed=4))
    live = codes % 11 != 10
    decl = codes[:, 0] // (28 * 11)
    ref = (tile_beaters()[decl] & live[:, None, :]).sum(-1)
    counts = torch.mm(live.float(), net.tile_roles.beats_t)
    got = counts.gather(1, decl[:, None] * 28 + torch.arange(28)).long()
    assert torch.equal(got, ref) and ref.max() > 3 and (ref == 0).any()


def test_overfits_tiny_labelled_set():
    """112 solver-labelled rows (4 games); 150 full-batch Adam steps take the masked MSE of
    Q/42 from ~0.1 to below 1e-3 (RMS error under 1.3 points)."""
    pytest.importorskip("eqfast.solver._csolver", reason="C solver not built")
    from eqfast.oracle.dataset import label_game

    games = [label_game(g) for g in range(4)]
    cols = {c: np.concatenate([g[c] for g in games]) for c in COLUMNS}
    rows = prepare_rows(cols, np.ones(len(cols["q"]), bool))
    torch.manual_seed(0)
    net = build_network({"arch": "mlp", "hidden": 64, "depth": 2})
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    codes, slots = rows["codes"].long(), rows["slots"].long()
    first = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: more threads only add contention on CI
    try:
        for _ in range(150):
            loss = masked_mse(net(codes, slots), rows["q"], rows["legal"])
            first = first if first is not None else loss.item()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    assert first > 0.05
    assert loss.item() < 1e-3, loss.item()
    # The trained network reproduces the labels through the full OracleModule path too.
    cols_t = {c: torch.from_numpy(np.asarray(v, np.int64 if v.dtype.kind in "iu" else v.dtype))
              for c, v in cols.items()}
    q, legal = NetworkOracle(OracleModule(net.eval())).query(as_batch(cols_t))
    assert torch.equal(legal, cols_t["legal"])
    assert ((q - cols_t["q"]).abs()[legal].mean()) < 1.5


def test_parameter_counts_are_stated():
    assert count_parameters(build_network({"arch": "mlp", "hidden": 256, "depth": 2})) == 927772


def test_speed_test_network_gives_possible_values():
    """Random-weight networks for speed runs: Q inside [-42, 42] (the record checks reject
    anything else), same cost per row as the config (same parameter count)."""
    from eqfast.oracle.network import DEFAULT_CONFIGS, count_parameters, speed_test_network

    codes = torch.randint(0, 3080, (64, 28))
    slots = torch.randint(0, 28, (64, 7))
    for name in ("mlp", "transformer816k"):
        net = speed_test_network(DEFAULT_CONFIGS[name])
        assert count_parameters(net) == count_parameters(build_network(DEFAULT_CONFIGS[name]))
        with torch.no_grad():
            q = net(codes, slots)
        assert q.abs().max() < 42 and q.std() > 0


def test_oracle_module_clamps_q_to_the_possible_range():
    """A network that overshoots (here: every output 50 or -50) gives Q in [-42, 42] through
    OracleModule, eager and TorchScript, on both entry points."""
    net = build_network({"arch": "mlp", "hidden": 8, "depth": 1}).eval()
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.copy_(torch.tensor([50.0, -50.0] * 14) / 42.0)
    codes = torch.randint(0, 3080, (5, 28))
    slots = torch.arange(7).expand(5, 7)
    for module in (OracleModule(net), script_module(net)):
        with torch.no_grad():
            q = module.forward_codes(codes, slots)
        assert torch.equal(q, torch.tensor([42.0, -42.0, 42.0, -42.0, 42.0, -42.0, 42.0]).expand(5, 7))
    with torch.no_grad():
        assert net(codes, slots).abs().max() > 49      # the bare network is not clamped


def test_transformer_with_roles_and_value_head():
    """Relational tile codes feed the attention model; forward_with_value's Q is forward's
    Q; the module scripts and exports with a dynamic batch."""
    from eqfast.oracle.export import example_inputs, export_program
    from eqfast.oracle.network import build_network, script_module
    from eqfast.oracle.tokenizer import actor_slot_tiles, tokenize

    torch.manual_seed(0)
    cfg = {"arch": "transformer", "d_model": 32, "n_layers": 1, "n_heads": 4, "d_ff": 64,
           "roles": 2, "value_head": 1}
    net = build_network(cfg).eval()
    hands, remaining, decl, trick, actor = example_inputs(6)
    codes, slots = tokenize(hands, remaining, decl, trick, actor), actor_slot_tiles(hands, actor)
    q, v = net.forward_with_value(codes, slots)
    assert torch.equal(q, net(codes, slots)) and v.shape == (6,)
    scripted = script_module(net)
    torch.testing.assert_close(scripted(hands, remaining, decl, trick, actor), q.clamp(-42, 42))
    program = export_program(net)
    torch.testing.assert_close(program.module()(*example_inputs(3)),
                               net(*[t[:3] for t in (codes, slots)]).clamp(-42, 42))
    # roles = 0 keeps a 1-row placeholder table (same module structure, no role input)
    net_no_roles = build_network({**cfg, "roles": 0}).eval()
    assert net_no_roles.role_embed.weight.shape[0] == 1 and net.role_embed.weight.shape[0] > 1
