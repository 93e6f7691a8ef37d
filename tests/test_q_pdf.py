"""--q-pdf: each move's distribution of Q over the worlds. Against the moments it is drawn
from (its mean is E[Q], exactly for the solver's integer Q), the same in both pipelines and
whatever the batch, written by eqfast-generate, and checked by the invariants."""

import torch
from cliutil import TINY, run_cli
from fakes import HashOracle

from eqfast.data.schema import DecisionRecords, check_invariants
from eqfast.data.shards import load_records
from eqfast.engine.fast import FastEngine
from eqfast.engine.moments import q_histogram
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.oracle.exact import ExactOracle

POINTS = torch.arange(-42, 43, dtype=torch.float64)

def test_histogram_by_hand():
    q = torch.tensor([[[3.0] * 7, [3.4] * 7, [-42.0] * 7, [9.0] * 7]])
    logw = torch.tensor([[0.0, 0.0, torch.log(torch.tensor(2.0)), float("-inf")]])
    legal = torch.tensor([[True] * 6 + [False]])
    h = q_histogram(q, legal, logw)
    assert h.shape == (1, 7, 85)
    # weights 1/4, 1/4, 1/2, 0: Q 3 and 3.4 both round to 3; the padding world is not counted
    assert torch.allclose(h[0, 0, 42 + 3], torch.tensor(0.5)) and float(h[0, 0, 0]) == 0.5
    assert float(h[0, 0].sum()) == 1.0 and float(h[0, 6].abs().sum()) == 0.0

def test_exact_oracle_pdf_mean_is_e_q_and_pipelines_agree():
    cfg = EngineConfig(n_samples=8, seed=3, q_pdf=True)
    ref = Engine(ExactOracle(), cfg).play([21, 22])
    fast = FastEngine(ExactOracle(), cfg, backend="reference").play([21, 22])
    assert torch.equal(ref["q_pdf"], fast["q_pdf"])
    legal = ref["legal_mask"]
    pdf = ref["q_pdf"].double()
    assert torch.allclose(pdf.sum(-1)[legal], torch.ones(int(legal.sum()), dtype=torch.float64),
                          atol=1e-6)
    centre = (pdf * POINTS).sum(-1)
    assert torch.allclose(centre[legal], ref["e_q_mean"].double()[legal], atol=1e-4)
    assert check_invariants(ref) == []
    alone = Engine(ExactOracle(), cfg).play([22])        # another batch: the same records
    assert torch.equal(alone["q_pdf"], ref["q_pdf"][ref["seed"] == 22])

def test_invariants_catch_a_broken_pdf():
    r = Engine(HashOracle(), EngineConfig(n_samples=6, seed=1, q_pdf=True)).play([5])
    assert check_invariants(r) == []
    bad = dict(r.tensors)
    bad["q_pdf"] = bad["q_pdf"].clone()
    legal_row = torch.nonzero(r["legal_mask"].sum(1) >= 2)[0, 0]
    slot = int(torch.nonzero(r["legal_mask"][legal_row])[0, 0])
    bad["q_pdf"][legal_row, slot] = torch.roll(bad["q_pdf"][legal_row, slot], 5)   # mean +5
    assert any("half a point" in p for p in check_invariants(DecisionRecords(bad)))

def test_generate_writes_q_pdf_and_records_the_setting(tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("generate", "--out", out, *TINY, "--q-pdf")
    assert proc.returncode == 0, proc.stderr
    records, metas = load_records(out)
    assert records["q_pdf"].shape == (len(records), 7, 85)
    assert metas[0]["settings"]["q_pdf"] is True
    proc = run_cli("generate", "--out", out, *TINY)                  # resume without it
    assert proc.returncode == 2 and "q_pdf" in proc.stderr
