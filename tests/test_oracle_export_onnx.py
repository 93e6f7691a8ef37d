"""`eqfast-export-oracle --format onnx`: the ONNX file runs in onnxruntime and matches the
torch module within 1e-4 points on played positions; a failed check writes nothing."""
from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra (pip install -e '.[onnx]')")

import eqfast.oracle.export as export  # noqa: E402
from eqfast.cli.export_oracle import main  # noqa: E402
from eqfast.oracle.weights import DEFAULT_MODEL  # noqa: E402


def test_onnx_export_matches_torch_on_played_positions(tmp_path, capsys):
    out = tmp_path / "oracle.onnx"
    assert main(["--format", "onnx", "--out", str(out)]) == 0
    assert "max |dQ|" in capsys.readouterr().out
    model = onnx.load(str(out))
    assert {p.key for p in model.metadata_props} == {"eqfast_oracle_meta.json"}
    # an independent run: other positions, another batch size than the export's example
    inputs = export.check_positions(deals=2, first_deal=2_100_000_000)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: t.numpy() for n, t in zip(export.INPUT_NAMES, inputs)})[0]
    import torch

    from eqfast.oracle.network import OracleModule
    from eqfast.oracle.weights import load_network

    network, _ = load_network(DEFAULT_MODEL)
    with torch.no_grad():
        want = OracleModule(network).eval()(*inputs).numpy()
    assert got.shape == (56, 7) and abs(got - want).max() <= export.ONNX_TOLERANCE


def test_failed_check_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "ONNX_TOLERANCE", -1.0)       # no export can pass
    out = tmp_path / "oracle.onnx"
    with pytest.raises(ValueError, match="nothing written"):
        export.export_onnx(DEFAULT_MODEL, out, check_deals=1)
    assert list(tmp_path.iterdir()) == []


def test_missing_onnx_packages_exit_2(tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    assert main(["--format", "onnx", "--out", str(tmp_path / "o.onnx")]) == 2
    assert "pip install -e '.[onnx]'" in capsys.readouterr().err
