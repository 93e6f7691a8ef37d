"""The improvement loop's parts: records played by a Stage 2 policy and labelled by the
engine (Engine(play_policy=), eqfast-generate --play-policy), the Monte Carlo target mix of
the Stage 2 trainer (--mc-weight), and eqfast-iterate end to end with a resume after a kill.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from cliutil import cli_env
from eqfast.cli import generate, iterate
from eqfast.data.schema import DecisionRecords, check_invariants
from eqfast.data.shards import load_records
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.policy import MODE_EPSILON, MODE_POLICY, ExplorationConfig
from eqfast.engine.transcript import current_hand_order
from eqfast.oracle.factory import oracle_from_spec
from eqfast.play.policies import Stage2Policy, policy_from_spec
from eqfast.stage2.data import mc_target, prepare_rows
from eqfast.stage2.policy import play_policy_from_spec
from eqfast.stage2.train import stage2_loss

SEEDS = [11, 12]
#: the fields that depend on the position and the labels only (not on the move chosen)
LABEL_FIELDS = ("transcript_tokens", "transcript_lengths", "e_q_mean", "e_q_var", "legal_mask",
                "u_mean", "u_max", "ess", "max_w", "n_worlds", "enumerated", "actor", "seed",
                "decision_idx", "split")


@pytest.fixture(scope="module")
def oracle():
    return oracle_from_spec("default", "cpu")[0]


@pytest.fixture(scope="module")
def play():
    return play_policy_from_spec("stage2")[0]


def _replay_with_plain_engine(records: DecisionRecords, oracle, cfg: EngineConfig):
    """Walk the games of `records` (sorted by game and decision) move by move; at every
    decision yield (the plain engine's records at that position, the record there, the
    games, the initial-hand slot the record played)."""
    plain = Engine(oracle, cfg)
    games = plain.new_games(SEEDS)
    gid = torch.tensor(SEEDS)
    for d in range(28):
        at = records.select(torch.nonzero(records["decision_idx"] == d)[:, 0])
        ref, _ = plain.decide(games, SEEDS, d, gid)
        slot = current_hand_order(games).gather(1, at["action_taken"][:, None])[:, 0]
        yield ref, at, games, slot
        games = games.play(slot)


def test_play_policy_labels_equal_plain_engine_and_moves_equal_stage2(oracle, play):
    """Exploration off: the labels are the plain engine's at every position, the moves the
    arena's stage2 player's. (The posterior with the Stage 2 behaviour model runs in the
    eqfast-iterate test below.)"""
    cfg = EngineConfig(n_samples=4)
    records = Engine(oracle, cfg, play_policy=play).play(SEEDS)
    assert check_invariants(records) == []
    assert bool((records["exploration_mode"] == MODE_POLICY).all())
    stage2 = Stage2Policy()
    moved_off_labels = 0
    for ref, at, games, slot in _replay_with_plain_engine(records, oracle, cfg):
        for name in LABEL_FIELDS:
            assert torch.equal(ref[name], at[name]), name
        # the move is the arena's stage2 player's, wherever it differs from the labels'
        assert torch.equal(slot, stage2.decide(games, SEEDS, 0))
        legal, mean = at["legal_mask"], at["e_q_mean"]
        best = torch.where(legal, mean, torch.full_like(mean, float("-inf"))).max(1).values
        taken = mean.gather(1, at["action_taken"][:, None])[:, 0]
        assert torch.allclose(at["q_gap"], best - taken)
        moved_off_labels += int((at["q_gap"] > 1e-4).sum())
    assert moved_off_labels > 0, "Stage 2 always played the label argmax: the test is weak"


def test_play_policy_exploration_keeps_labels(oracle, play):
    cfg = EngineConfig(n_samples=4, exploration=ExplorationConfig(epsilon=0.3))
    records = Engine(oracle, cfg, play_policy=play).play(SEEDS)
    assert check_invariants(records) == []
    modes = records["exploration_mode"]
    assert set(modes.unique().tolist()) == {MODE_POLICY, MODE_EPSILON}
    for d, (ref, at, _, _) in enumerate(_replay_with_plain_engine(records, oracle, cfg)):
        for name in LABEL_FIELDS:
            assert torch.equal(ref[name], at[name]), name
        if d == 12:                          # past the first epsilon moves: enough here
            assert bool((records["exploration_mode"][records["decision_idx"] < d]
                         == MODE_EPSILON).any())
            break


def test_expert_play_policy_moves_equal_arena_expert(oracle):
    """--play-policy expert: the labels are the plain engine's and every move is the arena's
    expert player's at the same position."""
    from eqfast.play.expert import ExpertPolicy

    cfg = EngineConfig(n_samples=4)
    records = Engine(oracle, cfg, play_policy=play_policy_from_spec("expert")[0]).play(SEEDS)
    assert check_invariants(records) == []
    assert bool((records["exploration_mode"] == MODE_POLICY).all())
    expert, moved_off_labels = ExpertPolicy(), 0
    for ref, at, games, slot in _replay_with_plain_engine(records, oracle, cfg):
        for name in LABEL_FIELDS:
            assert torch.equal(ref[name], at[name]), name
        assert torch.equal(slot, expert.decide(games, SEEDS, 0))
        moved_off_labels += int((at["q_gap"] > 1e-4).sum())
    assert moved_off_labels > 0, "expert always played the label argmax: the test is weak"


def test_arena_players_as_play_policies_keep_their_moves(oracle):
    """--play-policy with an arena player: every move is that player's at the position,
    with the games' seeds and decision handed on (the E[Q] player's worlds are keyed by
    them, so a player given other keys would choose otherwise somewhere)."""
    cfg = EngineConfig(n_samples=4)
    for spec in ("rules", "eq:default:4"):
        play, ident = play_policy_from_spec(spec, run_seed=5)
        assert ident["name"] == spec and len(ident["sha256"]) == 64
        records = Engine(oracle, cfg, play_policy=play).play(SEEDS)
        assert check_invariants(records) == []
        arena = policy_from_spec(spec, run_seed=5)
        for ref, at, games, slot in _replay_with_plain_engine(records, oracle, cfg):
            for name in LABEL_FIELDS:
                assert torch.equal(ref[name], at[name]), name
            d = int(at["decision_idx"][0])
            assert torch.equal(slot, arena.decide(games, SEEDS, d)), (spec, d)


def test_play_policy_spec_errors():
    with pytest.raises(ValueError, match="unknown play policy or bad argument"):
        play_policy_from_spec("nosuch")
    with pytest.raises(ValueError, match="hidden hands"):
        play_policy_from_spec("perfect")
    with pytest.raises(ValueError, match="no such Stage 2 weights file"):
        play_policy_from_spec("stage2:/nonexistent/w.safetensors")
    ident = play_policy_from_spec("expert")[1]
    assert ident["name"] == "expert" and len(ident["sha256"]) == 64


def test_generate_play_policy_cli(tmp_path, capsys):
    out = tmp_path / "d"
    base = ["--out", str(out), "--games", "2", "--games-per-batch", "2", "--n-samples", "4",
            "--oracle", "default", "--pipeline", "reference", "--threads", "1", "--quiet"]
    assert generate.main(base + ["--play-policy", "stage2"]) == 0
    records, metas = load_records(out)
    assert check_invariants(records) == [] and len(records) == 56
    assert bool((records["exploration_mode"] == MODE_POLICY).all())
    assert metas[0]["play_policy"]["name"] == "stage2"
    assert "play_policy" in metas[0]["settings"]
    # another play policy is refused on resume (here: none)
    capsys.readouterr()
    assert generate.main(base) == 2
    assert "play_policy" in capsys.readouterr().err
    assert generate.main(["--out", str(tmp_path / "f"), "--games", "2", "--oracle", "default",
                          "--pipeline", "fast", "--quiet", "--play-policy", "stage2"]) == 2
    assert "--play-policy runs on the reference pipeline only" in capsys.readouterr().err
    # an arena player plays the transcripts; a cheating one is refused before anything runs
    assert generate.main(["--out", str(tmp_path / "e"), *base[2:], "--play-policy",
                          "endgame:6"]) == 0
    assert load_records(tmp_path / "e")[1][0]["play_policy"]["name"] == "endgame:6"
    capsys.readouterr()
    assert generate.main(["--out", str(tmp_path / "p"), *base[2:], "--play-policy",
                          "perfect"]) == 2
    assert "hidden hands" in capsys.readouterr().err and not (tmp_path / "p").exists()


def test_mc_weight_mixes_the_played_slot_only():
    torch.manual_seed(0)
    R = 5
    legal = torch.rand(R, 7) < 0.7
    legal[:, 0] = True
    taken = torch.tensor([0, 0, 0, 0, 0])
    q = torch.where(legal, torch.randn(R, 7) * 10, torch.zeros(R, 7))
    realized = torch.tensor([12.0, -6.0, 0.0, 30.0, -2.0])
    lam = 0.25
    target = mc_target(q, taken, realized, lam)
    expect = q.clone()
    expect[:, 0] = 0.75 * q[:, 0] + 0.25 * realized
    assert torch.equal(target, expect)

    batch = {"q": q, "legal": legal, "weight": torch.ones(R), "s2": torch.zeros(R, 7)}
    mu = torch.randn(R, 7) * 10
    w = legal.float()
    # the loss of the docstring by hand, E[Q] replaced at the played slot
    by_hand = lambda t: float((w * ((mu - t) / 42.0) ** 2).sum() / w.sum())
    plain = float(stage2_loss(mu, torch.zeros_like(mu), batch))
    mixed = float(stage2_loss(mu, torch.zeros_like(mu), {**batch, "target": target}))
    assert plain == pytest.approx(by_hand(q), rel=1e-6)
    assert mixed == pytest.approx(by_hand(expect), rel=1e-6)
    # only the played slot's term changed, by exactly the formula's amount
    delta = (((mu[:, 0] - expect[:, 0]) / 42) ** 2 - ((mu[:, 0] - q[:, 0]) / 42) ** 2).sum()
    assert mixed - plain == pytest.approx(float(delta / w.sum()), rel=1e-5, abs=1e-9)


def test_prepare_rows_target_from_records(oracle, play):
    records = Engine(oracle, EngineConfig(n_samples=4), play_policy=play).play(SEEDS[:1])
    rows = prepare_rows(records, mc_weight=0.5)
    r = torch.arange(len(records))
    a = records["action_taken"]
    expect = 0.5 * records["e_q_mean"][r, a] + 0.5 * records["realized_to_go"]
    assert torch.allclose(rows["target"][r, a], expect)
    other = torch.ones_like(rows["q"], dtype=torch.bool)
    other[r, a] = False
    assert torch.equal(rows["target"][other], rows["q"][other])
    assert "target" not in prepare_rows(records)
    no_outcome = DecisionRecords({k: v for k, v in records.tensors.items()
                                  if k != "realized_to_go"})
    with pytest.raises(Exception, match="realized_to_go"):
        prepare_rows(no_outcome, mc_weight=0.5)


#: 4 games from this seed (and from it + SEED_STRIDE) hold train and val games both
TINY_SEED = 10_000_000_040
TINY = ["--games", "4", "--games-per-batch", "4", "--seed-start", str(TINY_SEED),
        "--oracle", "default", "--n-samples", "4", "--steps", "5", "--eval-every", "5",
        "--warmup", "2", "--match-deals", "4", "--no-stop"]


def _hashes(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_iterate_two_generations_resume_after_kill(tmp_path, capsys):
    run = tmp_path / "run"
    assert iterate.main(["--run", str(run), "--generations", "1", *TINY]) == 0
    gen1 = _hashes(run / "gen-1")
    for name in ("card.json", "weights.safetensors", "data_card.json", "train.json",
                 "match.json", "train/history.jsonl"):
        assert name in gen1, name
    card = json.loads((run / "gen-1" / "card.json").read_text())
    assert card["finished"] and set(card["steps"]) == {"data", "train", "match"}
    assert card["settings"]["games"] == 4 and "--play-policy" in card["generate_argv"]
    parent = run / "gen-0" / "weights.safetensors"
    argv = card["generate_argv"]
    assert argv[argv.index("--behaviour-oracle") + 1] == f"stage2:{parent}"
    records, metas = load_records(run / "gen-1" / "data")
    assert metas[0]["play_policy"]["sha256"] == hashlib.sha256(parent.read_bytes()).hexdigest()
    assert metas[0]["posterior"]["enabled"] and check_invariants(records) == []
    assert set(records["exploration_mode"].unique().tolist()) <= {MODE_POLICY, MODE_EPSILON}

    # generation 2 is killed once it has started, then the command runs again
    proc = subprocess.Popen([sys.executable, "-m", "eqfast.cli.iterate", "--run", str(run),
                             "--generations", "2", *TINY], env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while not (run / "gen-2" / "card.json").exists() and proc.poll() is None:
        assert time.time() - t0 < 60
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _hashes(run / "gen-1") == gen1
    # an unfinished generation resumes only with its own settings
    assert iterate.main(["--run", str(run), "--generations", "2", *TINY[:-1], "--steps", "6",
                         "--no-stop"]) == 2
    assert "other settings" in capsys.readouterr().err
    assert iterate.main(["--run", str(run), "--generations", "2", *TINY]) == 0
    assert _hashes(run / "gen-1") == gen1
    card2 = json.loads((run / "gen-2" / "card.json").read_text())
    assert card2["finished"] and card2["parent"].endswith("gen-1/weights.safetensors")
    assert f"stage2:{card2['parent']}" in card2["generate_argv"]
    match = json.loads((run / "gen-2" / "match.json").read_text())
    assert (match["a"], match["b"], match["hands"]) == ("gen-2", "gen-1", 8)
    summary = json.loads((run / "iterate.json").read_text())
    assert [g["generation"] for g in summary["generations"]] == [0, 1, 2]
    # a finished run reruns without touching anything
    before = _hashes(run)
    assert iterate.main(["--run", str(run), "--generations", "2", *TINY]) == 0
    assert _hashes(run) == before


def test_iterate_rollout_labels_use_the_parent(tmp_path):
    """--oracle rollout labels each generation with its parent's Stage 2 rollouts."""
    run = tmp_path / "run"
    tiny = list(TINY)
    i = tiny.index("--oracle")
    tiny[i + 1] = "rollout:1"
    assert iterate.main(["--run", str(run), "--generations", "1", *tiny, "--no-posterior"]) == 0
    card = json.loads((run / "gen-1" / "card.json").read_text())
    parent = run / "gen-0" / "weights.safetensors"
    argv = card["generate_argv"]
    assert argv[argv.index("--oracle") + 1] == f"rollout:1:{parent}"
    _, metas = load_records(run / "gen-1" / "data")
    assert metas[0]["oracle"]["sha256"].startswith(
        hashlib.sha256(parent.read_bytes()).hexdigest())
    assert iterate.parent_rollout("rollout:3:/x.safetensors", parent) == "rollout:3:/x.safetensors"
    assert iterate.parent_rollout("default", parent) == "default"
    assert iterate.parent_rollout("rollout", parent) == f"rollout:7:{parent}"


def test_iterate_replay_trains_on_the_last_generations(tmp_path, capsys):
    """--replay 2: generation 2 trains on its own games and generation 1's; a card written
    before --replay existed resumes as --replay 1."""
    run = tmp_path / "run"
    assert iterate.main(["--run", str(run), "--generations", "1", *TINY]) == 0
    card_path = run / "gen-1" / "card.json"
    card = json.loads(card_path.read_text())
    assert card["settings"]["replay"] == 1
    del card["settings"]["replay"], card["steps"]["match"]
    card["finished"] = False
    card_path.write_text(json.dumps(card))
    assert iterate.main(["--run", str(run), "--generations", "1", *TINY]) == 0
    assert json.loads(card_path.read_text())["finished"]
    assert iterate.main(["--run", str(run), "--generations", "2", *TINY, "--replay", "2"]) == 0
    data = json.loads((run / "gen-2" / "data_card.json").read_text())
    assert data["data"] == [str(run / "gen-2" / "data"), str(run / "gen-1" / "data")]
    own = json.loads((run / "gen-1" / "data_card.json").read_text())
    assert data["splits"]["train"]["records"] > own["splits"]["train"]["records"]
    assert iterate.replay_data(run, 1, 3) == [str(run / "gen-1" / "data")]
    shutil.rmtree(run / "gen-1" / "data")
    with pytest.raises(ValueError, match="--replay 2"):
        iterate.replay_data(run, 2, 2)
    assert iterate.main(["--run", str(run), "--replay", "0", *TINY]) == 2
    assert "--replay" in capsys.readouterr().err


def test_iterate_tricks_trains_only_the_split_part_that_plays_them(tmp_path, capsys):
    """--tricks 4-7 with a split parent (the E[Q] transformer before trick 4, the soup from
    it): generation 1's early part is the parent's bit for bit, its late part learned."""
    from eqfast.paths import MODELS
    from eqfast.stage2.split import join_split
    from eqfast.stage2.weights import read_stage2

    parent = tmp_path / "split.safetensors"
    join_split(MODELS / "stage2_eq.safetensors", MODELS / "stage2_soup.safetensors", 4, parent)
    run = tmp_path / "run"
    assert iterate.main(["--run", str(run), "--generations", "1", "--init", str(parent),
                         *TINY, "--tricks", "4-7"]) == 0
    card = json.loads((run / "gen-1" / "card.json").read_text())
    assert card["settings"]["tricks"] == "4-7"
    assert json.loads((run / "gen-1" / "train.json").read_text())["train"]["tricks"] == [4, 5, 6, 7]
    before, after = read_stage2(parent)[0], read_stage2(run / "gen-1" / "weights.safetensors")[0]
    assert before.keys() == after.keys()
    early = [k for k in before if k.startswith("early.")]
    late = [k for k in before if k.startswith("late.")]
    assert early and late
    assert all(torch.equal(before[k], after[k]) for k in early)
    assert not all(torch.equal(before[k], after[k]) for k in late)
    assert iterate.main(["--run", str(tmp_path / "bad"), *TINY, "--tricks", "0-3"]) == 2
    assert "--tricks" in capsys.readouterr().err


def test_iterate_train_from_a_base_replaces_the_part_that_plays_the_tricks(tmp_path, capsys):
    """--train-from BASE --tricks 1-3 with a split parent: each generation's training starts
    from BASE at tricks 1-3 and the parent's late part, bit for bit (the recipe of
    docs/STAGE2.md, "A third generation for the first three tricks"); --ema, --min-worlds
    and --extra-data reach the trainer."""
    from eqfast.paths import MODELS
    from eqfast.stage2.split import join_split
    from eqfast.stage2.weights import read_stage2

    parent = tmp_path / "split.safetensors"
    join_split(MODELS / "stage2_eq.safetensors", MODELS / "stage2_soup.safetensors", 4, parent)
    base = read_stage2(MODELS / "stage2_replay2.safetensors")[0]
    late = {k: v for k, v in read_stage2(parent)[0].items() if k.startswith("late.")}
    run = tmp_path / "run"
    recipe = ["--tricks", "1-3", "--train-from", "stage2_replay2", "--ema", "0.9",
              "--min-worlds", "2"]
    assert iterate.main(["--run", str(run), "--generations", "1", "--init", str(parent),
                         *TINY, *recipe]) == 0
    out = capsys.readouterr().out          # the trainer's log line for a joined start file
    assert "start.safetensors (sha256 " in out and "no steps of its own" in out
    assert iterate.main(["--run", str(run), "--generations", "2", *TINY, *recipe,
                         "--extra-data", str(run / "gen-1" / "data")]) == 0
    for gen in (1, 2):
        here = run / f"gen-{gen}"
        start = read_stage2(here / "start.safetensors")[0]
        assert all(torch.equal(start["early." + k], v) for k, v in base.items())
        after = read_stage2(here / "weights.safetensors")[0]
        assert all(torch.equal(after[k], v) and torch.equal(start[k], v)
                   for k, v in late.items())
        assert not all(torch.equal(after["early." + k], v) for k, v in base.items())
        card = json.loads((here / "card.json").read_text())
        assert card["start"]["split"]["early"]["path"].endswith("stage2_replay2.safetensors")
        train = json.loads((here / "train.json").read_text())["train"]
        assert train["ema"] == 0.9 and train["min_worlds"] == 2 and train["tricks"] == [1, 2, 3]
        assert train["init"]["path"] == str(here / "start.safetensors")
    data = json.loads((run / "gen-2" / "data_card.json").read_text())["data"]
    assert data == [str(run / "gen-2" / "data"), str(run / "gen-1" / "data")]

    def refused(*flags):
        assert iterate.main(["--run", str(tmp_path / "bad"), "--generations", "1", "--init",
                             str(parent), *TINY, *flags]) == 2
        return capsys.readouterr().err

    assert "both of its parts" in refused("--tricks", "3-4", "--train-from", "stage2_eq")
    assert "architecture" in refused("--tricks", "4-7", "--train-from", "stage2_gpu1m")
    assert not (tmp_path / "bad" / "gen-1" / "card.json").exists()   # refused before any data
    assert "no such file" in refused("--train-from", str(tmp_path / "none.safetensors"))
    assert "not a split file" in refused("--tricks", "1-3", "--train-from", "stage2_eq:early")
    assert "--extra-data" in refused("--extra-data", str(tmp_path))
    assert "--ema" in refused("--ema", "1")


def test_iterate_data_ranks_write_what_one_process_writes(tmp_path):
    """--data-ranks 2: two eqfast-generate processes label the generation's games, record
    for record what one process writes with the same arguments."""
    run = tmp_path / "run"
    tiny = list(TINY)
    tiny[tiny.index("--games-per-batch") + 1] = "2"
    assert iterate.main(["--run", str(run), "--generations", "1", *tiny,
                         "--data-ranks", "2"]) == 0
    card = json.loads((run / "gen-1" / "card.json").read_text())
    argv = card["generate_argv"]
    assert argv[argv.index("--world-size") + 1] == "2"
    ranks, metas = load_records(run / "gen-1" / "data")
    assert sorted({tuple(m["rank"]) for m in metas}) == [(0, 2), (1, 2)]
    assert card["steps"]["data"]["cpu_s"] > 0            # the ranks' CPU is counted
    i = argv.index("--world-size")
    single = argv[:i] + argv[i + 2:]
    single[single.index("--out") + 1] = str(tmp_path / "single")
    assert generate.main(single) == 0
    one, _ = load_records(tmp_path / "single")
    assert ranks.tensors.keys() == one.tensors.keys()
    for k, v in ranks.tensors.items():
        assert torch.equal(v, one.tensors[k]), k
