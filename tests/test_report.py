"""eqfast-report: the figures' numbers are the records' own, the files are what they say
(PNG, HTML with the figure and tables), and bad input exits 2."""
import json

import pytest
from cliutil import generate_tiny

pytest.importorskip("matplotlib", reason="eqfast-report needs the 'report' extra")

from eqfast.analysis.report import dataset_figures, run_figures  # noqa: E402
from eqfast.cli import report  # noqa: E402
from eqfast.data.shards import load_records  # noqa: E402


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "ds"
    generate_tiny(out, "--epsilon", "0.3")
    return out


def test_dataset_numbers_are_the_records(dataset):
    records, _ = load_records(dataset)
    n = dataset_figures(records)
    R = len(records)
    assert n["n_records"] == R == 2 * 28 and n["n_games"] == 2
    assert sum(n["modes"].values()) == R and sum(n["legal_moves"]) == R
    assert len(n["ess_sampled"]) + len(n["ess_enumerated"]) == R
    assert n["enumerated"] == int(records["enumerated"].sum())
    assert sum(n["declarations"].values()) == 2
    assert sum(b["n"] for b in n["by_decision"]) == R
    taken = records["e_q_mean"].gather(1, records["action_taken"][:, None])[:, 0]
    assert n["outcome"]["e_q_taken"] == taken.double().tolist()
    assert n["outcome"]["realized"] == records["realized_to_go"].double().tolist()


def test_png_and_html_reports(dataset, tmp_path, capsys):
    png, page = tmp_path / "r.png", tmp_path / "r.html"
    assert report.main([str(dataset), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(capsys.readouterr().out)["kind"] == "dataset"
    assert report.main([str(dataset), "--out", str(page)]) == 0
    text = page.read_text()
    assert "data:image/png;base64," in text and "<table>" in text and "greedy" in text


def test_training_run_report(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    points = [{"step": s, "rows_seen": s * 64, "wall_s": s / 10, "q_gap": 1.0 / s,
               "q_mae": 5.0 / s, "accuracy": 0.5} for s in (10, 20, 30)]
    (run / "history.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    assert run_figures(run)["history"] == points
    assert report.main([str(run), "--out", str(tmp_path / "c.png")]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "training run"


@pytest.mark.parametrize("argv,needle", [
    (["{src}", "--out", "{tmp}/r.pdf"], "a .png or an .html file"),
    (["{tmp}/missing", "--out", "{tmp}/r.png"], "no such file or directory"),
])
def test_bad_input_exits_2(dataset, tmp_path, capsys, argv, needle):
    argv = [a.format(src=dataset, tmp=tmp_path) for a in argv]
    assert report.main(argv) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "r.png").exists()


def test_progress_lines_on_stderr_unless_quiet(dataset, tmp_path, capsys):
    assert report.main([str(dataset), "--out", str(tmp_path / "r.png")]) == 0
    err = capsys.readouterr().err
    assert "eqfast-report: [" in err and "reading" in err and "drawing" in err
    assert report.main([str(dataset), "--out", str(tmp_path / "q.png"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
