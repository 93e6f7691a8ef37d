"""The belief model (eqfast/stage2/belief.py): its inputs are the true position's oracle
codes where the actor knows them and the exact holder chances where it does not; its first
layer is the oracle's expected first layer over every consistent deal; it loads, trains,
resumes and plays through the Stage 2 tools."""
from __future__ import annotations

import itertools

import pytest
import torch

from eqfast.cli import train_stage2
from eqfast.engine.games import setup_games
from eqfast.engine.public import hidden_info
from eqfast.engine.transcript import transcript_tokens
from eqfast.engine.worlds import build_oracle_batch, true_world
from eqfast.oracle.network import build_network
from eqfast.oracle.tokenizer import tokenize
from eqfast.oracle.weights import load_network, save_weights
from eqfast.paths import DEFAULT_MODEL
from eqfast.rules.batched import BatchedGames
from eqfast.rules.state import GameState
from eqfast.stage2.belief import BeliefModel, init_from_oracle
from eqfast.stage2.model import build_model, script_model, trim_tokens
from eqfast.stage2.policy import stage2_slots
from eqfast.stage2.weights import Stage2WeightsError, load_stage2_with_meta, save_stage2


def oracle_belief() -> BeliefModel:
    model = BeliefModel(var_head=1)
    init_from_oracle(model, DEFAULT_MODEL)
    return model.eval()


def random_game(seed: int):
    """(games after each decision 0..27 of a game of random legal moves, the plays as
    (absolute seat, tile id), the leader of trick 1)."""
    gen = torch.Generator().manual_seed(seed)
    games = BatchedGames.new(*setup_games([seed]))
    leader = int(games.leader[0])
    states, played = [], []
    for _ in range(28):
        states.append(games)
        legal = torch.nonzero(games.legal_mask()[0])[:, 0]
        slot = int(legal[torch.randint(len(legal), (1,), generator=gen)])
        tiles, _ = games.hand_slots(games.current_player)
        played.append((int(games.current_player[0]), int(tiles[0, slot])))
        games = games.play(torch.tensor([slot]))
    return states, played, leader


def true_codes(games: BatchedGames) -> torch.Tensor:
    """The oracle tokenizer's codes [G, 28] of the real deal's position."""
    info = hidden_info(games)
    b = build_oracle_batch(games, info, true_world(games, info))
    return tokenize(b.hands, b.remaining, b.decl, b.trick, b.actor)


@pytest.mark.parametrize("seed", [4, 19])
def test_known_tiles_carry_the_true_codes_and_hidden_ones_their_chances(seed):
    """At every decision of a random game: each tile the actor can place has the status
    of the real position's oracle code with weight 1 (then 0, 0); each hidden tile has
    statuses 1, 2, 3 with weights summing to 1, the real holder's above 0; the hand tiles
    are the hand tokens' tiles."""
    model = oracle_belief()
    states, _, _ = random_game(seed)
    for k, games in enumerate(states):
        tokens, lengths = transcript_tokens(games)
        decl, status, weight, hand = model.inputs(tokens.long(), lengths)
        codes = true_codes(games)[0]
        want_status = codes % 11
        assert int(decl[0]) == int(games.decl[0])
        assert torch.equal(codes // 11, decl[0] * 28 + torch.arange(28))
        info = hidden_info(games)
        hidden = torch.zeros(28, dtype=torch.bool)
        hidden[info.pool[0, :int(info.n_pool[0])]] = True
        for t in range(28):
            if hidden[t]:
                assert torch.equal(status[0, t], torch.tensor([1, 2, 3]))
                assert float(weight[0, t].sum()) == pytest.approx(1.0, abs=1e-6)
                assert float(weight[0, t, int(want_status[t]) - 1]) > 0, (k, t)
            else:
                assert int(status[0, t, 0]) == int(want_status[t]), (k, t)
                assert weight[0, t].tolist() == [1.0, 0.0, 0.0]
        n = int((tokens[0, 1:8, 7] == 1).sum())
        tiles, in_hand = games.hand_slots(games.current_player)
        assert sorted(hand[0, :n].tolist()) == sorted(tiles[0][in_hand[0]].tolist())
    assert k == 27


def world_codes(played, leader, decl, held_by, k):
    """Codes [28] of the position after the first k plays when the tiles not yet played
    lie as `held_by` (seat -> tiles), or None when that deal makes some play illegal."""
    hands = [[t for p, t in played[:k] if p == s] for s in range(4)]
    for s in range(4):
        hands[s] = sorted(hands[s] + held_by[s])
    state = GameState.new(hands, decl, leader)
    for _, t in played[:k]:
        if t not in state.legal_moves():
            return None
        state = state.play(t)
    games = BatchedGames.new(torch.tensor([hands]).numpy(), [decl], [leader])
    for _, t in played[:k]:
        games = games.play_tile(torch.tensor([t]))
    return true_codes(games)[0]


def test_first_layer_is_the_oracles_expected_first_layer_over_every_consistent_deal():
    """Late in a random game (up to 1,680 deals), the belief model's first layer equals
    the mean, over every split of the hidden tiles whose deal makes each play so far
    legal, of the oracle network's first layer on that deal's position, counted here
    from the deals themselves (linearity of the embedding sum: the claim of belief.py)."""
    model = oracle_belief()
    network, _ = load_network(DEFAULT_MODEL)
    states, played, leader = random_game(11)
    checked = 0
    for k in (17, 21, 22, 25):
        games = states[k]
        tokens, lengths = transcript_tokens(games)
        with torch.no_grad():
            got = model.first_layer(tokens.long(), lengths)[0][0].double()
        actor, decl = int(games.current_player[0]), int(games.decl[0])
        tiles, in_hand = games.hand_slots(torch.arange(4))
        held = {s: tiles[s][in_hand[s]].tolist() for s in range(4)}
        others = [s for s in range(4) if s != actor]
        pool = sorted(t for s in others for t in held[s])
        owners = [s for s in others for _ in held[s]]
        rows = []
        for split in set(itertools.permutations(owners)):
            held_by = {s: ([] if s != actor else held[actor]) for s in range(4)}
            for t, s in zip(pool, split):
                held_by[s] = held_by[s] + [t]
            codes = world_codes(played, leader, decl, held_by, k)
            if codes is not None:
                rows.append(codes)
        codes = torch.stack(rows)
        with torch.no_grad():
            h = (network.embed(codes) + network.bias
                 + network.role_embed(network.tile_roles(codes)))
        torch.testing.assert_close(got, h.double().mean(0), rtol=0, atol=2e-5)
        checked += len(rows)
    assert checked > 20


def test_padding_trimming_and_torchscript_change_nothing():
    model = oracle_belief()
    states, _, _ = random_game(2)
    tokens, lengths = zip(*(transcript_tokens(g) for g in states))
    tokens, lengths = torch.cat(tokens).long(), torch.cat(lengths)
    pad = torch.arange(36)[None, :, None] >= lengths[:, None, None]
    garbage = torch.randint(0, 7, tokens.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mu, log_var = model(tokens, lengths)
        assert torch.equal(model(torch.where(pad, garbage, tokens), lengths)[0], mu)
        torch.testing.assert_close(model(trim_tokens(tokens, lengths), lengths)[0], mu,
                                   rtol=0, atol=1e-5)
        torch.testing.assert_close(script_model(model)(tokens, lengths)[0], mu, rtol=0,
                                   atol=1e-5)
    assert torch.equal(log_var, torch.full_like(mu, 2 * torch.log(torch.tensor(42.0)).item()))
    # the last decision hides nothing: the model is the oracle on the real position
    last = states[27]
    network, _ = load_network(DEFAULT_MODEL)
    info = hidden_info(last)
    b = build_oracle_batch(last, info, true_world(last, info))
    from eqfast.oracle.tokenizer import actor_slot_tiles
    with torch.no_grad():
        q = network(tokenize(b.hands, b.remaining, b.decl, b.trick, b.actor),
                    actor_slot_tiles(b.hands, b.actor))
    slot = int(torch.nonzero(last.remaining[0, last.current_player[0]] >> torch.arange(7) & 1)[0])
    torch.testing.assert_close(mu[27, 0], q[0, slot], rtol=0, atol=1e-4)


def test_weights_files_and_bad_configs(tmp_path):
    model = oracle_belief()
    config = {"arch": "belief", "hidden": 256, "depth": 2, "roles": 1, "var_head": 1}
    path = tmp_path / "belief.safetensors"
    save_stage2(path, model, config)
    loaded, meta = load_stage2_with_meta(path)
    assert isinstance(loaded, BeliefModel) and meta["config"] == config
    games = BatchedGames.new(*setup_games(list(range(20, 36))))
    for _ in range(6):
        slots = stage2_slots(loaded, games)
        assert torch.equal(slots, stage2_slots(model, games))
        games = games.play(slots)
    for bad, needle in (({"arch": "belief", "hidden": 0}, "hidden"),
                        ({"arch": "belief", "depth": 2, "width": 3}, "unknown"),
                        ({"arch": "lstm"}, "arch")):
        with pytest.raises(ValueError, match=needle):
            build_model(bad)
    # a transformer oracle has no first-layer sum to take the expectation of
    other = tmp_path / "transformer_oracle.safetensors"
    tconf = {"arch": "transformer", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 16}
    save_weights(other, build_network(tconf), tconf)
    with pytest.raises(ValueError, match="embedding-sum"):
        init_from_oracle(BeliefModel(), other)
    with pytest.raises(ValueError, match="--hidden 256"):
        init_from_oracle(BeliefModel(hidden=64), DEFAULT_MODEL)
    # a file of the other Stage 2 architecture under this config is refused by name
    wrong = tmp_path / "wrong.safetensors"
    save_stage2(wrong, model, {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 128,
                               "var_head": 1})
    with pytest.raises(Stage2WeightsError, match="does not match its config"):
        load_stage2_with_meta(wrong)


# ---------------------------------------------------------------- training
@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from eqfast.cli import generate

    out = tmp_path_factory.mktemp("belief") / "data"
    assert generate.main(["--out", str(out), "--games", "28", "--games-per-batch", "28",
                          "--n-samples", "4", "--threads", "1", "--quiet",
                          "--control-variate", "none"]) == 0
    return out


def train_argv(data, run, *extra):
    return ["--data", str(data), "--run", str(run), "--arch", "belief", "--init",
            str(DEFAULT_MODEL), "--steps", "6", "--batch", "32", "--warmup", "1",
            "--eval-every", "3", "--ckpt-every", "3", "--quiet", *extra]


def test_train_from_the_oracle_resumes_exactly_and_plays(dataset, tmp_path):
    """eqfast-train-stage2 --arch belief --init ORACLE: the run starts at the oracle read
    on the beliefs (its card names the oracle), an interrupted and resumed run ends with
    the straight run's weights, and the file plays in the arena as stage2:PATH."""
    from safetensors.torch import load_file

    from eqfast.play.policies import policy_from_spec

    assert train_stage2.main(train_argv(dataset, tmp_path / "straight")) == 0
    assert train_stage2.main(train_argv(dataset, tmp_path / "resumed", "--stop-at", "3")) == 0
    assert train_stage2.main(train_argv(dataset, tmp_path / "resumed")) == 0
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "last.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    model, meta = load_stage2_with_meta(tmp_path / "straight" / "last.safetensors")
    assert isinstance(model, BeliefModel)
    assert meta["config"] == {"arch": "belief", "hidden": 256, "depth": 2, "roles": 1,
                              "var_head": 1}
    init = meta["train"]["init"]
    assert init["oracle"]["arch"] == "mlp" and init["steps"] > 0
    start = oracle_belief().state_dict()
    assert any(not torch.equal(start[k], a[k]) for k in a)          # it trained
    player = policy_from_spec(f"stage2:{tmp_path / 'straight' / 'last.safetensors'}")
    games = BatchedGames.new(*setup_games([7, 8]))
    slots = player.decide(games, [7, 8], 0)
    assert bool(games.legal_mask().gather(1, slots[:, None]).all())
    # a run from the trained file continues it (same config)
    assert train_stage2.main(["--data", str(dataset), "--run", str(tmp_path / "more"),
                              "--arch", "belief", "--init",
                              str(tmp_path / "straight" / "last.safetensors"), "--steps", "2",
                              "--batch", "32", "--warmup", "1", "--quiet"]) == 0


def test_train_cli_refuses_mixed_architectures(dataset, tmp_path, capsys):
    transformer = tmp_path / "t.safetensors"
    config = {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 16, "var_head": 1}
    save_stage2(transformer, build_model(config), config)
    for argv, needle in (
            (train_argv(dataset, tmp_path / "a", "--seen-tiles", "2"), "--seen-tiles"),
            (train_argv(dataset, tmp_path / "b", "--policy-weight", "0.5"), "policy head"),
            (["--data", str(dataset), "--run", str(tmp_path / "c"), "--hidden", "64"],
             "--arch belief"),
            (["--data", str(dataset), "--run", str(tmp_path / "d"), "--arch", "belief",
              "--init", str(transformer)], "transformer's weights"),
            (train_argv(dataset, tmp_path / "e", "--hidden", "64"), "--hidden 256")):
        assert train_stage2.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, (needle, err)


# ---------------------------------------------------------------- split files
def test_split_file_plays_the_split_players_moves_and_trains_on(dataset, tmp_path):
    """join_split(shipped transformer, belief, 5): one file whose μ is the transformer's
    before trick 5 and the belief model's from it, row by row in mixed batches (also
    scripted); it plays the moves of the arena's split:5:LATE player, and
    eqfast-train-stage2 --arch split trains on from it."""
    from eqfast.paths import DEFAULT_STAGE2
    from eqfast.play.policies import policy_from_spec
    from eqfast.stage2.split import SplitModel, join_split
    from eqfast.stage2.weights import load_stage2

    late = tmp_path / "belief.safetensors"
    save_stage2(late, oracle_belief(), {"arch": "belief", "hidden": 256, "depth": 2,
                                        "roles": 1, "var_head": 1})
    joined = tmp_path / "split.safetensors"
    record = join_split(DEFAULT_STAGE2, late, 5, joined)
    assert record["split"]["first_trick"] == 5 and record["split"]["late"]["path"] == str(late)
    model, meta = load_stage2_with_meta(joined)
    assert isinstance(model, SplitModel) and meta["config"]["late"]["arch"] == "belief"
    states, _, _ = random_game(9)
    tokens, lengths = zip(*(transcript_tokens(g) for g in states))
    tokens, lengths = torch.cat(tokens).long(), torch.cat(lengths)
    with torch.no_grad():
        mu = model(tokens, lengths)[0]
        early = load_stage2(DEFAULT_STAGE2)(tokens, lengths)[0]
        belief = load_stage2(late)(tokens, lengths)[0]
        torch.testing.assert_close(script_model(model)(tokens, lengths)[0], mu, rtol=0,
                                   atol=1e-5)
    torch.testing.assert_close(mu[:16], early[:16], rtol=0, atol=1e-5)
    torch.testing.assert_close(mu[16:], belief[16:], rtol=0, atol=1e-5)
    one, two = policy_from_spec(f"stage2:{joined}"), policy_from_spec(f"split:5:{late}")
    seeds = list(range(40, 56))
    games = BatchedGames.new(*setup_games(seeds))
    for k in range(28):
        slots = one.decide(games, seeds, k)
        assert torch.equal(slots, two.decide(games, seeds, k)), k
        games = games.play(slots)
    for bad in ({"arch": "split", "first_trick": 1, "early": {}, "late": {}},
                {"arch": "split", "first_trick": 5, "early": {"arch": "lstm"},
                 "late": meta["config"]["late"]}):
        with pytest.raises(ValueError, match="first_trick|'arch'"):
            build_model(bad)
    assert train_stage2.main(["--data", str(dataset), "--run", str(tmp_path / "run"),
                              "--arch", "split", "--init", str(joined), "--steps", "2",
                              "--batch", "32", "--warmup", "1", "--quiet"]) == 0
    trained = load_stage2_with_meta(tmp_path / "run" / "last.safetensors")[1]
    assert trained["config"] == meta["config"]
    assert train_stage2.main(["--data", str(dataset), "--run", str(tmp_path / "bad"),
                              "--arch", "split", "--init", str(late)]) == 2
