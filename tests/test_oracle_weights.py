"""Oracle weights files: safetensors round trip with metadata, and clear errors on bad files."""
import json
import pickle

import pytest
import torch
from safetensors.torch import save_file

from eqfast.oracle import OracleWeightsError, build_network, load_network, load_oracle, save_weights
from eqfast.oracle.export import example_inputs, export_torchscript
from eqfast.oracle.network import OracleModule
from eqfast.oracle.weights import DEFAULT_MODEL, read_weights

CONFIG = {"arch": "mlp", "hidden": 32, "depth": 1, "roles": 1}


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(1)
    net = build_network(CONFIG).eval()
    path = tmp_path / "w.safetensors"
    save_weights(path, net, CONFIG, data_hash="abc123", metrics={"q_gap": 0.5},
                 train={"seed": 3})
    return net, path


def test_round_trip_same_outputs_and_metadata(saved):
    net, path = saved
    loaded, meta = load_network(path)
    x = example_inputs(6)
    with torch.no_grad():
        assert torch.equal(OracleModule(net)(*x), OracleModule(loaded)(*x))
    assert meta["config"] == CONFIG and meta["data_hash"] == "abc123"
    assert meta["metrics"] == {"q_gap": 0.5} and meta["train"] == {"seed": 3}
    assert meta["token_layout_version"] == "1"
    oracle = load_oracle(path, script=True)
    with torch.no_grad():
        assert torch.allclose(oracle.module(*x), OracleModule(net)(*x), atol=1e-5)


def test_export_writes_loadable_torchscript(saved, tmp_path):
    net, path = saved
    out = tmp_path / "oracle.pt"
    export_torchscript(path, out)
    module = torch.jit.load(str(out))
    x = example_inputs(5)
    with torch.no_grad():
        assert torch.allclose(module(*x), OracleModule(net)(*x), atol=1e-5)


def test_missing_file(tmp_path):
    with pytest.raises(OracleWeightsError, match=r"nope\.safetensors does not exist"):
        load_network(tmp_path / "nope.safetensors")


def test_truncated_file(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(OracleWeightsError, match=r"cut\.safetensors is not a readable safetensors"):
        load_network(bad)


def test_pickle_is_never_loaded(tmp_path):
    bad = tmp_path / "pickled.safetensors"
    bad.write_bytes(pickle.dumps({"embed.weight": [1.0]}))
    with pytest.raises(OracleWeightsError, match="not a readable safetensors"):
        load_network(bad)


def test_wrong_format_and_layout_version(saved, tmp_path):
    net, _ = saved
    tensors = {k: v.contiguous() for k, v in net.state_dict().items()}
    plain = tmp_path / "plain.safetensors"
    save_file(tensors, str(plain))
    with pytest.raises(OracleWeightsError, match="'format' is None"):
        load_network(plain)
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata={"format": "eqfast-oracle", "format_version": "1",
                                           "token_layout_version": "0",
                                           "config": json.dumps(CONFIG)})
    with pytest.raises(OracleWeightsError, match="token_layout_version"):
        load_network(old)


def test_shape_mismatch_names_tensor(saved, tmp_path):
    net, _ = saved
    other = tmp_path / "other.safetensors"
    save_weights(other, net, {**CONFIG, "hidden": 48})  # config disagrees with the tensors
    with pytest.raises(OracleWeightsError, match=r"tensor '\w+(\.\w+)*' is torch.float32\[\d+"):
        load_network(other)


def test_missing_tensor_named(saved, tmp_path):
    net, path = saved
    _, meta = read_weights(path)
    tensors = {k: v.contiguous() for k, v in net.state_dict().items() if k != "head.bias"}
    raw = {k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in meta.items()}
    bad = tmp_path / "missing.safetensors"
    save_file(tensors, str(bad), metadata=raw)
    with pytest.raises(OracleWeightsError, match=r"missing tensors \['head.bias'\]"):
        load_network(bad)


def test_default_model_is_shipped_and_loads():
    assert DEFAULT_MODEL.exists(), f"the package must ship its default oracle at {DEFAULT_MODEL}"
    from eqfast.oracle import load_default_oracle

    oracle = load_default_oracle()
    x = example_inputs(4)
    with torch.no_grad():
        q = oracle.module(*x)
    assert q.shape == (4, 7) and torch.isfinite(q).all()
    assert DEFAULT_MODEL.stat().st_size < 8 * 1024 * 1024


def test_accurate_model_is_shipped_and_beats_the_default_on_fresh_deals():
    """The GPU default: loads through the factory, is what CUDA runs get without --oracle,
    and its training record names the data, the machine and a fresh-deal evaluation better
    than the default's recorded figure (both measured on deals 1e9.., docs/ORACLE.md)."""
    from eqfast.oracle.factory import default_spec, oracle_from_spec
    from eqfast.oracle.weights import ACCURATE_MODEL, read_weights

    oracle, identity = oracle_from_spec("accurate")
    assert identity["label"] == "shipped accurate" and identity["path"] == str(ACCURATE_MODEL)
    with torch.no_grad():
        q = oracle.module(*example_inputs(4))
    assert q.shape == (4, 7) and torch.isfinite(q).all()
    assert default_spec("cuda") == "accurate" and default_spec("cpu") == "default"
    _, meta = read_weights(ACCURATE_MODEL)
    for key in ("data", "machine", "command", "rows_seen", "wall_s"):
        assert key in meta["train"], key
    assert meta["metrics"]["fresh"]["q_gap"] < 0.40 and meta["metrics"]["fresh"]["positions"] == 56000
    assert ACCURATE_MODEL.stat().st_size < 16 * 1024 * 1024


def test_oracle_factory_builds_every_kind():
    """eqfast.oracle.factory.oracle_from_spec: the one way commands build an oracle."""
    from eqfast.oracle.exact import HybridOracle
    from eqfast.oracle.factory import oracle_from_spec

    oracle, identity = oracle_from_spec("default")
    assert identity["label"] == "shipped default" and len(identity["sha256"]) == 64
    hybrid, identity = oracle_from_spec("default", exact_tricks=3, quantize=True)
    assert isinstance(hybrid, HybridOracle) and identity["sha256"].endswith("+exact3")
    assert identity["label"] == "shipped default (int8)+exact3"
    _, identity = oracle_from_spec("random:mlp")
    assert identity["label"].startswith("random-weight mlp (")
    assert oracle_from_spec("exact")[1]["name"] == "exact"
    with pytest.raises(ValueError, match="unknown architecture"):
        oracle_from_spec("random:nope")
    with pytest.raises(OracleWeightsError, match="does not exist"):
        oracle_from_spec("/nonexistent/weights.safetensors")
    with pytest.raises(ValueError, match="exact oracle has none"):
        oracle_from_spec("exact", quantize=True)
