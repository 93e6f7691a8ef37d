"""Stage 2 (eqfast/stage2, docs/STAGE2.md): the model, its weights files, the trainer, the
evaluation command and the policy adapter, on a tiny dataset generated here."""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from eqfast.cli import eval_stage2, generate, train_stage2
from eqfast.data.shards import load_records
from eqfast.engine.games import setup_games
from eqfast.engine.transcript import current_hand_order, transcript_tokens
from eqfast.engine.public import hidden_info
from eqfast.rules.batched import BatchedGames
from eqfast.rules.state import GameState
from eqfast.rules.tables import FOLLOWS, LED_SUIT, TILE_ID, torch_tables
from eqfast.data.shards import ShardError
from eqfast.stage2.data import (data_hash, load_split, own_targets_outside, prepare_rows,
                                rows_of_tricks)
from eqfast.stage2.defaults import parse_tricks
from eqfast.stage2.model import (build_model, export_program, forward_by_length,
                                 holder_marginals, length_groups, script_model, seen_matrix,
                                 trim_tokens, void_matrix)
from eqfast.stage2.policy import current_legal, stage2_slots
from eqfast.stage2.train import TrainConfig, policy_cross_entropy, stage2_loss, train
from eqfast.stage2.weights import (Stage2WeightsError, load_stage2, load_stage2_with_meta,
                                   save_stage2)

TINY_ARCH = {"d_model": 32, "n_layers": 1, "n_heads": 4, "d_ff": 64, "var_head": 1}
#: seeds 0..27 hold games of all three splits (val: 0, 26; test: 1, 17, 20)
N_GAMES = 28


def quiet(*args, **kwargs):
    pass


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("stage2") / "data"
    status = generate.main(["--out", str(out), "--games", str(N_GAMES), "--games-per-batch",
                            str(N_GAMES), "--n-samples", "8", "--threads", "1", "--quiet",
                            "--control-variate", "none"])
    assert status == 0
    return out


@pytest.fixture(scope="module")
def records(dataset):
    return load_records(dataset)[0]


def tiny_config(dataset, run, **kw) -> TrainConfig:
    base = dict(data=str(dataset), run=str(run), arch=dict(TINY_ARCH), steps=40, batch=64,
                lr=3e-3, warmup=5, eval_every=20, ckpt_every=20)
    return TrainConfig(**{**base, **kw})


def random_model(seed=0, **arch):
    torch.manual_seed(seed)
    return build_model({**TINY_ARCH, **arch}).eval()


# ---------------------------------------------------------------- the model
def test_shapes_and_int8_input(records):
    model = random_model()
    tokens, lengths = records["transcript_tokens"][:9], records["transcript_lengths"][:9]
    with torch.no_grad():
        mu, log_var = model(tokens.long(), lengths)
        mu8, log_var8 = model(tokens, lengths)
    assert mu.shape == log_var.shape == (9, 7)
    assert mu.dtype == log_var.dtype == torch.float32
    assert torch.isfinite(mu).all() and torch.isfinite(log_var).all()
    assert torch.equal(mu, mu8) and torch.equal(log_var, log_var8)
    no_var = random_model(var_head=0)
    with torch.no_grad():
        assert torch.equal(no_var(tokens, lengths)[1], torch.zeros(9, 7))


def test_padding_beyond_the_length_changes_nothing(records):
    model = random_model()
    tokens = records["transcript_tokens"][:64].long()
    lengths = records["transcript_lengths"][:64]
    garbage = torch.randint(0, 7, tokens.shape, generator=torch.Generator().manual_seed(1))
    pad = torch.arange(36)[None, :, None] >= lengths[:, None, None]
    assert pad.any()
    with torch.no_grad():
        mu, log_var = model(tokens, lengths)
        mu2, log_var2 = model(torch.where(pad, garbage, tokens), lengths)
    assert torch.equal(mu, mu2) and torch.equal(log_var, log_var2)


def test_order_of_the_plays_matters(records):
    """Swapping two plays (same tiles, other order) changes μ: positions are seen."""
    model = random_model()
    r = int(torch.nonzero(records["decision_idx"] >= 6)[0])
    tokens = records["transcript_tokens"][r:r + 1].long().clone()
    length = records["transcript_lengths"][r:r + 1]
    swapped = tokens.clone()
    last = int(length) - 1
    swapped[0, [last, last - 4]] = tokens[0, [last - 4, last]]
    with torch.no_grad():
        assert not torch.allclose(model(tokens, length)[0], model(swapped, length)[0])


def test_torchscript_and_export_give_the_eager_outputs(records):
    model = random_model()
    tokens = records["transcript_tokens"][:33].long()
    lengths = records["transcript_lengths"][:33]
    with torch.no_grad():
        mu, log_var = model(tokens, lengths)
        smu, slog_var = script_model(model)(tokens, lengths)
        emu, elog_var = export_program(model).module()(tokens, lengths)
    torch.testing.assert_close(smu, mu, rtol=0, atol=1e-5)
    torch.testing.assert_close(slog_var, log_var, rtol=0, atol=1e-5)
    torch.testing.assert_close(emu, mu, rtol=0, atol=1e-5)
    torch.testing.assert_close(elog_var, log_var, rtol=0, atol=1e-5)
    # level 3 runs every line of the summary (level 2's tables feed its chances)
    wide = random_model(seen_tiles=3)
    with torch.no_grad():
        want = wide(tokens, lengths)[0]
        for run in (script_model(wide), export_program(wide).module()):
            torch.testing.assert_close(run(tokens, lengths)[0], want, rtol=0, atol=1e-5)
    short = trim_tokens(tokens, lengths)
    assert short.shape[1] == int(lengths.max()) < tokens.shape[1]
    with torch.no_grad():
        for run in (script_model(model), export_program(model).module()):
            torch.testing.assert_close(run(short, lengths)[0], mu, rtol=0, atol=1e-5)


def test_tokens_cut_to_the_longest_length_give_the_same_outputs(records):
    tokens = records["transcript_tokens"].long()
    lengths = records["transcript_lengths"]
    late = lengths >= 20                            # a mix of lengths, rows past the 8th token
    rows = torch.cat([torch.nonzero(late)[:5, 0], torch.nonzero(~late)[:5, 0]])
    t, ln = tokens[rows], lengths[rows]
    for model in (random_model(1), random_model(1, seen_tiles=2), random_model(1, seen_tiles=3)):
        with torch.no_grad():
            mu, log_var = model(t, ln)
            for cut in (trim_tokens(t, ln), t[:, :int(ln.max()) + 3]):
                cmu, clog_var = model(cut, ln)
                torch.testing.assert_close(cmu, mu, rtol=0, atol=1e-4)
                torch.testing.assert_close(clog_var, log_var, rtol=0, atol=1e-5)
    # never below the declaration and a full hand, whose positions the head reads
    first = torch.zeros(2, 36, 8, dtype=torch.int64)
    assert trim_tokens(first, torch.tensor([2, 3])).shape[1] == 8


def test_seen_matrix_marks_who_played_what_and_the_actors_hand():
    """A whole game played by a random model: at every decision the summary holds, at row
    (seat - actor) mod 4, every tile that seat has played, and at row 4 the actor's hand,
    tracked here from the game state, not from the tokens."""
    model = random_model(4)
    games = BatchedGames.new(*setup_games([3]))
    played = []                                          # (absolute seat, tile id)
    for _ in range(28):
        tokens, lengths = transcript_tokens(games)
        f = tokens.long() * (torch.arange(36) < lengths[:, None])[..., None]
        tile = torch.as_tensor(TILE_ID, dtype=torch.int64)[f[..., 0], f[..., 1]]
        got = seen_matrix(f, tile)[0].view(5, 28)
        actor = int(games.current_player[0])
        want = torch.zeros(5, 28)
        for seat, t in played:
            want[(seat - actor) % 4, t] = 1
        tiles, in_hand = games.hand_slots(games.current_player)
        want[4, tiles[0][in_hand[0]]] = 1
        assert torch.equal(got, want), len(played)
        slot = stage2_slots(model, games)
        played.append((actor, int(tiles[0, slot])))
        games = games.play(slot)
    assert len({t for _, t in played}) == 28


@pytest.mark.parametrize("seed", [3, 8, 21])
def test_void_matrix_marks_the_voids_shown_and_they_are_true(seed):
    """A whole game played by a random model: at every decision the voids table holds
    exactly the (relative player, led suit) pairs of the plays so far that did not follow
    the suit of their trick's lead (tracked here from the plays, not from the tokens), and
    every void it shows is true: that seat's hidden hand holds no tile of the suit."""
    model = random_model(4)
    games = BatchedGames.new(*setup_games([seed]))
    decl = int(games.decl[0])
    played, shown_any = [], 0                              # (absolute seat, tile id)
    leds, follows = torch.as_tensor(LED_SUIT, dtype=torch.int64), torch.as_tensor(FOLLOWS)
    for _ in range(28):
        tokens, lengths = transcript_tokens(games)
        live = torch.arange(36) < lengths[:, None]
        f = tokens.long() * live[..., None]
        tile = torch.as_tensor(TILE_ID, dtype=torch.int64)[f[..., 0], f[..., 1]]
        got = void_matrix(f, tile, live, leds, follows)[0].view(4, 8)
        actor = int(games.current_player[0])
        want = torch.zeros(4, 8)
        for i, (seat, t) in enumerate(played):
            lead = played[i - i % 4][1]
            suit = int(LED_SUIT[decl, lead])
            if i % 4 and not FOLLOWS[decl, suit, t]:
                want[(seat - actor) % 4, suit] = 1
        assert torch.equal(got, want), len(played)
        for r, s in torch.nonzero(got).tolist():
            tiles, in_hand = games.hand_slots(torch.tensor([(actor + r) % 4]))
            assert not FOLLOWS[decl, s, tiles[0][in_hand[0]].numpy()].any()
        shown_any += int(got.sum())
        tiles, _ = games.hand_slots(games.current_player)
        slot = stage2_slots(model, games)
        played.append((actor, int(tiles[0, slot])))
        games = games.play(slot)
    assert shown_any > 0


def _summaries(games):
    """(seen, voids, decl) of each game's current decision, from its transcript tokens."""
    tokens, lengths = transcript_tokens(games)
    live = torch.arange(36) < lengths[:, None]
    f = tokens.long() * live[..., None]
    tile = torch.as_tensor(TILE_ID, dtype=torch.int64)[f[..., 0], f[..., 1]]
    leds, follows = torch.as_tensor(LED_SUIT, dtype=torch.int64), torch.as_tensor(FOLLOWS)
    return seen_matrix(f, tile), void_matrix(f, tile, live, leds, follows), f[:, 0, 6]


def _brute_force_holders(games, played, leader):
    """P(relative player r holds tile t) [3, 28] by enumeration: every split of the hidden
    tiles into hands of the right sizes whose deal makes each play of the game legal
    (eqfast.rules.state, not the voids tables), all counted alike."""
    actor, decl = int(games.current_player[0]), int(games.decl[0])
    tiles, in_hand = games.hand_slots(torch.arange(4))
    held = {s: tiles[s][in_hand[s]].tolist() for s in range(4)}
    seats = [(actor + r) % 4 for r in (1, 2, 3)]
    pool = sorted(t for s in seats for t in held[s])
    owners = [r for r, s in enumerate(seats) for _ in held[s]]
    counts, total = torch.zeros(3, 28, dtype=torch.float64), 0
    for split in set(itertools.permutations(owners)):
        hands = {s: [t for p, t in played if p == s] for s in range(4)}
        hands[actor] += held[actor]
        for t, r in zip(pool, split):
            hands[seats[r]].append(t)
        state = GameState.new([hands[s] for s in range(4)], decl, leader)
        for _, t in played:
            if t not in state.legal_moves():
                break
            state = state.play(t)
        else:
            total += 1
            for t, r in zip(pool, split):
                counts[r, t] += 1
    assert total > 0
    return counts / total


@pytest.mark.parametrize("seed", [3, 21])
def test_holder_marginals_are_the_uniform_worlds_chances(seed):
    """A game of random legal moves: in the last ten decisions (up to 4,200 splits) the
    summary's chances equal a brute force over the deals that make every play legal; at
    every decision each hidden tile's chances sum to 1, each seat's to its hand size, and a
    seat the engine's sampler may not give a tile (eqfast/engine/public.py) gets none of
    it."""
    gen = torch.Generator().manual_seed(seed)
    games = BatchedGames.new(*setup_games([seed]))
    leader, follows = int(games.leader[0]), torch.as_tensor(FOLLOWS)
    played = []                                                # (absolute seat, tile id)
    for k in range(28):
        seen, voids, decl = _summaries(games)
        got = holder_marginals(seen, voids, decl, follows)[0].view(3, 28).double()
        info = hidden_info(games)
        n = int(info.n_pool[0])
        pool = info.pool[0, :n]
        may = (info.allowed[0, :n, None] >> torch.arange(3)) & 1          # [n, 3]
        assert torch.allclose(got.sum(0)[pool], torch.ones(n, dtype=torch.float64))
        assert float(got.sum()) == pytest.approx(n) and float(got.sum(0).sum()) == pytest.approx(n)
        torch.testing.assert_close(got.sum(1), info.sizes[0].double())
        assert not got[:, pool][may.T == 0].any()
        if k >= 18:
            want = _brute_force_holders(games, played, leader)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)    # float32 out
        legal = torch.nonzero(games.legal_mask()[0])[:, 0]
        slot = int(legal[torch.randint(len(legal), (1,), generator=gen)])
        tiles, _ = games.hand_slots(games.current_player)
        played.append((int(games.current_player[0]), int(tiles[0, slot])))
        games = games.play(torch.tensor([slot]))


def test_holder_marginals_of_an_impossible_row_are_zero():
    """A row no deal fits (a hand of one tile and nothing played: 27 tiles hidden for 21
    places) gives zeros, not NaN."""
    seen = torch.zeros(1, 5 * 28)
    seen[0, 4 * 28 + 3] = 1
    out = holder_marginals(seen, torch.zeros(1, 32), torch.zeros(1, dtype=torch.int64),
                           torch.as_tensor(FOLLOWS))
    assert out.shape == (1, 84) and torch.equal(out, torch.zeros(1, 84))


def test_seen_tiles_reach_the_hand_slots_without_attention(records):
    """Attention silenced (output projections zero), a hand slot's μ sees the plays only
    through the seen-tiles summary: giving the last play to another player changes μ with
    the summary and changes nothing without it. Configs without the key load as 0."""
    assert sum(p.numel() for p in random_model(6, seen_tiles=2).seen_embed.parameters()) == (
        (5 * 28 + 4 * 8) * TINY_ARCH["d_model"])
    assert sum(p.numel() for p in random_model(6, seen_tiles=3).seen_embed.parameters()) == (
        (5 * 28 + 4 * 8 + 3 * 28) * TINY_ARCH["d_model"])
    model = random_model(6, seen_tiles=1)
    assert sum(p.numel() for p in model.seen_embed.parameters()) == 5 * 28 * TINY_ARCH["d_model"]
    assert len(random_model(6).seen_embed) == 0 and build_model(TINY_ARCH).seen_tiles == 0
    r = int(torch.nonzero(records["transcript_lengths"] >= 14)[0])
    tokens = records["transcript_tokens"][r:r + 1].long().repeat(2, 1, 1)
    lengths = records["transcript_lengths"][r:r + 1].repeat(2)
    last = int(lengths[0]) - 1
    tokens[1, last, 4] = (tokens[0, last, 4] + 1) % 4       # another player played it
    with torch.no_grad():
        for layer in model.layers:
            layer.proj.weight.zero_()
            layer.proj.bias.zero_()
        mu = model(tokens, lengths)[0]
        assert not torch.allclose(mu[0], mu[1])
        model.seen_embed[0].weight.zero_()
        mu = model(tokens, lengths)[0]
        assert torch.equal(mu[0], mu[1])


def test_length_groups_partition_the_rows_by_length():
    lengths = torch.tensor([20, 8, 29, 8, 15, 20, 11])
    groups = length_groups(lengths, 3)
    assert sorted(torch.cat(groups).tolist()) == list(range(7))
    assert [lengths[g].tolist() for g in groups] == [[8, 8, 11], [15, 20], [20, 29]]
    assert len(length_groups(lengths, 50)) == 7 and len(length_groups(lengths[:0], 4)) == 0


@pytest.mark.parametrize("groups", [1, 3])
def test_forward_by_length_gives_the_loss_and_gradients_of_one_forward(records, groups):
    batch = prepare_rows(records)
    rows = torch.arange(0, len(records), max(1, len(records) // 48))
    batch = {k: v[rows] for k, v in batch.items()}
    assert len(set(batch["lengths"].tolist())) > groups
    grads = []
    for grouped in (False, True):
        model = random_model(2).train()
        if grouped:
            mu, log_var = forward_by_length(model, batch["tokens"], batch["lengths"], groups)
        else:
            mu, log_var = model(batch["tokens"].long(), batch["lengths"])
        loss = stage2_loss(mu, log_var, batch, "nll", centered_weight=1.0)
        loss.backward()
        grads.append((float(loss.detach()), mu.detach(), [p.grad.clone() for p in model.parameters()]))
    (l0, mu0, g0), (l1, mu1, g1) = grads
    assert l1 == pytest.approx(l0, rel=1e-5)
    torch.testing.assert_close(mu1, mu0, rtol=0, atol=1e-4)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-6)


# ---------------------------------------------------------------- weights files
def test_weights_round_trip(tmp_path, records):
    model = random_model(3)
    path = tmp_path / "w.safetensors"
    save_stage2(path, model, TINY_ARCH, "abc", {"mse": 1.5}, {"steps": 7})
    loaded, meta = load_stage2_with_meta(path)
    tokens, lengths = records["transcript_tokens"][:5], records["transcript_lengths"][:5]
    with torch.no_grad():
        assert torch.equal(loaded(tokens, lengths)[0], model(tokens, lengths)[0])
    assert meta["config"] == TINY_ARCH and meta["data_hash"] == "abc"
    assert meta["metrics"] == {"mse": 1.5} and meta["train"] == {"steps": 7}
    assert not load_stage2(path).training


def _bad_files(tmp_path):
    from safetensors.torch import save

    model = random_model()
    good = tmp_path / "good.safetensors"
    save_stage2(good, model, TINY_ARCH)
    blob = good.read_bytes()
    files = {}
    files["truncated"] = tmp_path / "truncated.safetensors"
    files["truncated"].write_bytes(blob[:len(blob) // 2])
    files["pickle"] = tmp_path / "pickle.pt"
    torch.save(model.state_dict(), files["pickle"])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    meta = {"format": "eqfast-stage2", "format_version": "1", "tokenizer_version": "transcript_v1",
            "config": json.dumps(TINY_ARCH), "data_hash": "", "metrics": "{}", "train": "{}"}
    nonfinite = dict(state)
    nonfinite["head.weight"] = torch.full_like(state["head.weight"], float("nan"))
    files["nonfinite"] = tmp_path / "nan.safetensors"
    files["nonfinite"].write_bytes(save(nonfinite, metadata=meta))
    files["mismatch"] = tmp_path / "mismatch.safetensors"
    files["mismatch"].write_bytes(save(state, metadata={**meta, "config": json.dumps(
        {**TINY_ARCH, "d_model": 64})}))
    files["missing_tensor"] = tmp_path / "missing.safetensors"
    files["missing_tensor"].write_bytes(save({k: v for k, v in state.items() if k != "norm.bias"},
                                             metadata=meta))
    files["bad_config"] = tmp_path / "config.safetensors"
    files["bad_config"].write_bytes(save(state, metadata={**meta, "config": '{"d_model": -1}'}))
    files["version"] = tmp_path / "version.safetensors"
    files["version"].write_bytes(save(state, metadata={**meta, "format_version": "9"}))
    files["oracle"] = tmp_path / "oracle.safetensors"
    files["oracle"].write_bytes(save(state, metadata={**meta, "format": "eqfast-oracle"}))
    files["missing"] = tmp_path / "nothing.safetensors"
    files["directory"] = tmp_path
    return files


@pytest.mark.parametrize("case, needle", [
    ("truncated", "not a readable safetensors"), ("pickle", "not a readable safetensors"),
    ("nonfinite", "non-finite"), ("mismatch", "feature_embed.weight' is torch.float32[38, 32]"), ("missing_tensor", "norm.bias"),
    ("bad_config", "bad 'config'"), ("version", "format_version"),
    ("oracle", "oracle (Stage 1) weights"), ("missing", "does not exist"),
    ("directory", "is a directory")])
def test_bad_weights_files_name_the_file_and_the_problem(tmp_path, case, needle):
    path = _bad_files(tmp_path)[case]
    with pytest.raises(Stage2WeightsError) as e:
        load_stage2(path)
    assert str(path) in str(e.value) and needle in str(e.value), str(e.value)


# ---------------------------------------------------------------- data and loss
def test_prepare_rows_weights_and_label_variance(records):
    rows = prepare_rows(records, forced_weight=0.25)
    forced = records["legal_mask"].sum(1) == 1
    assert forced.any() and (~forced).any()
    assert torch.equal(rows["weight"], torch.where(forced, 0.25, 1.0))
    legal = records["legal_mask"]
    want = torch.where(legal & ~records["enumerated"][:, None],
                       records["e_q_var"] / records["ess"][:, None], torch.zeros(()))
    torch.testing.assert_close(rows["s2"], want)
    assert torch.isfinite(rows["q"]).all() and (rows["q"][~legal] == 0).all()


def test_loss_is_the_weighted_legal_mean():
    q = torch.tensor([[10.0, -4.0, 0.0], [42.0, 0.0, 0.0]])
    legal = torch.tensor([[True, True, False], [True, False, False]])
    batch = {"q": q, "legal": legal, "weight": torch.tensor([1.0, 0.1]),
             "s2": torch.zeros(2, 3)}
    mu = torch.tensor([[4.0, 2.0, 99.0], [0.0, 99.0, 99.0]])
    want = ((6 / 42) ** 2 + (6 / 42) ** 2 + 0.1 * 1.0) / 2.1
    assert float(stage2_loss(mu, torch.zeros_like(mu), batch)) == pytest.approx(want, rel=1e-6)
    # centred: row 0's errors -6 and +6 have mean 0; row 1 (forced) has no spread
    centered = 2 * (6 / 42) ** 2 / 2.1
    assert float(stage2_loss(mu, torch.zeros_like(mu), batch, centered_weight=0.5)) == \
        pytest.approx(want + 0.5 * centered, rel=1e-6)
    # nll: mse plus the Gaussian NLL with sigma^2 = 1 point^2 and mu detached
    log_var = torch.zeros_like(mu)
    v = 1 / 42 ** 2
    nll = (0.5 * (math.log(v) + (6 / 42) ** 2 / v) * 2 + 0.1 * 0.5 * (math.log(v) + 1 / v)) / 2.1
    got = stage2_loss(mu.requires_grad_(), log_var, batch, "nll")
    assert float(got.detach()) == pytest.approx(want + nll, rel=1e-5)
    got.backward()
    mse_grad = torch.autograd.grad(stage2_loss(mu, log_var, batch), mu)[0]
    torch.testing.assert_close(mu.grad, mse_grad)


def test_policy_term_is_the_hand_cross_entropy_and_weight_0_changes_nothing():
    """The auxiliary policy head's term: the w-weighted mean over rows of -log softmax over
    the legal slots at the slot played; weight 0 gives the loss without it, bit for bit."""
    q = torch.tensor([[10.0, -4.0, 0.0], [42.0, 0.0, 0.0]])
    legal = torch.tensor([[True, True, False], [True, True, True]])
    batch = {"q": q, "legal": legal, "weight": torch.tensor([1.0, 0.25]),
             "s2": torch.zeros(2, 3), "action": torch.tensor([1, 2])}
    mu = torch.tensor([[4.0, 2.0, 99.0], [0.0, 9.0, -3.0]])
    logits = torch.tensor([[0.5, -1.0, 7.0], [2.0, 0.0, 1.0]])
    ce0 = -(-1.0 - math.log(math.exp(0.5) + math.exp(-1.0)))                 # slot 2 illegal
    ce1 = -(1.0 - math.log(math.exp(2.0) + math.exp(0.0) + math.exp(1.0)))
    want = (1.0 * ce0 + 0.25 * ce1) / 1.25
    base = stage2_loss(mu, torch.zeros_like(mu), batch)
    with_policy = stage2_loss(mu, torch.zeros_like(mu), batch, policy_logits=logits,
                              policy_weight=0.3)
    assert float(with_policy - base) == pytest.approx(0.3 * want, rel=1e-5)
    for loss, cw in (("mse", 0.0), ("nll", 0.5)):
        plain = stage2_loss(mu, torch.zeros_like(mu), batch, loss, cw)
        zero = stage2_loss(mu, torch.zeros_like(mu), batch, loss, cw, policy_logits=logits,
                           policy_weight=0.0)
        assert torch.equal(plain, zero)


def test_a_model_without_the_policy_head_is_the_model_as_before(records):
    """No parameter of the head unless asked for; forward_policy's mu and log_var are
    forward's, its logits zeros without the head."""
    plain = random_model()
    assert not any("policy" in k for k in plain.state_dict())
    headed = random_model(policy_head=1)
    extra = set(headed.state_dict()) - set(plain.state_dict())
    assert extra == {"policy_head.0.weight", "policy_head.0.bias"}
    tokens, lengths = records["transcript_tokens"][:16], records["transcript_lengths"][:16]
    with torch.no_grad():
        mu, lv = plain(tokens, lengths)
        mu2, lv2, logits = plain.forward_policy(tokens, lengths)
        assert torch.equal(mu, mu2) and torch.equal(lv, lv2) and not logits.any()
        _, _, logits = headed.forward_policy(tokens, lengths)
        assert logits.shape == (16, 7) and logits.std() > 0


def test_training_with_the_policy_head_learns_the_moves_played(dataset, tmp_path, records):
    cfg = tiny_config(dataset, tmp_path / "run", steps=60, policy_weight=1.0,
                      arch={**TINY_ARCH, "policy_head": 1})
    train(cfg, log=quiet, progress=False)
    rows = prepare_rows(records.select(records["split"] == 0))
    torch.manual_seed(cfg.seed)
    before = build_model(cfg.arch).eval()
    after = load_stage2(tmp_path / "run" / "last.safetensors")
    with torch.no_grad():
        ce = [float(policy_cross_entropy(m.forward_policy(rows["tokens"], rows["lengths"])[2],
                                         rows)) for m in (before, after)]
        mu, _ = after(rows["tokens"], rows["lengths"])
        torch.testing.assert_close(script_model(after)(rows["tokens"], rows["lengths"])[0], mu)
    assert ce[1] < 0.9 * ce[0], ce
    meta = load_stage2_with_meta(tmp_path / "run" / "last.safetensors")[1]
    assert meta["config"]["policy_head"] == 1 and meta["train"]["policy_weight"] == 1.0
    with pytest.raises(ValueError, match="policy head"):
        train(tiny_config(dataset, tmp_path / "bad", policy_weight=1.0), log=quiet,
              progress=False)


# ---------------------------------------------------------------- the trainer
def test_training_lowers_the_loss(dataset, tmp_path, records):
    cfg = tiny_config(dataset, tmp_path / "run", steps=80, loss="nll")
    train(cfg, log=quiet, progress=False)
    rows = prepare_rows(records.select(records["split"] == 0))
    torch.manual_seed(cfg.seed)
    before = build_model(cfg.arch).eval()
    after = load_stage2(tmp_path / "run" / "last.safetensors")
    with torch.no_grad():
        loss_before = float(stage2_loss(*before(rows["tokens"], rows["lengths"]), rows))
        loss_after = float(stage2_loss(*after(rows["tokens"], rows["lengths"]), rows))
    assert loss_after < 0.7 * loss_before, (loss_before, loss_after)
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [20, 40, 60, 80]
    meta = load_stage2_with_meta(tmp_path / "run" / "best.safetensors")[1]
    card = meta["train"]["data_card"]
    assert card["splits"]["train"]["games"] + card["splits"]["val"]["games"] == 25
    assert card["n_samples"] == 8 and meta["data_hash"]


@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_resumed_run_equals_straight_run(dataset, tmp_path, ema):
    from safetensors.torch import load_file

    train(tiny_config(dataset, tmp_path / "straight", ema=ema), log=quiet, progress=False)
    train(tiny_config(dataset, tmp_path / "resumed", stop_at=20, ema=ema), log=quiet,
          progress=False)
    first = load_file(tmp_path / "resumed" / "checkpoint.safetensors")
    train(tiny_config(dataset, tmp_path / "resumed", ema=ema), log=quiet, progress=False)
    a = load_file(tmp_path / "straight" / "checkpoint.safetensors")
    b = load_file(tmp_path / "resumed" / "checkpoint.safetensors")
    assert a.keys() == b.keys() and any(k.startswith("optim.") for k in a)
    assert any(k.startswith("ema.") for k in a) == (ema > 0)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert not torch.equal(first["model.head.weight"], b["model.head.weight"])
    wa = load_file(tmp_path / "straight" / "last.safetensors")
    wb = load_file(tmp_path / "resumed" / "last.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_init_starts_from_the_weights_and_is_recorded(dataset, tmp_path):
    from safetensors.torch import load_file

    start = tmp_path / "start.safetensors"
    save_stage2(start, random_model(5), TINY_ARCH)
    # one step at a negligible learning rate leaves the start's weights (a random
    # initialization would be far from them)
    train(tiny_config(dataset, tmp_path / "run", init=str(start), stop_at=1, lr=1e-9),
          log=quiet, progress=False)
    first = load_file(tmp_path / "run" / "checkpoint.safetensors")
    for k, v in load_stage2(start).state_dict().items():
        torch.testing.assert_close(first[f"model.{k}"], v, rtol=0, atol=1e-6)
    train(tiny_config(dataset, tmp_path / "run", init=str(start), lr=1e-9), log=quiet,
          progress=False)
    meta = load_stage2_with_meta(tmp_path / "run" / "last.safetensors")[1]
    assert meta["train"]["init"]["path"] == str(start)
    assert len(meta["train"]["init"]["sha256"]) == 64
    with pytest.raises(ValueError, match="init"):            # another start for the same run
        train(tiny_config(dataset, tmp_path / "run", lr=1e-9), log=quiet, progress=False)
    with pytest.raises(ValueError, match="architecture"):
        train(tiny_config(dataset, tmp_path / "wide", init=str(start),
                          arch={**TINY_ARCH, "d_model": 64}), log=quiet, progress=False)


def test_init_grows_a_model_to_more_layers_and_seen_tiles(records):
    """grown(): the file's weights in a model with more layers and a higher seen-tiles
    level give the file's outputs exactly (the added layers are the identity, the added
    summary columns zero), and the added layers train (their input weights are random,
    not zero)."""
    from eqfast.stage2.train import grown

    small = random_model(3, seen_tiles=1)
    big = random_model(4, seen_tiles=2, n_layers=TINY_ARCH["n_layers"] + 2)
    big.load_state_dict(grown(small.state_dict(), big.state_dict()))
    rows = {k: v[:200] for k, v in prepare_rows(records).items()}
    with torch.no_grad():
        a = small(rows["tokens"], rows["lengths"])
        b = big(rows["tokens"], rows["lengths"])
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)
    top = f"layers.{TINY_ARCH['n_layers'] + 1}"
    state = big.state_dict()
    assert torch.all(state[f"{top}.proj.weight"] == 0) and torch.all(state[f"{top}.ff2.bias"] == 0)
    assert state[f"{top}.qkv.weight"].abs().sum() > 0
    # a gradient reaches the new layers' zero projections
    mu, _ = big(rows["tokens"], rows["lengths"])
    mu.pow(2).sum().backward()
    assert float(big.layers[-1].ff2.weight.grad.abs().sum()) > 0


def test_parse_tricks_reads_lists_and_ranges():
    assert parse_tricks("5,6") == (5, 6)
    assert parse_tricks("4-7") == (4, 5, 6, 7)
    assert parse_tricks("1, 5-6,6") == (1, 5, 6)
    for bad in ("", "8", "0", "3-2", "a", "1-"):
        with pytest.raises(ValueError, match="tricks"):
            parse_tricks(bad)


def test_own_targets_outside_keeps_labels_only_in_the_tricks(records):
    rows = prepare_rows(records, mc_weight=0.5)
    q, target = rows["q"].clone(), rows["target"].clone()
    mu = torch.randn(q.shape)
    own_targets_outside(rows, records["decision_idx"], (5, 6), mu)
    trick = records["decision_idx"] // 4 + 1
    inside = (trick == 5) | (trick == 6)
    assert 0 < int(inside.sum()) < len(inside)
    assert torch.equal(rows["q"][inside], q[inside])
    assert torch.equal(rows["target"][inside], target[inside])
    legal = rows["legal"][~inside]
    own = mu[~inside]
    for key in ("q", "target"):
        assert torch.equal(rows[key][~inside][legal], own[legal])
        assert torch.all(rows[key][~inside][~legal] == 0)
    assert torch.all(rows["s2"][~inside] == 0)
    assert torch.equal(rows["label_w"], inside.float())


def test_label_tricks_hold_the_init_values_elsewhere(dataset, tmp_path, records):
    """A run on labels at trick 6 only: outside trick 6 the target is the start model's
    own μ, so the loss there starts at 0 and the run's values stay near the start's, while
    at trick 6 they move towards the labels. Without --label-tricks the same run moves
    them everywhere."""
    start = tmp_path / "start.safetensors"
    save_stage2(start, random_model(7), TINY_ARCH)
    kw = dict(init=str(start), steps=60, lr=3e-3, warmup=0, loss="nll")
    train(tiny_config(dataset, tmp_path / "late", label_tricks=[6], **kw), log=quiet,
          progress=False)
    train(tiny_config(dataset, tmp_path / "all", **kw), log=quiet, progress=False)
    meta = load_stage2_with_meta(tmp_path / "late" / "last.safetensors")[1]
    assert meta["train"]["label_tricks"] == [6]
    rows = prepare_rows(records)
    trick = records["decision_idx"] // 4 + 1
    legal = rows["legal"]
    with torch.no_grad():
        mu0 = load_stage2(start)(rows["tokens"], rows["lengths"])[0]
        late = load_stage2(tmp_path / "late" / "last.safetensors")(rows["tokens"], rows["lengths"])[0]
        full = load_stage2(tmp_path / "all" / "last.safetensors")(rows["tokens"], rows["lengths"])[0]

    def err(mu, target, where):
        m = legal & where[:, None]
        return float(((mu - target)[m] ** 2).mean())

    six, rest = trick == 6, trick != 6
    # at trick 6 both runs learn the labels
    assert err(late, rows["q"], six) < 0.7 * err(mu0, rows["q"], six)
    # elsewhere the label-tricks run stays with the start, the plain run leaves it
    assert err(late, mu0, rest) < 0.25 * err(full, mu0, rest)
    with pytest.raises(ValueError, match="label_tricks needs init"):
        train(tiny_config(dataset, tmp_path / "x", label_tricks=[6]), log=quiet,
              progress=False)
    with pytest.raises(ValueError, match="label_tricks"):   # a resume with other tricks
        train(tiny_config(dataset, tmp_path / "late", label_tricks=[5, 6], **kw), log=quiet,
              progress=False)


def test_tricks_trains_and_validates_on_those_decisions_only(dataset, tmp_path, records):
    """--tricks 5,6: the run's train and val rows are the decisions of tricks 5 and 6, in
    order (rows_of_tricks), and its weights record them; other tricks are refused."""
    rows = prepare_rows(records)
    trick = records["decision_idx"] // 4 + 1
    part = rows_of_tricks(rows, records["decision_idx"], (5, 6))
    inside = (trick == 5) | (trick == 6)
    assert 0 < int(inside.sum()) < len(inside)
    for k in rows:
        assert torch.equal(part[k], rows[k][inside]), k
    lines = []
    train(tiny_config(dataset, tmp_path / "late", tricks=[5, 6], steps=20), log=lambda *a, **k:
          lines.append(" ".join(map(str, a))), progress=False)
    train_records = load_split(str(dataset), "train")[0]
    want = int(torch.isin(train_records["decision_idx"] // 4 + 1, torch.tensor([5, 6])).sum())
    assert any(f"; {want} train records" in line for line in lines), lines
    assert load_stage2_with_meta(tmp_path / "late" / "last.safetensors")[1]["train"]["tricks"] \
        == [5, 6]
    for bad in ([], [0], [8]):
        with pytest.raises(ValueError, match="tricks must be"):
            train(tiny_config(dataset, tmp_path / "x", tricks=bad), log=quiet, progress=False)


def test_min_worlds_keeps_the_decisions_labelled_from_enough_worlds(dataset, dataset2,
                                                                   tmp_path):
    """--min-worlds 5 on the union of an 8-world run and a 4-world run: the 4-world run's
    decisions are left out unless every consistent world was enumerated; the count in the
    log is that of well_labelled, the weights record the setting, and 0 is refused."""
    from eqfast.stage2.data import well_labelled

    train_records = load_split([str(dataset), str(dataset2)], "train")[0]
    keep = well_labelled(train_records, 5)
    n = train_records["n_worlds"]
    assert torch.equal(keep, train_records["enumerated"] | (n >= 5))
    four = (n == 4) & ~train_records["enumerated"]
    assert int(four.sum()) > 0 and not keep[four].any() and keep[n == 8].all()
    lines = []
    train(tiny_config(dataset, tmp_path / "run", data=[str(dataset), str(dataset2)],
                      min_worlds=5, steps=20),
          log=lambda *a, **k: lines.append(" ".join(map(str, a))), progress=False)
    assert any(f": {int(keep.sum())} of {len(keep)} train decisions" in line
               for line in lines), lines
    assert any(f"; {int(keep.sum())} train records" in line for line in lines), lines
    meta = load_stage2_with_meta(tmp_path / "run" / "last.safetensors")[1]
    assert meta["train"]["min_worlds"] == 5
    with pytest.raises(ValueError, match="min_worlds must be"):
        train(tiny_config(dataset, tmp_path / "x", min_worlds=0), log=quiet, progress=False)


def test_init_from_an_averaged_file_says_so(dataset, tmp_path):
    from eqfast.stage2.average import average_stage2

    for seed in (1, 2):
        save_stage2(tmp_path / f"m{seed}.safetensors", random_model(seed), TINY_ARCH)
    soup = tmp_path / "soup.safetensors"
    average_stage2([tmp_path / "m1.safetensors", tmp_path / "m2.safetensors"], soup)
    lines = []
    train(tiny_config(dataset, tmp_path / "run", init=str(soup), stop_at=1, lr=1e-9),
          log=lambda *a, **k: lines.append(" ".join(map(str, a))), progress=False)
    assert any("(sha256 " in line and "the mean of 2 models)" in line for line in lines)
    from safetensors import safe_open
    with safe_open(tmp_path / "run" / "checkpoint.safetensors", "pt") as f:
        state = json.loads(f.metadata()["state"])
    assert state["init"]["average_of"] == 2 and state["init"]["steps"] is None


@pytest.mark.parametrize("level", [0, 2])
def test_init_from_a_lower_seen_tiles_level_starts_at_the_same_outputs(dataset, records,
                                                                       tmp_path, level):
    """A level-3 run from level-0 or level-2 weights: the added summary columns start at
    zero, so the model's outputs are the file's exactly; the other way is refused."""
    from eqfast.stage2.train import init_weights

    start = tmp_path / "start.safetensors"
    low = random_model(7, seen_tiles=level)
    save_stage2(start, low, {**TINY_ARCH, "seen_tiles": level})
    cfg = tiny_config(dataset, tmp_path / "run", init=str(start),
                      arch={**TINY_ARCH, "seen_tiles": 3})
    high = build_model(cfg.arch).eval()
    init_weights(high, cfg)
    tokens, lengths = records["transcript_tokens"][:40].long(), records["transcript_lengths"][:40]
    with torch.no_grad():
        want, got = low(tokens, lengths), high(tokens, lengths)
        assert high.seen_embed[0].weight[:, -3 * 28:].abs().sum() == 0
    # points, from a wider matmul: the same up to float rounding
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-4)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-4)
    top = tmp_path / "top.safetensors"
    save_stage2(top, high, cfg.arch)
    with pytest.raises(ValueError, match="seen-tiles"):
        init_weights(build_model({**TINY_ARCH, "seen_tiles": 2}),
                     tiny_config(dataset, tmp_path / "r2", init=str(top),
                                 arch={**TINY_ARCH, "seen_tiles": 2}))


def test_resume_with_other_settings_is_refused(dataset, tmp_path):
    train(tiny_config(dataset, tmp_path / "run", stop_at=20), log=quiet, progress=False)
    with pytest.raises(ValueError, match="lr"):
        train(tiny_config(dataset, tmp_path / "run", lr=1e-2), log=quiet, progress=False)
    with pytest.raises(ValueError, match="precision"):
        train(tiny_config(dataset, tmp_path / "run", precision="bf16"), log=quiet,
              progress=False)
    with pytest.raises(ValueError, match="ema"):
        train(tiny_config(dataset, tmp_path / "run", ema=0.99), log=quiet, progress=False)


def test_ema_is_the_moving_average_of_the_steps_and_leaves_training_alone(dataset, tmp_path):
    """Three steps from known weights, checkpointed after each: the saved average is
    a_t = d_t a_(t-1) + (1 - d_t) w_t, d_t = min(d, (1 + t) / (10 + t)), a_0 = w_0, and the
    trained weights are those of the same run without it."""
    from safetensors.torch import load_file

    start = tmp_path / "start.safetensors"
    save_stage2(start, random_model(3), TINY_ARCH)
    kw = dict(init=str(start), steps=3, eval_every=3, ckpt_every=1, warmup=0)
    weights = [{k: v.double() for k, v in load_stage2(start).state_dict().items()}]
    for stop in (1, 2, None):
        train(tiny_config(dataset, tmp_path / "ema", ema=0.2, stop_at=stop, **kw), log=quiet,
              progress=False)
        ckpt = load_file(tmp_path / "ema" / "checkpoint.safetensors")
        weights.append({k[6:]: v.double() for k, v in ckpt.items() if k.startswith("model.")})
    want = dict(weights[0])
    for t in (1, 2, 3):
        d = min(0.2, (1 + t) / (10 + t))
        want = {k: d * want[k] + (1 - d) * weights[t][k] for k in want}
    got = {k[4:]: v for k, v in ckpt.items() if k.startswith("ema.")}
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k].double(), want[k], rtol=0, atol=1e-6)
    assert any(not torch.equal(got[k].double(), weights[3][k]) for k in want)
    last = load_file(tmp_path / "ema" / "last.safetensors")
    assert all(torch.equal(last[k], got[k]) for k in last)
    assert load_stage2_with_meta(tmp_path / "ema" / "last.safetensors")[1]["train"]["ema"] == 0.2
    train(tiny_config(dataset, tmp_path / "plain", **kw), log=quiet, progress=False)
    plain = load_file(tmp_path / "plain" / "checkpoint.safetensors")
    assert all(torch.equal(plain[k], ckpt[k]) for k in plain)


def test_bf16_training_moves_the_weights_and_records_its_precision(dataset, tmp_path):
    from safetensors.torch import load_file

    train(tiny_config(dataset, tmp_path / "fp32"), log=quiet, progress=False)
    m = train(tiny_config(dataset, tmp_path / "bf16", precision="bf16"), log=quiet,
              progress=False)
    assert math.isfinite(m["loss"])
    a = load_file(tmp_path / "fp32" / "last.safetensors")
    b = load_file(tmp_path / "bf16" / "last.safetensors")
    # the same seed and batches: bf16 rounding alone parts the two runs, and its weights
    # stay fp32 (autocast casts copies)
    assert all(b[k].dtype == a[k].dtype for k in a)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    meta = load_stage2_with_meta(tmp_path / "bf16" / "last.safetensors")[1]
    assert meta["train"]["precision"] == "bf16"


@pytest.mark.parametrize("flags, needle", [
    (["--forced-weight", "2"], "--forced-weight"), (["--heads", "5"], "--heads"),
    (["--loss", "nll", "--no-var-head"], "--no-var-head"), (["--steps", "0"], "--steps"),
    (["--centered-weight", "-1"], "--centered-weight"),
    (["--device", "tpu"], "--device"), (["--init", "/no/such.safetensors"], "--init"),
    (["--length-groups", "0"], "--length-groups"), (["--policy-weight", "-1"], "--policy-weight"),
    (["--policy-weight", "nan"], "--policy-weight"), (["--ema", "1"], "--ema"),
    (["--ema", "-0.5"], "--ema"), (["--label-tricks", "5,6"], "--label-tricks needs --init"),
    (["--label-tricks", "0-3", "--init", "eqfast/models/stage2.safetensors"], "outside 1..7"),
    (["--label-tricks", "6-5", "--init", "eqfast/models/stage2.safetensors"], "empty range"),
    (["--label-tricks", "late", "--init", "eqfast/models/stage2.safetensors"],
     "not a trick number"), (["--tricks", "0-3"], "--tricks"), (["--tricks", "x"], "--tricks"),
    (["--min-worlds", "0"], "--min-worlds")])
def test_train_cli_bad_flags_exit_2(dataset, tmp_path, capsys, flags, needle):
    status = train_stage2.main(["--data", str(dataset), "--run", str(tmp_path / "r"), *flags])
    assert status == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_train_cli_bad_data_exit_2(tmp_path, capsys):
    assert train_stage2.main(["--data", str(tmp_path / "none"), "--run", str(tmp_path / "r")]) == 2
    assert "--data" in capsys.readouterr().err


@pytest.fixture(scope="module")
def dataset2(tmp_path_factory):
    """A second, smaller run on other seeds (the union of runs)."""
    out = tmp_path_factory.mktemp("stage2b") / "data"
    assert generate.main(["--out", str(out), "--games", "20", "--games-per-batch", "20",
                          "--seed-start", "5000", "--n-samples", "4", "--threads", "1",
                          "--quiet", "--control-variate", "none"]) == 0
    return out


def test_union_of_two_runs_reads_both_and_is_recorded(dataset, dataset2, tmp_path):
    for split in ("train", "val"):
        a, b = load_split(dataset, split)[0], load_split(dataset2, split)[0]
        both, metas = load_split([dataset, dataset2], split)
        assert len(both) == len(a) + len(b) and len(metas) == 2
        assert set(both["seed"].tolist()) == set(a["seed"].tolist()) | set(b["seed"].tolist())
        key = both["game_idx"] * 64 + both["decision_idx"]
        assert bool((key[1:] > key[:-1]).all())                  # sorted by (game, decision)
    h = {data_hash(dataset), data_hash(dataset2), data_hash([dataset, dataset2]),
         data_hash([dataset2, dataset])}
    assert len(h) == 4
    train(tiny_config(dataset, tmp_path / "run", data=[str(dataset), str(dataset2)], steps=2,
                      eval_every=2),
          log=quiet, progress=False)
    card = load_stage2_with_meta(tmp_path / "run" / "last.safetensors")[1]["train"]["data_card"]
    assert card["data"] == [str(dataset), str(dataset2)]
    assert card["splits"]["train"]["games"] + card["splits"]["val"]["games"] <= N_GAMES + 20
    assert card["seed_max"] >= 5000 and card["seed_min"] < 5000
    assert [o["n_samples"] for o in card["oracles"]] == [8, 4]


def test_union_with_a_game_seed_twice_is_refused(dataset, tmp_path, capsys):
    again = tmp_path / "again"
    again.symlink_to(dataset, target_is_directory=True)
    with pytest.raises(ShardError, match="both hold game seed"):
        load_split([dataset, again], "train")
    status = train_stage2.main(["--data", str(dataset), "--data", str(dataset),
                                "--run", str(tmp_path / "r")])
    assert status == 2 and "twice" in capsys.readouterr().err
    status = train_stage2.main(["--data", str(dataset), "--data", str(tmp_path / "none"),
                                "--run", str(tmp_path / "r")])
    assert status == 2 and "none" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- evaluation
def test_eval_cli_json(dataset, tmp_path, capsys):
    path = tmp_path / "w.safetensors"
    save_stage2(path, random_model(), TINY_ARCH)
    status = eval_stage2.main(["--weights", str(path), "--data", str(dataset), "--split", "val",
                               "--json", "--speed-batch", "16"])
    assert status == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("records", "legal_moves", "mse", "mae", "agreement", "regret", "regret_uniform",
                "within_1sigma", "within_2sigma", "mean_z2", "decisions_per_s_eager",
                "decisions_per_s_torchscript"):
        assert isinstance(m[key], (int, float)) and math.isfinite(m[key]), key
    assert 0 <= m["agreement"] <= 1 and m["regret"] >= 0 and m["split"] == "val"
    assert 0 <= m["within_1sigma"] <= m["within_2sigma"] <= 1
    # where the regret is: the groups partition the decisions and their regret
    for key, n in (("by_trick", 7), ("by_place", 4)):
        groups = m[key]
        assert [g["group"] for g in groups] == list(range(n))
        assert sum(g["decisions_multi"] for g in groups) == m["decisions_multi"]
        assert sum(g["decisions_multi"] * g.get("regret", 0) for g in groups) == pytest.approx(
            m["decisions_multi"] * m["regret"], rel=1e-4, abs=1e-6)
        if m["regret"] > 0:
            assert sum(g.get("regret_share", 0) for g in groups) == pytest.approx(1, rel=1e-5)
    assert m["by_trick"][6]["decisions_multi"] == 0          # the last trick: one tile each


@pytest.mark.parametrize("case", ["missing_weights", "oracle_weights", "no_data", "max_records"])
def test_eval_cli_bad_input_exit_2(dataset, tmp_path, capsys, case):
    from eqfast.oracle.weights import DEFAULT_MODEL

    path = tmp_path / "w.safetensors"
    save_stage2(path, random_model(), TINY_ARCH)
    args, needle = {
        "missing_weights": (["--weights", str(tmp_path / "none"), "--data", str(dataset)],
                            f"{tmp_path / 'none'} does not exist"),
        "oracle_weights": (["--weights", str(DEFAULT_MODEL), "--data", str(dataset)],
                           "oracle (Stage 1) weights"),
        "no_data": (["--weights", str(path), "--data", str(tmp_path / "none")],
                    f"--data {tmp_path / 'none'}: no such directory"),
        "max_records": (["--weights", str(path), "--data", str(dataset), "--max-records", "0"],
                        "--max-records must be >= 1, got 0"),
    }[case]
    assert eval_stage2.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("eqfast-eval-stage2: ") and needle in err, err


# ---------------------------------------------------------------- the policy adapter
def _random_states(n_games=24, seed=5):
    """Games 100.. played with random legal moves to 0..27 plays (one state per game)."""
    hands, decl, leader = setup_games(range(100, 100 + n_games))
    games = BatchedGames.new(hands, decl, leader)
    rng = torch.Generator().manual_seed(seed)
    stop = torch.randint(0, 28, (n_games,), generator=rng)
    for k in range(28):
        legal = games.legal_mask().float()
        slot = torch.multinomial(legal + 1e-9 * (legal.sum(1, keepdim=True) == 0), 1,
                                 generator=rng)[:, 0]
        moved = games.play(slot)
        keep = (stop <= k)
        games = BatchedGames(**{f: torch.where(keep.view(-1, *[1] * (getattr(games, f).dim() - 1)),
                                               getattr(games, f), getattr(moved, f))
                                for f in games.__dataclass_fields__})
    return games


def _swap_hidden(games, seed=0):
    """The same positions with the unplayed tiles of the three other seats dealt again among
    them (same counts, no tile of a suit a seat has shown void in)."""
    T = torch_tables("cpu")
    rng = np.random.default_rng(seed)
    hands, remaining = games.hands.clone(), games.remaining.clone()
    changed = 0
    for g in range(games.batch_size):
        actor = int(games.current_player[g])
        others = [s for s in range(4) if s != actor]
        played, hidden = {}, {}
        for s in others:
            bits = [(int(remaining[g, s]) >> i) & 1 for i in range(7)]
            hidden[s] = [int(hands[g, s, i]) for i in range(7) if bits[i]]
            played[s] = [int(hands[g, s, i]) for i in range(7) if not bits[i]]
        pool = sum((hidden[s] for s in others), [])
        decl = int(games.decl[g])
        for _ in range(200):
            rng.shuffle(pool)
            new, at = {}, 0
            for s in others:
                new[s], at = pool[at:at + len(hidden[s])], at + len(hidden[s])
            void_ok = all(not bool(T["FOLLOWS"][decl, suit, t])
                          for s in others for suit in range(8)
                          if (int(games.voids[g, s]) >> suit) & 1 for t in new[s])
            if void_ok and any(sorted(new[s]) != sorted(hidden[s]) for s in others):
                break
        else:
            continue
        changed += 1
        for s in others:
            hand = sorted(played[s] + new[s])
            hands[g, s] = torch.tensor(hand)
            remaining[g, s] = sum(1 << hand.index(t) for t in new[s])
    return replace(games, hands=hands, remaining=remaining), changed


def test_policy_uses_public_information_only():
    model = random_model(7)
    games = _random_states()
    swapped, changed = _swap_hidden(games)
    assert changed >= 10
    assert not torch.equal(games.hands, swapped.hands)
    for a, b in zip(transcript_tokens(games), transcript_tokens(swapped)):
        assert torch.equal(a, b)
    assert torch.equal(current_legal(games), current_legal(swapped))
    slots = stage2_slots(model, games)
    assert torch.equal(slots, stage2_slots(model, swapped))
    assert torch.equal(slots, stage2_slots(script_model(model), games))
    live = ~games.is_over
    assert games.legal_mask()[torch.arange(games.batch_size), slots][live].all()


def test_policy_on_recorded_states_plays_the_argmax_of_mu(records):
    """Replay two recorded games: the state's tokens are the record's, and the adapter plays
    the initial-hand slot of the current-hand slot with the largest μ among the legal ones."""
    model = random_model(11)
    seen_reordered = 0
    for seed in (0, 5):
        game = records.select(records["seed"] == seed).sort_by_game()
        hands, decl, leader = setup_games([seed])
        games = BatchedGames.new(hands, decl, leader)
        for r in range(len(game)):
            tokens, lengths = transcript_tokens(games)
            assert torch.equal(tokens, game["transcript_tokens"][r:r + 1])
            assert torch.equal(current_legal(games), game["legal_mask"][r:r + 1])
            with torch.no_grad():
                mu = model(game["transcript_tokens"][r:r + 1], game["transcript_lengths"][r:r + 1])[0]
            best = torch.where(game["legal_mask"][r:r + 1], mu, float("-inf")).argmax(1)
            order = current_hand_order(games)
            slot = stage2_slots(model, games)
            assert int(slot[0]) == int(order[0, best[0]])
            seen_reordered += int(order[0, best[0]]) != int(best[0])
            # the tile the adapter plays is the one of hand token 1 + best
            hi, lo = (int(x) for x in game["transcript_tokens"][r, 1 + int(best[0]), :2])
            actor = int(games.current_player[0])
            assert int(games.hands[0, actor, slot[0]]) == hi * (hi + 1) // 2 + lo
            taken = order[0, game["action_taken"][r]]
            games = games.play(taken.view(1))
        assert bool(games.is_over[0])
    assert seen_reordered > 0


def test_a_bare_name_finds_a_model_kept_under_eqfast_models(tmp_path, monkeypatch):
    """`stage2:NAME` is eqfast/models/NAME.safetensors from any directory (the league's
    `stage2:stage2_eq`); a path, or a name with no such file, is taken as given."""
    from eqfast.paths import DEFAULT_STAGE2, MODELS, stage2_weights
    from eqfast.play.policies import policy_from_spec

    monkeypatch.chdir(tmp_path)
    assert stage2_weights(None) == stage2_weights("") == DEFAULT_STAGE2
    assert stage2_weights("stage2_eq") == MODELS / "stage2_eq.safetensors"
    assert stage2_weights("nothing_here").name == "nothing_here"
    assert str(stage2_weights("runs/x/best.safetensors")) == "runs/x/best.safetensors"
    assert stage2_weights(tmp_path / "stage2_eq") == tmp_path / "stage2_eq"   # a Path: as given
    player = policy_from_spec("stage2:stage2_eq")
    assert player.name == "stage2:stage2_eq"
    kept = load_stage2(MODELS / "stage2_eq.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(player.model.state_dict().values(),
                                                  kept.state_dict().values()))
    with pytest.raises(ValueError, match="nothing_here"):
        policy_from_spec("stage2:nothing_here")


def test_shipped_model_loads_and_beats_a_random_legal_move(records):
    """eqfast/models/stage2.safetensors: at most 32 MiB (two belief models the size of the
    accurate oracle, 29.1 MB), with its data card and test figures, and on this test's own
    games its choices lose less E[Q] than a uniformly random legal move."""
    from eqfast.stage2.evaluate import metrics, predict
    from eqfast.stage2.weights import DEFAULT_STAGE2

    assert DEFAULT_STAGE2.stat().st_size < 32 << 20
    model, meta = load_stage2_with_meta()
    card = meta["train"]["data_card"]
    assert card["splits"]["train"]["games"] > 0 and card["n_samples"] > 0
    assert 0 < meta["metrics"]["test"]["regret"] < meta["metrics"]["test"]["regret_uniform"]
    rows = prepare_rows(records)
    mu, log_var = predict(model, rows["tokens"], rows["lengths"])
    m = metrics(mu, log_var, rows)
    assert m["regret"] < 0.7 * m["regret_uniform"], m
