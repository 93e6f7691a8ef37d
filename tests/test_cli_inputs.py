"""Bad input to the commands gets a clear message and exit status 2, never a traceback;
output cut short by the reader (`| head`) ends quietly; --help explains every flag; the
records' ESS stays inside its documented range."""
from __future__ import annotations

import argparse
import importlib
import pickle
import re
import subprocess
import sys

import pytest
import torch

from cliutil import TINY, assert_usage_error, cli_env, generate_tiny, run_cli
from eqfast.oracle.weights import DEFAULT_MODEL

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: --device cuda is valid")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("inputs") / "ds"
    generate_tiny(out)
    return out


@pytest.fixture(scope="module")
def not_weights(tmp_path_factory, dataset):
    """Files a user might pass as --oracle that are not oracle weights, by kind."""
    from eqfast.oracle.export import export_torchscript

    d = tmp_path_factory.mktemp("not-weights")
    (d / "notes.txt").write_text("oracle weights are elsewhere\n")
    (d / "cut.safetensors").write_bytes(DEFAULT_MODEL.read_bytes()[:5000])
    with open(d / "model.pkl", "wb") as f:
        pickle.dump({"weights": [1.0, 2.0]}, f)
    export_torchscript(DEFAULT_MODEL, d / "oracle.pt")
    shard = next((dataset / "train").glob("shard_*.safetensors"))
    return {"text": (d / "notes.txt", "no safetensors file"),
            "truncated": (d / "cut.safetensors", "truncated"),
            "pickle": (d / "model.pkl", "pickle"),
            "shard": (shard, "eqfast-generate"),
            "torchscript": (d / "oracle.pt", "TorchScript"),
            "directory": (d, "directory"),
            "missing": (d / "nope.safetensors", "does not exist")}


# ---------------------------------------------------------------------------- generate
@pytest.mark.parametrize("argv,needles", [
    (["--decl", "10"], ["--decl", "10", "0..9"]),
    (["--decl", "foo"], ["--decl", "foo", "0..9"]),
    (["--device", "tpu"], ["--device", "tpu"]),
    (["--threads", "-1"], ["--threads", "-1"]),
    pytest.param(["--device", "cuda"], ["cuda"], marks=NO_CUDA),
    (["--seed-start", "18446744073709551614"], ["--seed-start", "18446744073709551614"]),
    (["--seed-start", str(2**63 - 1)], ["--seed-start", "largest game seed"]),
    (["--games", str(10**30)], ["--games", "largest game seed"]),
    (["--n-samples", "1000000000"], ["--n-samples", "1000000000"]),
    (["--cv-samples", "1000000000", "--control-variate", "default"], ["--cv-samples"]),
    (["--temperature", "nan"], ["--temperature", "nan"]),
    (["--posterior", "--tau", "inf"], ["--tau", "inf"]),
    (["--games-per-batch", "100000000"], ["--games-per-batch"]),
], ids=["decl-10", "decl-foo", "device-tpu", "threads-negative", "device-cuda",
        "seed-start-uint64", "seed-end-past-int64", "games-huge", "n-samples-1e9",
        "cv-samples-1e9", "temperature-nan", "tau-inf", "games-per-batch-huge"])
def test_generate_bad_arguments(tmp_path, argv, needles):
    out = tmp_path / "out"
    assert_usage_error(run_cli("generate", "--out", out, *TINY, *argv), *needles)
    assert not out.exists()


@pytest.mark.parametrize("kind", ["text", "truncated", "pickle", "shard", "torchscript",
                                  "directory", "missing"])
def test_generate_oracle_that_is_not_weights(tmp_path, not_weights, kind):
    path, needle = not_weights[kind]
    out = tmp_path / "out"
    proc = run_cli("generate", "--out", out, *TINY, "--oracle", path)
    assert_usage_error(proc, str(path), needle)
    assert len(proc.stderr.strip().splitlines()) <= 3
    assert not out.exists()
    if kind == "torchscript":      # says what to pass instead
        assert ".safetensors" in proc.stderr and "eqfast-export-oracle" in proc.stderr


def test_generate_warns_about_posterior_flags_without_posterior(tmp_path):
    proc = run_cli("generate", "--out", tmp_path / "out", *TINY, "--games", "1",
                   "--tau", "5", "--window", "4")
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "--tau" in proc.stderr and "--window" in proc.stderr
    assert "--posterior" in proc.stderr and "--beta" not in proc.stderr


# ---------------------------------------------------------------------------- oracle tools
@pytest.mark.parametrize("argv,needles", [
    (["--seed-start", "0", "--deals", "0"], ["--deals"]),
    (["--data", "{tmp}/nowhere"], ["nowhere"]),
    pytest.param(["--seed-start", "0", "--deals", "1", "--device", "cuda"], ["cuda"],
                 marks=NO_CUDA),
], ids=["deals-0", "data-missing", "device-cuda"])
def test_eval_oracle_bad_arguments(tmp_path, argv, needles):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert_usage_error(run_cli("eval-oracle", *argv), *needles)


@pytest.mark.parametrize("sub", ["", "train"])
def test_train_oracle_refuses_a_generate_dataset_and_leaves_nothing(tmp_path, dataset, sub):
    data = dataset / sub if sub else dataset
    run = tmp_path / "run"
    proc = run_cli("train-oracle", "--data", data, "--run", run, "--steps", "1")
    assert_usage_error(proc, str(data), "eqfast-label-oracle")
    assert not run.exists()


# ---------------------------------------------------------------------------- output to a pipe
@pytest.mark.parametrize("command,args", [("view", ["--print", "56"]),
                                          ("validate", ["--outcomes"])])
def test_reader_that_closes_the_pipe_early_gets_no_traceback(dataset, command, args):
    """`eqfast-view ... | head -1`: the reader is gone before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", f"eqfast.cli.{command}", str(dataset), *args],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 0, err


# ---------------------------------------------------------------------------- --help
def _flag_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The help text of every flag as --help prints it (defaults included)."""
    formatter = parser._get_formatter()
    return {a.option_strings[-1] if a.option_strings else a.dest:
            formatter._expand_help(a) if a.help else ""
            for a in parser._actions if not isinstance(a, argparse._HelpAction)}


def _parser(tool: str) -> argparse.ArgumentParser:
    return importlib.import_module(f"eqfast.cli.{tool.replace('-', '_')}").build_parser()


@pytest.mark.parametrize("tool", ["eval-oracle", "export-oracle", "train-oracle", "label-oracle",
                                  "oracle-ladder"])
def test_oracle_tools_explain_every_flag_and_its_default(tool):
    parser = _parser(tool)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = _flag_help(parser)[action.option_strings[-1]]
        assert len(text) > 10, (tool, action.option_strings, text)
        takes_value = action.nargs != 0 and not action.required
        says_default = "(default: " in text or (action.default is None and "left out" in text)
        assert not takes_value or says_default, (tool, action.option_strings, text)
    assert run_cli(tool, "--help").returncode == 0


@pytest.mark.parametrize("tool", ["eval-oracle", "export-oracle", "train-oracle", "generate",
                                  "validate", "view", "label-oracle", "oracle-ladder", "relabel",
                                  "iterate"])
def test_help_states_each_default_once(tool):
    """No "(default: None)" after a help that already says what happens by default, nor
    "(default: False)" after an on/off switch."""
    for flag, text in _flag_help(_parser(tool)).items():
        stated = re.findall(r"\(default|defaults to|default:", text)
        assert len(stated) <= 1, (tool, flag, text)
        assert "(default: None)" not in text and "(default: False)" not in text, (tool, flag, text)


def test_view_help_states_the_split_default():
    assert "default: all" in _flag_help(_parser("view"))["--split"]


def test_readme_says_where_oracle_labelling_happens():
    from cliutil import REPO
    line = next(l for l in (REPO / "README.md").read_text().splitlines()
                if l.startswith("| `eqfast-train-oracle`"))
    assert "eqfast-label-oracle" in line


# ---------------------------------------------------------------------------- ess
def test_ess_never_exceeds_n_worlds(tmp_path):
    """float32 rounding of 1 / sum w^2 with N = 100 equal weights gives 100.00002; the
    record holds a value inside [1, n_worlds], as docs/DATASET.md states."""
    from eqfast.cli import generate
    from eqfast.data.shards import load_records

    out = tmp_path / "ds"
    assert generate.main(["--out", str(out), "--games", "1", "--n-samples", "100",
                          "--pipeline", "reference", "--threads", "1", "--quiet"]) == 0
    records, _ = load_records(out)
    assert bool((records["ess"] <= records["n_worlds"].float()).all())
    assert bool((records["ess"] >= 1).all())


def test_report_checks_its_output_path_before_the_work(tmp_path, dataset, monkeypatch, capsys):
    """--out in a missing or unwritable directory, or of another kind, is refused at once,
    not after the dataset was read and drawn."""
    from eqfast.analysis import report as report_module
    from eqfast.cli.report import main as report_main

    monkeypatch.setattr(report_module, "write_report",
                        lambda *a, **kw: pytest.fail("the work started"))
    for out, needle in ((tmp_path / "missing" / "r.html", "missing"),
                        (tmp_path / "r.txt", ".png or an .html")):
        assert report_main([str(dataset), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert needle in err and str(out) in err, err


@pytest.mark.parametrize("module,argv", [
    ("generate", ["--out", "", "--games", "1"]),
    ("generate", ["--out", "  ", "--games", "1"]),
    ("report", ["{ds}", "--out", ""]),
    ("bid", ["--hand", "6-6,6-5,6-4,6-3,6-2,6-1,6-0", "--out", ""]),
    ("arena", ["--policies", "random,rules", "--hands", "1", "--out", ""]),
    ("label_oracle", ["--out", ""]),
    ("export_oracle", ["--out", ""]),
    ("train_oracle", ["--data", "{ds}", "--run", ""]),
    ("train_stage2", ["--data", "{ds}", "--run", ""]),
    ("view", [""]),
    ("validate", ["", "--outcomes"]),
], ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_an_empty_path_is_refused(tmp_path, monkeypatch, capsys, module, argv):
    """`--out ''` (an unset shell variable) would mean the current directory: refused
    with exit 2 before anything is written."""
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{ds}", str(tmp_path)) for a in argv]
    main = importlib.import_module(f"eqfast.cli.{module}").main
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "empty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--oracle", "--control-variate", "--behaviour-oracle"])
def test_an_unknown_oracle_name_lists_the_valid_ones(tmp_path, flag):
    extra = ["--posterior"] if flag == "--behaviour-oracle" else []
    proc = run_cli("generate", "--out", tmp_path / "out", *TINY, *extra, flag, "bogus")
    assert_usage_error(proc, flag, "bogus", "'default'", "'accurate'", "'exact'", ".safetensors")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module,argv", [
    ("generate", ["--help"]), ("generate", ["--out", "x", "--games", "0"]),
    ("generate", ["--out", "x", "--temperature", "nan"]),
    ("view", ["--help"]), ("view", ["x", "--bogus"]),
    ("validate", ["--help"]), ("validate", ["x"]),
    ("report", ["--help"]), ("bid", ["--help"]), ("bid", ["--hand", "6-6", "--completions", "0"]),
    ("solve", ["--help"]), ("export_oracle", ["--help"]), ("eval_oracle", ["--help"]),
    ("eval_stage2", ["--help"]), ("train_oracle", ["--help"]), ("label_oracle", ["--help"]),
    ("arena", ["--help"]), ("arena", ["--policies", "random,bogus", "--hands", "2"]),
    ("arena", ["--policies", "random,rules", "--hands", "3"]),
    ("oracle_ladder", ["--help"]), ("oracle_ladder", ["--steps", "5"]),
    ("train_stage2", ["--help"]), ("train_stage2", ["--data", "x", "--run", "y", "--steps", "0"]),
])
def test_help_and_argument_errors_do_not_import_torch(module, argv):
    """Importing torch takes 1.5 s on a quiet machine and over 10 s on a loaded one: --help
    and argument errors answer without it."""
    code = ("import sys\n"
            f"from eqfast.cli.{module} import main\n"
            "try:\n"
            f"    main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.stderr.strip().splitlines()[-1] == "False", proc.stderr


def test_the_torch_free_names_are_the_modules_own():
    """The defaults and names the commands read without torch are those the code uses."""
    from eqfast.analysis.ladder import LadderConfig
    from eqfast.play import league, names, policies
    from eqfast.stage2 import data, defaults, model, train

    assert tuple(policies.POLICIES) == names.POLICY_NAMES
    assert policies.USAGE is names.USAGE and league.DEFAULT_PANEL is names.DEFAULT_PANEL
    assert model.DEFAULT_CONFIG is defaults.DEFAULT_CONFIG
    assert set(model.DEFAULT_CONFIG) == set(model.CONFIG_RANGES)
    assert data.FORCED_WEIGHT == defaults.FORCED_WEIGHT
    assert train.LENGTH_GROUPS == defaults.LENGTH_GROUPS
    from eqfast.oracle.network import DEFAULT_CONFIGS
    assert LadderConfig().arch == DEFAULT_CONFIGS["mlp"]


def test_validate_reports_progress_on_stderr(dataset):
    proc = run_cli("validate", dataset, "--outcomes")
    assert proc.returncode == 0, proc.stderr
    assert "eqfast-validate: [" in proc.stderr and "--outcomes" in proc.stderr
    quiet = run_cli("validate", dataset, "--outcomes", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
