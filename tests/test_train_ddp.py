"""The trainer under torchrun: two gloo ranks on the CPU follow the one-process run of the
same global batches (up to float summation order), resume bit-identically, and write the
run directory once."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

pytest.importorskip("eqfast.solver._csolver", reason="C solver not built")
import torch.distributed  # noqa: E402

from eqfast.cli import train_oracle  # noqa: E402
from eqfast.oracle.labelling import generate  # noqa: E402
from eqfast.oracle.weights import load_network  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not built in", allow_module_level=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp-shards")
    generate(d, shards=2, deals_per_shard=12, log=lambda *a, **k: None)
    return d


def _args(data, run, steps, extra=()):
    return ["--data", str(data), "--run", str(run), "--hidden", "24", "--depth", "1",
            "--batch", "64", "--eval-every", "10", "--ckpt-every", "10", "--val-rows", "200",
            "--warmup", "5", "--steps", str(steps), "--device", "cpu", *extra]


def _torchrun(args, ranks=2):
    for attempt in range(2):
        with socket.socket() as s:          # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-addr", "127.0.0.1", "--master-port", str(port),
               "-m", "eqfast.cli.train_oracle",
               *["--run-dir" if a == "--run" else a for a in args]]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        # another process can take the port between its release and the rendezvous
        if done.returncode == 0 or "address already in use" not in done.stderr.lower():
            break
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _weights(run):
    network, meta = load_network(run / "last.safetensors")
    return network.state_dict(), meta


def test_two_ranks_follow_one_process_and_resume(data, tmp_path):
    assert train_oracle.main(_args(data, tmp_path / "one", 20)) == 0
    out = _torchrun(_args(data, tmp_path / "two", 20))
    assert out.count("final val") == 1                       # rank 0 reports, once
    one, _ = _weights(tmp_path / "one")
    two, meta = _weights(tmp_path / "two")
    assert meta["train"]["rows_seen"] == 20 * 64
    for name, x in one.items():
        torch.testing.assert_close(two[name], x, rtol=1e-4, atol=1e-5, msg=name)
    history = [json.loads(line) for line in (tmp_path / "two" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [10, 20]
    # interrupted at step 10 and resumed: the same weights as the uninterrupted 2-rank run
    _torchrun(_args(data, tmp_path / "resumed", 20, ["--stop-at", "10"]))
    _torchrun(_args(data, tmp_path / "resumed", 20))
    resumed, _ = _weights(tmp_path / "resumed")
    for name, x in two.items():
        assert torch.equal(resumed[name], x), name


def test_bf16_training_runs_and_batch_must_split(data, tmp_path, capsys):
    assert train_oracle.main(_args(data, tmp_path / "bf16", 10, ["--precision", "bf16"])) == 0
    fp32_free = _weights(tmp_path / "bf16")[0]
    assert all(v.dtype == torch.float32 for v in fp32_free.values())   # weights stay fp32
    env_rank = {"WORLD_SIZE": "3", "RANK": "0", "LOCAL_RANK": "0"}
    old = {k: os.environ.get(k) for k in env_rank}
    os.environ.update(env_rank)
    try:
        assert train_oracle.main(_args(data, tmp_path / "odd", 10)) == 2   # 64 rows, 3 ranks
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert "multiple of the 3 ranks" in capsys.readouterr().err
    assert not (tmp_path / "odd").exists()


def test_transformer_with_value_head_trains(data, tmp_path, capsys):
    arch = ["--arch", "transformer", "--d-model", "16", "--layers", "1", "--heads", "2",
            "--d-ff", "32", "--roles", "2"]
    run = tmp_path / "value"
    assert train_oracle.main(_args(data, run, 10, [*arch, "--value-head",
                                                   "--value-weight", "0.5"])) == 0
    network, meta = load_network(run / "last.safetensors")
    assert meta["config"]["value_head"] == 1 and network.value.weight.shape == (1, 16)
    assert train_oracle.main(_args(data, tmp_path / "novalue", 10,
                                   [*arch, "--value-weight", "0.5"])) == 2
    assert "value head" in capsys.readouterr().err
