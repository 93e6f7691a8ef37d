"""The control variate (--control-variate): the main oracle's E[Q] and Var[Q] corrected by a
cheaper, correlated oracle on more worlds. The formula against a float64 brute force; its
exact identities (a control oracle equal to the main one gives the main oracle's moments
on the wide worlds; a constant bias of the control oracle cancels); unbiased and less
noisy on a synthetic population; the engine, the records' invariants and the CLI."""
import json

import pytest
import torch
from cliutil import TINY, assert_usage_error, run_cli
from fakes import HashOracle

from eqfast.data.schema import DecisionRecords, check_invariants
from eqfast.data.shards import load_records
from eqfast.engine.moments import (control_variate_moments, control_variate_se,
                                   weighted_moments)
from eqfast.engine import pipeline
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig


def _uniform(q):
    return weighted_moments(q, torch.ones(q.shape[0], 7, dtype=torch.bool),
                            torch.zeros(q.shape[:2]))


def _random_case(G, n, M, seed):
    gen = torch.Generator().manual_seed(seed)
    main_a = torch.randn(G, n, 7, generator=gen) * 12
    cv_a = main_a + torch.randn(G, n, 7, generator=gen) * 3 + 2.0
    cv_b = torch.randn(G, M, 7, generator=gen) * 12 + 2.0
    legal = torch.rand(G, 7, generator=gen) < 0.6
    legal[:, 0] = True
    return main_a, cv_a, cv_b, legal


def test_formula_matches_a_float64_brute_force():
    main_a, cv_a, cv_b, legal = _random_case(16, 25, 400, seed=1)
    got = control_variate_moments(_uniform(main_a), _uniform(cv_a), _uniform(cv_b), legal,
                                  torch.ones(16, dtype=torch.bool))
    a, c, b = (x.double() for x in (main_a, cv_a, cv_b))
    mean = b.mean(1) + a.mean(1) - c.mean(1)
    pvar = lambda x: x.var(1, unbiased=False)
    var = pvar(b) + pvar(a) - pvar(c)
    assert float(var[legal].min()) > 0                    # the clamp plays no part here
    torch.testing.assert_close(got.mean.double()[legal], mean[legal], rtol=0, atol=2e-5)
    torch.testing.assert_close(got.var.double()[legal], var[legal], rtol=1e-5, atol=1e-3)
    # illegal slots keep the main oracle's moments; ESS is the main worlds'
    plain = _uniform(main_a)
    assert torch.equal(got.mean[~legal], plain.mean[~legal])
    assert torch.equal(got.ess, plain.ess)
    sd = got.var.clamp(min=0).sqrt()
    torch.testing.assert_close(got.u_max, torch.where(legal, sd, 0.0).amax(1))


def test_a_control_equal_to_the_main_oracle_gives_the_wide_moments_exactly():
    main_a, _, cv_b, legal = _random_case(8, 10, 60, seed=2)
    got = control_variate_moments(_uniform(main_a), _uniform(main_a), _uniform(cv_b), legal,
                                  torch.ones(8, dtype=torch.bool))
    wide = _uniform(cv_b)
    assert torch.equal(got.mean[legal], wide.mean[legal])
    assert torch.equal(got.var[legal], wide.var[legal])


def test_rows_not_corrected_keep_the_main_moments_and_the_mean_stays_in_bounds():
    main_a, cv_a, cv_b, legal = _random_case(6, 10, 40, seed=3)
    cv_b[1] += 80.0                                     # a correction far beyond +-42
    corrected = torch.tensor([True, True, False, True, False, True])
    got = control_variate_moments(_uniform(main_a), _uniform(cv_a), _uniform(cv_b), legal,
                                  corrected)
    plain = _uniform(main_a)
    assert torch.equal(got.mean[~corrected], plain.mean[~corrected])
    assert torch.equal(got.var[~corrected], plain.var[~corrected])
    assert float(got.mean[1][legal[1]].min()) == 42.0
    assert bool((got.var >= 0).all())


def test_unbiased_and_less_noisy_than_the_main_oracle_alone():
    """A population of 5,000 worlds, the control oracle = the main one + 1.5 points of bias
    + 3 points of noise; 2,000 trials (the rows of one call) each draw 25 main worlds and 400
    control worlds. The corrected mean is centred on the main oracle's population mean
    (the bias cancels) and its spread is far below that of the 25-world mean."""
    gen = torch.Generator().manual_seed(4)
    P, trials, n, M = 5000, 2000, 25, 400
    main_pop = torch.randn(P, 7, generator=gen) * 15 + torch.arange(7) * 2.0
    cv_pop = main_pop + 1.5 + torch.randn(P, 7, generator=gen) * 3
    a = torch.randint(P, (trials, n), generator=gen)
    b = torch.randint(P, (trials, M), generator=gen)
    got = control_variate_moments(_uniform(main_pop[a]), _uniform(cv_pop[a]),
                                  _uniform(cv_pop[b]), torch.ones(trials, 7, dtype=torch.bool),
                                  torch.ones(trials, dtype=torch.bool))
    truth = main_pop.double().mean(0)
    plain = _uniform(main_pop[a]).mean.double()
    se = got.mean.double().std(0) / trials ** 0.5
    assert bool(((got.mean.double().mean(0) - truth).abs() < 4 * se).all())
    ratio = got.mean.double().var(0) / plain.var(0)
    assert bool((ratio < 0.2).all()), ratio            # theory: (9/25 + 225/400) / 9 = 0.10
    # the variance is centred on the main oracle's too (up to the O(1/n) of a population
    # variance of n worlds)
    var_se = got.var.double().std(0) / trials ** 0.5
    assert bool(((got.var.double().mean(0) - main_pop.double().var(0, unbiased=False)).abs()
                 < 4 * var_se + 0.05 * main_pop.double().var(0)).all())


@pytest.mark.parametrize("shared", [True, False], ids=["A inside B", "B enumerated"])
def test_standard_error_matches_the_spread_of_the_estimates(shared):
    """Over 4,000 trials the reported standard error (root mean square) equals the
    estimates' observed spread within 6%: with A the first worlds of B (the engine's draws)
    and with B the whole population (an enumerated B: its mean is exact)."""
    gen = torch.Generator().manual_seed(5)
    P, trials, n, M = 3000, 4000, 20, 200
    main_pop = torch.randn(P, 7, generator=gen) * 15
    cv_pop = 0.8 * main_pop + 4.0 + torch.randn(P, 7, generator=gen) * 4
    if shared:
        b = torch.randint(P, (trials, M), generator=gen)
        a = b[:, :n]
        wide = _uniform(cv_pop[b])
    else:
        a = torch.randint(P, (trials, n), generator=gen)
        wide = _uniform(cv_pop[None].expand(trials, P, 7))
    main, same = _uniform(main_pop[a]), _uniform(cv_pop[a])
    diff = _uniform(main_pop[a] - cv_pop[a]).var
    est = control_variate_moments(main, same, wide, torch.ones(trials, 7, dtype=torch.bool),
                                  torch.ones(trials, dtype=torch.bool)).mean.double()
    se = control_variate_se(main, same, wide, diff, torch.full((trials,), shared)).double()
    ratio = se.pow(2).mean(0).sqrt() / est.std(0)
    assert bool(((ratio > 0.94) & (ratio < 1.06)).all()), ratio


class BiasedOracle:
    """HashOracle plus a fixed offset per slot (a control oracle that is wrong by a
    constant)."""

    def __init__(self):
        self.inner = HashOracle()

    def query(self, b):
        q, legal = self.inner.query(b)
        return q + torch.tensor([7.0, -3.0, 1.0, 0.5, 11.0, -6.0, 2.0]), legal


def test_engine_a_constant_bias_of_the_control_oracle_cancels():
    seeds = [3, 4]
    cv = Engine(HashOracle(), EngineConfig(n_samples=6, cv_samples=24, seed=5),
                cv_oracle=BiasedOracle()).play(seeds)
    wide = Engine(HashOracle(), EngineConfig(n_samples=24, seed=5)).play(seeds)
    assert torch.equal(cv["transcript_tokens"], wide["transcript_tokens"])
    legal = cv["legal_mask"]
    applied = cv["cv_worlds"] > 0
    assert bool(applied.any()) and bool((~applied).any())       # late decisions enumerate
    assert torch.equal(cv["cv_worlds"][applied], wide["n_worlds"][applied])
    torch.testing.assert_close(cv["e_q_mean"][legal], wide["e_q_mean"][legal], rtol=0,
                               atol=1e-4)
    torch.testing.assert_close(cv["e_q_var"][legal], wide["e_q_var"][legal], rtol=0, atol=2e-3)
    # the difference of the oracles is a constant: only the wide mean's own error is left
    # (none where the wide worlds are every consistent one)
    se = (wide["e_q_var"] / wide["ess"][:, None]).sqrt() * ~wide["enumerated"][:, None]
    both = legal & applied[:, None]
    torch.testing.assert_close(cv["cv_se"][both], se[both], rtol=1e-3, atol=1e-3)
    assert check_invariants(cv) == []


def test_engine_counts_the_control_rows_apart():
    main, control = HashOracle(), HashOracle()
    engine = Engine(main, EngineConfig(n_samples=5, cv_samples=20), cv_oracle=control)
    engine.play([9])
    assert engine.oracle_rows == main.rows and engine.cv_rows == control.rows > main.rows


class NoisyOracle:
    """HashOracle plus a smaller, differently phased hash of the position: a control oracle
    correlated with HashOracle but not equal to it up to a constant."""

    def __init__(self):
        self.inner = HashOracle()

    def query(self, b):
        q, legal = self.inner.query(b)
        x = (b.hands.clamp(min=0).double() * torch.arange(3, 10)).sum((1, 2))
        noise = 4 * torch.sin(x[:, None] * 1.913 + 2 * torch.arange(7))
        return q + noise.float(), legal


ADAPTIVE = dict(n_samples=4, cv_samples=64, sem=2.0, max_samples=32, seed=3)


def test_adaptive_control_variate_stops_each_game_at_its_target():
    """--sem with a control variate doubles N until every corrected legal move's cv_se is
    at most the target, or N reaches max_samples; both kinds of stop occur here."""
    r = Engine(HashOracle(), EngineConfig(**ADAPTIVE), cv_oracle=NoisyOracle()).play(range(6))
    assert check_invariants(r) == []
    corrected = r["cv_worlds"] > 0
    met = ((r["cv_se"] <= ADAPTIVE["sem"]) | ~r["legal_mask"]).all(1)
    assert bool((met | (r["n_worlds"] == ADAPTIVE["max_samples"]) | ~corrected).all())
    grew = corrected & (r["n_worlds"] > ADAPTIVE["n_samples"])
    assert bool((grew & met).any()) and bool((corrected & ~grew).any())
    assert bool((corrected & (r["n_worlds"] == ADAPTIVE["max_samples"]) & ~met).any())
    # the control's worlds stay cv_samples (fewer where they are every consistent one)
    assert int(r["cv_worlds"].max()) == ADAPTIVE["cv_samples"]


def test_adaptive_control_variate_equals_a_fixed_run_at_each_games_final_worlds():
    """Counter-based draws make a game's first n worlds the same at every size, and the
    control oracle's wide worlds the same in every round: a game that stopped at n worlds
    has the labels of a run with N = n, bit for bit."""
    seeds = list(range(10, 18))
    engine = Engine(HashOracle(), EngineConfig(**ADAPTIVE), cv_oracle=NoisyOracle())
    adaptive, _ = engine.decide(engine.new_games(seeds), seeds, 0, torch.tensor(seeds))
    sizes = adaptive["n_worlds"].tolist()
    assert len(set(sizes)) > 1, sizes
    for i, (seed, n) in enumerate(zip(seeds, sizes)):
        fixed_cfg = EngineConfig(**{**ADAPTIVE, "n_samples": n, "sem": None})
        fixed = Engine(HashOracle(), fixed_cfg, cv_oracle=NoisyOracle())
        one, _ = fixed.decide(fixed.new_games([seed]), [seed], 0, torch.tensor([seed]))
        for name in ("e_q_mean", "e_q_var", "cv_shift", "cv_se", "cv_worlds", "n_worlds"):
            assert torch.equal(one[name][0], adaptive[name][i]), (seed, n, name)


def test_adaptive_rounds_past_the_control_worlds_stop_the_correction():
    """Where the doubling takes N past cv_samples the control's wide worlds are the
    oracle's own: no shift, and cv_se is the plain standard error of those worlds."""
    cfg = EngineConfig(n_samples=4, cv_samples=8, sem=0.5, max_samples=32, seed=3)
    r = Engine(HashOracle(), cfg, cv_oracle=NoisyOracle()).play([5, 6])
    assert check_invariants(r) == []
    past = (r["cv_worlds"] > 0) & (r["n_worlds"] > 8)
    assert bool(past.any())
    assert torch.equal(r["cv_worlds"][past], r["n_worlds"][past])
    legal = r["legal_mask"] & past[:, None]
    torch.testing.assert_close(r["cv_shift"][legal], torch.zeros_like(r["cv_shift"][legal]),
                               rtol=0, atol=1e-5)
    plain = (r["e_q_var"] / r["ess"][:, None]).sqrt()
    torch.testing.assert_close(r["cv_se"][legal], plain[legal], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("change,needle", [
    (dict(cv_samples=5), "at least"),
    (dict(n_by_trick=(5, 5, 50, 5, 5, 5, 5)), "at least"),
    (dict(store_worlds=True), "store_worlds"),
    (dict(q_pdf=True), "q_pdf"),
])
def test_config_refuses_what_the_correction_does_not_cover(change, needle):
    with pytest.raises(ValueError, match=needle):
        EngineConfig(**{"n_samples": 10, "cv_samples": 40, **change})


POSTERIOR = PosteriorConfig(window_k=3, tau=4.0)


def test_with_posterior_weights_a_constant_bias_still_cancels():
    """Posterior weights from a separate behaviour oracle: the control on the main oracle's
    worlds takes their weights, its wide worlds get their own from the same model, so a
    control that is the main oracle plus a constant gives the main oracle's weighted moments
    on the wide worlds."""
    seeds = [3, 4]
    behaviour = NoisyOracle()
    cfg = dict(posterior=POSTERIOR, seed=5)
    cv = Engine(HashOracle(), EngineConfig(n_samples=6, cv_samples=24, **cfg),
                cv_oracle=BiasedOracle(), behaviour_oracle=behaviour).play(seeds)
    wide = Engine(HashOracle(), EngineConfig(n_samples=24, **cfg),
                  behaviour_oracle=behaviour).play(seeds)
    assert torch.equal(cv["transcript_tokens"], wide["transcript_tokens"])
    assert check_invariants(cv) == []
    legal = cv["legal_mask"]
    applied = cv["cv_worlds"] > 0
    assert bool(applied.any()) and bool((wide["ess"] < wide["n_worlds"] - 0.5).any())
    torch.testing.assert_close(cv["e_q_mean"][legal], wide["e_q_mean"][legal], rtol=0,
                               atol=1e-4)


def test_the_wide_worlds_weights_reuse_the_main_worlds_behaviour_rows():
    """B's first n worlds are A's, so the behaviour oracle's rows of A serve B's weights:
    a control variate with posterior weights queries the behaviour oracle on B's worlds
    only, exactly the rows of a run on B's worlds without the control variate (same
    trajectories here, as the constant bias cancels), not those plus A's again."""
    seeds = [3, 4]
    cfg = dict(posterior=POSTERIOR, seed=5)
    cv = Engine(HashOracle(), EngineConfig(n_samples=6, cv_samples=24, **cfg),
                cv_oracle=BiasedOracle(), behaviour_oracle=NoisyOracle())
    wide = Engine(HashOracle(), EngineConfig(n_samples=24, **cfg),
                  behaviour_oracle=NoisyOracle())
    a, b = cv.play(seeds), wide.play(seeds)
    assert torch.equal(a["transcript_tokens"], b["transcript_tokens"])
    assert wide.behaviour_rows > 0
    assert cv.behaviour_rows == wide.behaviour_rows


class _NoReuse(pipeline._RowCache):
    """A row cache that never holds anything: every world is evaluated again."""

    @property
    def rows(self):
        return None

    @rows.setter
    def rows(self, value):
        pass


@pytest.mark.parametrize("config", [
    dict(n_samples=6, cv_samples=24),
    dict(n_samples=4, cv_samples=64, sem=2.0, max_samples=32),
    dict(n_samples=4, sem=2.0, max_samples=32),
], ids=["control-variate", "adaptive-control-variate", "adaptive"])
def test_reusing_behaviour_rows_changes_no_record(monkeypatch, config):
    """The behaviour rows reused across the control variate's two world sets and across
    adaptive rounds give the records of evaluating every world's rows again, bit for bit
    (deterministic oracles), for fewer behaviour-oracle rows."""
    seeds = [3, 4]
    cfg = EngineConfig(posterior=POSTERIOR, seed=5, **config)
    cv = {"cv_oracle": NoisyOracle()} if "cv_samples" in config else {}
    reuse = Engine(HashOracle(), cfg, behaviour_oracle=NoisyOracle(), **cv)
    a = reuse.play(seeds)
    caches = pipeline._DecisionCaches
    monkeypatch.setattr(pipeline, "_DecisionCaches", lambda: caches(behaviour=_NoReuse()))
    again = Engine(HashOracle(), cfg, behaviour_oracle=NoisyOracle(), **cv)
    b = again.play(seeds)
    for name in a.tensors:
        assert torch.equal(a[name], b[name]), name
    assert 0 < reuse.behaviour_rows < again.behaviour_rows
    assert reuse.oracle_rows == again.oracle_rows and reuse.cv_rows == again.cv_rows


def test_a_behaviour_oracle_weights_the_worlds_and_counts_its_rows_apart():
    seeds = [6]
    cfg = EngineConfig(n_samples=8, posterior=POSTERIOR, seed=1)
    main = HashOracle()
    plain = Engine(main, cfg)
    same = Engine(HashOracle(), cfg, behaviour_oracle=HashOracle())
    a, b = plain.play(seeds), same.play(seeds)
    for name in a.tensors:
        assert torch.equal(a[name], b[name]), name
    assert same.behaviour_rows > 0 and plain.behaviour_rows == 0
    assert plain.oracle_rows == same.oracle_rows + same.behaviour_rows
    other = Engine(HashOracle(), cfg, behaviour_oracle=NoisyOracle()).play(seeds)
    assert not torch.equal(other["ess"], a["ess"])


def test_a_control_variate_with_posterior_needs_a_behaviour_oracle():
    cfg = EngineConfig(n_samples=4, cv_samples=8, posterior=POSTERIOR)
    with pytest.raises(ValueError, match="behaviour oracle"):
        Engine(HashOracle(), cfg, cv_oracle=NoisyOracle())
    Engine(HashOracle(), cfg, cv_oracle=NoisyOracle(), behaviour_oracle=NoisyOracle())


def test_engine_needs_the_oracle_and_the_worlds_together():
    with pytest.raises(ValueError, match="both"):
        Engine(HashOracle(), EngineConfig(n_samples=4, cv_samples=8))
    with pytest.raises(ValueError, match="both"):
        Engine(HashOracle(), EngineConfig(n_samples=4), cv_oracle=HashOracle())


def test_invariants_catch_a_broken_correction():
    r = Engine(HashOracle(), EngineConfig(n_samples=4, cv_samples=8),
               cv_oracle=BiasedOracle()).play([7])
    assert check_invariants(r) == []
    row = int(torch.nonzero((~r["legal_mask"]).any(1) & (r["cv_worlds"] > 0))[0, 0])
    slot = int(torch.nonzero(~r["legal_mask"][row])[0, 0])
    bad = dict(r.tensors)
    bad["cv_shift"] = bad["cv_shift"].clone()
    bad["cv_shift"][row, slot] = 1.0
    assert any("cv_shift not 0 at an illegal" in p for p in check_invariants(DecisionRecords(bad)))
    bad = dict(r.tensors)
    bad["cv_se"] = bad["cv_se"].clone()
    bad["cv_se"][row, slot] = 0.5
    assert any("cv_se not 0 at an illegal" in p for p in check_invariants(DecisionRecords(bad)))
    bad = dict(r.tensors)
    bad["cv_worlds"] = torch.where(r["cv_worlds"] > 0, 2, 0)
    assert any("cv_worlds below n_worlds" in p for p in check_invariants(DecisionRecords(bad)))


# ------------------------------------------------------------------------------ the command
def test_generate_writes_the_correction_and_records_the_setting(tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("generate", "--out", out, *TINY, "--control-variate", "default",
                   "--cv-samples", "12")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["cv_rows"] > 0
    records, metas = load_records(out)
    assert check_invariants(records) == []
    assert int(records["cv_worlds"].max()) == 12 and bool((records["cv_shift"] != 0).any())
    assert metas[0]["control_variate"]["name"] == "default"
    assert metas[0]["control_variate"]["cv_samples"] == 12
    assert metas[0]["settings"]["control_variate"]["cv_samples"] == 12
    # another number of control worlds is another run: resuming into it is refused
    proc = run_cli("generate", "--out", out, *TINY, "--control-variate", "default",
                   "--cv-samples", "16")
    assert_usage_error(proc, "control_variate")
    view = run_cli("view", out, "--print", "1")
    assert "control variate: 12 worlds" in view.stdout, view.stdout


@pytest.mark.parametrize("extra,needles", [
    (["--control-variate", "exact"], ["--control-variate exact", "network"]),
    (["--control-variate", "default", "--oracle", "default"], ["is --oracle itself"]),
    (["--control-variate", "default", "--cv-samples", "2"], ["cv_samples", "at least"]),
    (["--control-variate", "default", "--cv-samples", "0"], ["--cv-samples must be >= 1"]),
    (["--control-variate", "default", "--posterior"], ["--posterior", "--behaviour-oracle"]),
    (["--control-variate", "default", "--posterior", "--behaviour-oracle", "exact"],
     ["--posterior", "--behaviour-oracle"]),
    (["--posterior", "--behaviour-oracle", "default", "--pipeline", "fast"],
     ["--behaviour-oracle", "reference pipeline"]),
    (["--posterior", "--behaviour-oracle", "no/such.safetensors"],
     ["--behaviour-oracle", "no/such"]),
    (["--control-variate", "default", "--pipeline", "fast"], ["reference pipeline"]),
    (["--control-variate", "no/such/weights.safetensors"], ["--control-variate", "no/such"]),
])
def test_generate_refuses_bad_control_variates(tmp_path, extra, needles):
    args = list(TINY)
    for flag in ("--oracle", "--pipeline"):            # the case's own value replaces TINY's
        if flag in extra:
            i = args.index(flag)
            del args[i:i + 2]
    assert_usage_error(run_cli("generate", "--out", tmp_path / "ds", *args, *extra), *needles)


def test_generate_with_posterior_and_control_variate_and_validate_rebuild_the_behaviour(tmp_path):
    """The CPU default with --posterior: the exact oracle's worlds weighted by the shipped
    network's behaviour model, and corrected by it as control variate. The metadata names
    the behaviour oracle, a resume with another one is refused, and eqfast-validate
    --exact weighs its worlds with it: the solver on the records' own worlds then
    reproduces the records once the correction is undone."""
    out = tmp_path / "ds"
    args = ["--games", "1", "--n-samples", "6", "--cv-samples", "12", "--posterior",
            "--window", "3", "--quiet", "--threads", "1"]
    proc = run_cli("generate", "--out", out, *args)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["behaviour_rows"] > 0 and summary["cv_rows"] > 0
    records, metas = load_records(out)
    assert check_invariants(records) == []
    assert metas[0]["oracle"]["name"] == "exact"
    assert metas[0]["behaviour_oracle"]["name"] == "default"
    assert metas[0]["settings"]["behaviour_oracle"] == metas[0]["behaviour_oracle"]["sha256"]
    assert bool((records["ess"] < records["n_worlds"] - 0.5).any())      # weighted
    proc = run_cli("generate", "--out", out, *args, "--behaviour-oracle", "accurate")
    assert_usage_error(proc, "behaviour_oracle")
    proc = run_cli("validate", out, "--exact", "3", "--max-enumerate", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])["exact"]
    assert report["n_records"] == 3 and report["control_variate"]["shift_rms"] > 0
    assert report["reproduced_max_abs_diff"] < 1e-3, report


def test_behaviour_oracle_without_posterior_is_a_warning(tmp_path):
    proc = run_cli("generate", "--out", tmp_path / "ds", *TINY, "--behaviour-oracle", "default")
    assert proc.returncode == 0, proc.stderr
    assert "--behaviour-oracle has no effect without --posterior" in proc.stderr


def test_cv_samples_alone_is_a_warning(tmp_path):
    proc = run_cli("generate", "--out", tmp_path / "ds", *TINY, "--cv-samples", "50")
    assert proc.returncode == 0, proc.stderr
    assert "--cv-samples has no effect without --control-variate" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["games"] == 2


def test_stage2_and_recompute_read_the_corrected_labels_standard_error():
    """Downstream users of a label's noise take cv_se where the correction applies."""
    from eqfast.data.schema import label_variance
    from eqfast.stage2.data import prepare_rows

    r = Engine(HashOracle(), EngineConfig(n_samples=4, cv_samples=16),
               cv_oracle=BiasedOracle()).play([8])
    applied = (r["cv_worlds"] > 0)[:, None] & r["legal_mask"]
    assert bool(applied.any())
    s2 = prepare_rows(r)["s2"]
    torch.testing.assert_close(s2[applied], r["cv_se"][applied] ** 2)
    exact = r["enumerated"][:, None] & r["legal_mask"]      # every world: no noise at all
    assert bool(exact.any()) and bool((s2[exact] == 0).all())
    torch.testing.assert_close(label_variance(r, ess_offset=1.0)[applied],
                               r["cv_se"].double()[applied] ** 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_exact_oracle_with_a_network_control_on_cuda_equals_the_cpu():
    """The GPU machine's high-fidelity set-up: the solver (on the host's cores) as the main
    oracle, a network on the GPU as the control. Same records as on the CPU: integers bit
    for bit, floats within the network's float32 noise across devices."""
    from eqfast.oracle import ExactOracle
    from eqfast.oracle.network import NetworkOracle, build_network, script_module

    def network(device):
        torch.manual_seed(0)
        net = build_network({"arch": "mlp", "hidden": 32, "depth": 1}).to(device).eval()
        return NetworkOracle(script_module(net), device=device)

    cfg = EngineConfig(n_samples=8, cv_samples=32, sem=2.0, max_samples=32, seed=4)
    seeds = [11, 12]
    cpu = Engine(ExactOracle(), cfg, cv_oracle=network("cpu")).play(seeds)
    gpu = Engine(ExactOracle(), cfg, device="cuda", cv_oracle=network("cuda")).play(seeds)
    assert check_invariants(gpu) == []
    for name in cpu.tensors:
        a, b = cpu[name], gpu[name]
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-3, equal_nan=True, msg=name)
        else:
            assert torch.equal(a, b), name
