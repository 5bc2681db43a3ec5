"""Distributed training with the fused layers, in separate processes started by torchrun:
gloo on the CPU (kernels through the Triton interpreter), NCCL on two GPUs when there are.

- every fused module under DDP, FSDP2 (plain, activation checkpointing, bf16 mixed
  precision) and tensor parallelism (SwiGLU, PackedSwiGLU, GEGLU): outputs and gradients against the module
  unwrapped on the whole batch (tests/distributed_worker.py);
- data-parallel DLRM training (fusedmlp.dlrm.parallel): 2 ranks equal one process on the
  global batch, and a checkpoint resumes on a different number of ranks;
- on GPUs, the tables' exchange through symmetric memory against NCCL's
  (tests/peer_gather_worker.py).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import fp32_matmul_precision, rel_err

from fusedmlp.dlrm.train import add_train_arguments, train

WORKER = Path(__file__).with_name("distributed_worker.py")
MODULE_LINES = {"ddp": 7, "fsdp": 7, "fsdp_checkpoint": 7, "fsdp_mixed": 7, "tp": 4}
# a small DLRM, so that the interpreter trains it in seconds
SMALL = {"bottom_mlp": [32, 16], "top_mlp": [32, 1]}


def torchrun(nproc, *args, device="cpu", timeout=600, env=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", FUSEDMLP_AUTOTUNE="0", **(env or {}))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done.stdout


# The interpreter runs of the fused kernels are the CPU machine's tests: on a GPU machine the
# GPU variants run instead (and the image's Triton 3.6 interpreter cannot loop to a bound that
# is a kernel argument: "only 0-dimensional arrays can be converted to Python scalars").
INTERPRETER_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU variant runs on this machine")


@INTERPRETER_ONLY
@pytest.mark.parametrize("case", sorted(MODULE_LINES))
def test_fused_modules_distributed_on_cpu(case):
    out = torchrun(2, str(WORKER), case, "cpu")
    assert sum(line.startswith(case + " ") for line in out.splitlines()) == MODULE_LINES[case] + (3 if case == "tp"
                                                                                                   else 0), out


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("case", sorted(MODULE_LINES))
def test_fused_modules_distributed_on_gpus(case):
    out = torchrun(2, str(WORKER), case, "cuda", device="cuda")
    assert sum(line.startswith(case + " ") for line in out.splitlines()) >= MODULE_LINES[case], out


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """121 synthetic Criteo lines (109 train rows, 12 validation rows, both classes) and a small
    model config: the interpreter's scan in the embedding update is slow, so few lookups."""
    from fusedmlp.dlrm.data import synthesize, write_tsv

    folder = tmp_path_factory.mktemp("dlrm")
    write_tsv(folder / "s.tsv", *synthesize(121, seed=5))
    (folder / "small.json").write_text(json.dumps(SMALL))
    return folder


def _train_args(data, *extra):
    return ["--data", str(data / "s.tsv"), "--config", str(data / "small.json"), "--quiet", "--optimizer", "sgd",
            "--lr", "0.05", "--eval-batch-size", "256", *extra]


def _one_process(data, *extra, device="cpu"):
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return train(parser.parse_args(_train_args(data, "--device", device, *extra)))


def _assert_same_model(a_path, b_path, bound):
    a, b = torch.load(a_path, weights_only=False), torch.load(b_path, weights_only=False)
    assert a["progress"] == b["progress"]
    for name in b["model"]:
        assert rel_err(a["model"][name], b["model"][name].double()) < bound, name


@pytest.mark.parametrize("impl", ["eager", "eager_sparse", pytest.param("fused", marks=INTERPRETER_ONLY)])
def test_dlrm_two_ranks_equal_one_process(small_data, tmp_path, impl):
    """2 ranks x 25 rows = one process on 50-row batches: 3 steps make the epoch (109 rows; the
    3rd global batch is short and uneven: 5 and 4 rows, so the exchanges pad), same weights and
    validation metrics. The eager run goes through `fusedmlp dlrm train --nproc 2`."""
    flags = ["--impl", impl.split("_")[0]] + (["--sparse"] if impl == "eager_sparse" else [])
    two, one = tmp_path / "two.pt", tmp_path / "one.pt"
    metrics = tmp_path / "two.json"
    common = [*flags, "--steps", "3", "--device", "cpu"]
    if impl == "eager":
        env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([sys.executable, "-m", "fusedmlp.cli", "dlrm", "train", "--nproc", "2",
                               *_train_args(small_data, *common, "--batch-size", "25", "--checkpoint", str(two),
                                            "--metrics-out", str(metrics))],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-6000:]
        assert json.loads(done.stdout[done.stdout.index("{"):])["world_size"] == 2
    else:
        torchrun(2, "-m", "fusedmlp.dlrm.train", *_train_args(small_data, *common, "--batch-size", "25",
                                                               "--checkpoint", str(two), "--metrics-out",
                                                               str(metrics)))
    result = _one_process(small_data, *flags, "--steps", "3", "--batch-size", "50", "--checkpoint", str(one))
    _assert_same_model(two, one, 1e-5)
    parallel = json.loads(metrics.read_text())
    assert parallel["world_size"] == 2 and parallel["global_batch_size"] == 50 and parallel["epochs_done"] == 1
    assert parallel["validation"]["rows"] == result["validation"]["rows"] == 12
    assert abs(parallel["validation"]["auc"] - result["validation"]["auc"]) < 1e-4
    assert abs(parallel["final_loss"] - result["final_loss"]) < 1e-5


def test_dlrm_resumes_on_another_number_of_ranks(small_data, tmp_path):
    """1 step on 2 ranks (25 rows each), then resumed in one process (50 rows) to step 5 (across
    the epoch's end): the same as 5 steps in one process."""
    first, resumed, straight = tmp_path / "first.pt", tmp_path / "resumed.pt", tmp_path / "straight.pt"
    torchrun(2, "-m", "fusedmlp.dlrm.train", *_train_args(small_data, "--impl", "eager", "--device", "cpu",
                                                           "--batch-size", "25", "--steps", "1",
                                                           "--checkpoint", str(first)))
    assert torch.load(first, weights_only=False)["progress"] == {"step": 1, "epoch": 0, "position": 50}
    _one_process(small_data, "--impl", "eager", "--batch-size", "50", "--steps", "5", "--resume", str(first),
                 "--checkpoint", str(resumed))
    _one_process(small_data, "--impl", "eager", "--batch-size", "50", "--steps", "5", "--checkpoint", str(straight))
    _assert_same_model(resumed, straight, 1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("exchange", ["copy_engine", "nccl"])
@pytest.mark.parametrize("graph", [False, True], ids=["plain", "cuda_graph"])
def test_dlrm_two_gpus_equal_one(small_data, tmp_path, graph, exchange):
    """2 GPUs x 25 rows = one GPU on 50-row batches (fused impl; with --cuda-graph the
    captured step holds the collectives), the tables' exchange through symmetric memory (the
    default on one host) or NCCL (FUSEDMLP_EXCHANGE=nccl)."""
    two, one = tmp_path / "two.pt", tmp_path / "one.pt"
    extra = ["--cuda-graph", "on" if graph else "off"]
    torchrun(2, "-m", "fusedmlp.dlrm.train", *_train_args(small_data, "--impl", "fused", "--device", "cuda",
                                                           "--batch-size", "25", "--steps", "6", *extra,
                                                           "--checkpoint", str(two)), device="cuda",
             env={"FUSEDMLP_EXCHANGE": exchange})
    _one_process(small_data, "--impl", "fused", "--batch-size", "50", "--steps", "6", *extra,
                 "--checkpoint", str(one), device="cuda")
    _assert_same_model(two, one, 1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_copy_engine_exchange_on_gpus():
    """The tables' all-gather through symmetric memory (fusedmlp._distributed.PeerGather)
    against NCCL's, plain and in a CUDA graph, and the data-parallel table update it carries
    against the NCCL path's, bit for bit (tests/peer_gather_worker.py)."""
    out = torchrun(2, str(WORKER.with_name("peer_gather_worker.py")), device="cuda")
    assert "peer gather: exchanges, graphs and the table update checked on 2 GPUs" in out


def test_one_buffer_finds_gradients_that_lie_back_to_back():
    """``one_buffer`` (what lets DataParallel.reduce_early all-reduce a module's gradients in
    place): a flat view over views that tile one buffer, in any order; None for a gap, an
    overlap, separate tensors or mixed dtypes; and the fused MLP's gradients are such views (on a GPU
    at fp32 precision "high", where the fused kernels run the fp32 stack)."""
    from fusedmlp import FusedMLP
    from fusedmlp.dlrm.parallel import one_buffer

    flat = torch.randn(10)
    view = one_buffer([flat[6:], flat[:6].view(2, 3)])
    assert view is not None and view.data_ptr() == flat.data_ptr() and torch.equal(view, flat)
    assert one_buffer([flat[:4], flat[5:]]) is None  # a gap
    assert one_buffer([flat[:6], flat[4:]]) is None  # an overlap
    assert one_buffer([torch.randn(3), torch.randn(4)]) is None
    assert one_buffer([flat[:6].view(3, 2).t(), flat[6:]]) is None  # not contiguous
    assert one_buffer([flat[:6], flat.view(torch.int32)[6:]]) is None  # two dtypes
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mlp = FusedMLP((13, 24, 8, 1), activation="relu").to(device)
    with fp32_matmul_precision("high"):  # at "highest" a GPU's fp32 stack runs per layer on cuBLAS
        mlp(torch.randn(20, 13, device=device)).sum().backward()
    grads = [p.grad for p in mlp.parameters()]
    view = one_buffer(grads)
    if device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        # the fused op's gradients: views of its one flat buffer
        assert view is not None and view.numel() == sum(g.numel() for g in grads)
        before = [g.clone() for g in grads]
        view.mul_(2.0)  # an in-place all-reduce writes through to every gradient
        assert all(torch.equal(g, 2 * b) for g, b in zip(grads, before))
