"""The DLRM model (interaction, config, eager vs fused) and the trainer (learning, exact
resume, checkpoints, CLI)."""

import argparse
import json

import pytest
import torch

from conftest import DEVICE
from fusedmlp.dlrm import DLRM, DLRMConfig
from fusedmlp.dlrm.train import add_train_arguments, evaluate_checkpoint, resolve_cuda_graph, train

SMALL = dict(cardinalities=tuple(range(3, 29)), embedding_dim=8, bottom_mlp=(24, 8), top_mlp=(16, 1))


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def test_config_validation_and_widths(tmp_path):
    config = DLRMConfig()
    assert config.interaction_width == 367 and config.cardinalities[2] == 2_000_000
    assert DLRMConfig(interaction="cat").interaction_width == 16 * 27
    with pytest.raises(ValueError, match="embedding_dim"):
        DLRMConfig(bottom_mlp=(64, 32))
    with pytest.raises(ValueError, match="logit"):
        DLRMConfig(top_mlp=(64, 2))
    with pytest.raises(ValueError, match="26"):
        DLRMConfig(cardinalities=(5,) * 3)
    with pytest.raises(ValueError, match="unknown"):
        DLRMConfig.from_dict({"embeding_dim": 4})
    with pytest.raises(ValueError, match="unknown"):  # a misspelt override too
        DLRMConfig.from_dict({}, embeding_dim=4)
    for wrong in ({"num_dense": 0}, {"embedding_dim": 4.5}, {"bottom_mlp": (8.7, 16)}, {"cardinalities": [2.7] * 26}):
        with pytest.raises(ValueError, match="integers|positive"):
            DLRMConfig(**wrong)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"embedding_dim": 8, "bottom_mlp": [32, 8], "top_mlp": [8, 1]}))
    loaded = DLRMConfig.from_json(path, cardinalities=SMALL["cardinalities"])
    assert loaded.bottom_mlp == (32, 8) and loaded.embedding_dim == 8


def test_bad_inputs_are_named():
    model = DLRM(DLRMConfig(**SMALL))
    with pytest.raises(ValueError, match="dense"):
        model(torch.randn(4, 12), torch.zeros(4, 26, dtype=torch.long))
    with pytest.raises(ValueError, match="cats"):
        model(torch.randn(4, 13), torch.zeros(3, 26, dtype=torch.long))
    with pytest.raises(ValueError, match="impl"):
        DLRM(DLRMConfig(**SMALL), impl="fast")


@pytest.mark.parametrize("interaction,table_optimizer", [("dot", "sgd"), ("cat", "adagrad")])
def test_fused_matches_eager_and_float64(interaction, table_optimizer):
    """Logits and every dense parameter gradient of the fused model against the float64 eager
    model; the fused tables' in-backward update against the same update from the float64 gradient."""
    from fusedmlp.ops.embedding import SparseOptimizer, sparse_update_reference

    torch.manual_seed(torch.initial_seed() % 2**31)
    config = DLRMConfig(**SMALL, interaction=interaction)
    model = DLRM(config).to(DEVICE)
    reference = DLRM(config).double().to(DEVICE)
    reference.load_state_dict(model.state_dict())
    batch, lr = 37, 0.3
    dense = torch.rand(batch, 13, device=DEVICE) * 3
    cats = torch.stack([torch.randint(0, n // 2 + 1, (batch,), device=DEVICE) for n in config.cardinalities], 1)
    labels = (torch.rand(batch, device=DEVICE) < 0.3).float()
    ref_loss = reference.loss(reference(dense.double(), cats), labels)
    ref_loss.backward()
    ref_logits = reference(dense.double(), cats).detach()
    for impl in ("eager", "fused"):
        model.set_impl(impl).zero_grad()
        if impl == "fused":
            model.set_table_optimizer(table_optimizer, lr=lr)
            tables_before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("embeddings.")}
        logits = model(dense, cats)
        model.loss(logits, labels).backward()
        assert _rel(logits, ref_logits) < 1e-5, impl
        ref_params = dict(reference.named_parameters())
        for name, p in model.named_parameters():
            if impl == "fused" and name.startswith("embeddings."):
                assert p.grad is None  # updated in the backward instead
            else:
                assert _rel(p.grad, ref_params[name].grad) < 1e-4, (impl, name)
    ref_tables = dict(reference.embeddings.named_parameters())
    for key, before in tables_before.items():
        grad = ref_tables[key.removeprefix("embeddings.")].grad
        expected = before.double().clone()
        state = torch.zeros_like(expected) if table_optimizer == "adagrad" else None
        sparse_update_reference(expected, grad, SparseOptimizer(table_optimizer, lr, state=state))
        change = model.state_dict()[key].double() - before.double()
        assert change.abs().max() > 0, key
        # Adagrad's first step is lr * g / (|g| + eps): lr * sign(g) wherever |g| >> eps, anything
        # in [-lr, lr] where g is within the fp32 model's rounding of zero. On an H100, 3 of 400
        # seeds failed the bound through one entry with |g| 4e-8 to 2e-7 of the table's largest
        # (rel 9e-4 to 1e-2; with such entries left out 8e-8 to 9e-8). They are left out here;
        # every other entry is compared.
        kept = (grad == 0) | (grad.abs() > 1e-6 * grad.abs().max()) if table_optimizer == "adagrad" else \
            torch.ones_like(grad, dtype=torch.bool)
        assert kept.float().mean() > 0.9, key
        assert _rel(change[kept], (expected - before.double())[kept]) < 1e-4, key


def _args(tmp_path, *extra):
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser.parse_args(["--quiet", "--device", "cpu", "--impl", "eager", *extra])


def test_training_on_the_sample_learns(tmp_path):
    result = train(_args(tmp_path, "--epochs", "1"))
    assert result["validation"]["auc"] > 0.7  # planted signal; 0.5 is chance
    assert result["steps"] == 71 and result["train_rows"] == 18000


def test_resume_continues_exactly(tmp_path):
    straight = tmp_path / "straight.pt"
    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    common = ["--batch-size", "512", "--optimizer", "adagrad", "--seed", "7"]
    train(_args(tmp_path, *common, "--steps", "50", "--checkpoint", str(straight)))  # crosses an epoch (36 steps)
    train(_args(tmp_path, *common, "--steps", "20", "--checkpoint", str(first)))
    train(_args(tmp_path, *common, "--steps", "50", "--resume", str(first), "--checkpoint", str(second)))
    a, b = torch.load(straight, weights_only=False), torch.load(second, weights_only=False)
    assert a["progress"] == b["progress"] == {"step": 50, "epoch": 1, "position": 14 * 512}
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    for k, state in a["optimizer"]["dense"]["state"].items():
        assert torch.equal(state["sum"], b["optimizer"]["dense"]["state"][k]["sum"])
    ns = argparse.Namespace(checkpoint=str(second), data=None, split="val", impl="eager", device="cpu",
                            val_fraction=0.1, eval_batch_size=4096)
    metrics = evaluate_checkpoint(ns)
    assert metrics["step"] == 50 and 0.5 < metrics["auc"] <= 1.0


def _assert_same_run(a_path, b_path, tolerance):
    a, b = torch.load(a_path, weights_only=False), torch.load(b_path, weights_only=False)
    assert a["progress"] == b["progress"]
    for name in a["model"]:
        assert _rel(b["model"][name], a["model"][name].double()) <= tolerance, name


@pytest.mark.parametrize("impl", ["eager", pytest.param("fused", marks=pytest.mark.gpu)])
def test_amp_trains_in_bf16_with_fp32_weights(tmp_path, impl):
    """--amp: the forward runs under autocast in bf16 (the logits come out bf16), the weights
    and the checkpoint stay fp32, and an epoch ends where the fp32 run's does (validation log
    loss within 3%, AUC within 0.02 and above 0.7), not with the same bits. The fused run on a
    GPU (the interpreter takes minutes for its steps), where its steps are CUDA-graph replays."""
    from fusedmlp.dlrm.train import autocast_forward

    device = torch.device("cuda" if impl == "fused" else "cpu")
    model = DLRM(DLRMConfig(cardinalities=(5,) * 26), impl=impl).to(device)
    logits = autocast_forward(model, device)(torch.randn(9, 13, device=device),
                                             torch.randint(0, 5, (9, 26), device=device))
    assert logits.dtype == torch.bfloat16 and all(p.dtype == torch.float32 for p in model.parameters())
    paths = [tmp_path / f"{mode}.pt" for mode in ("fp32", "amp")]
    make_args = _gpu_args if impl == "fused" else lambda *extra: _args(tmp_path, *extra)
    results = []
    for flags, path in zip(([], ["--amp"]), paths):
        results.append(train(make_args("--impl", impl, "--batch-size", "256", "--epochs", "1", "--seed", "3",
                                       "--checkpoint", str(path), *flags)))
    assert results[1]["cuda_graph"] == (impl == "fused")
    assert [r["amp"] for r in results] == [False, True]
    (fp32, amp) = results
    val_amp, val_fp32 = amp["validation"], fp32["validation"]
    assert abs(val_amp["log_loss"] - val_fp32["log_loss"]) < 0.03 * val_fp32["log_loss"], (val_amp, val_fp32)
    assert abs(val_amp["auc"] - val_fp32["auc"]) < 0.02 and val_amp["auc"] > 0.7, (val_amp, val_fp32)
    a, b = torch.load(paths[0], weights_only=False), torch.load(paths[1], weights_only=False)
    assert b["args"]["amp"] is True
    assert all(b["model"][name].dtype == a["model"][name].dtype for name in a["model"])
    assert any(not torch.equal(a["model"][name], b["model"][name]) for name in a["model"]), "the same bits as fp32"


def test_backward_thread_choice_trains_the_same(tmp_path):
    """--backward-thread only moves the backward between threads: the same updates."""
    paths = [tmp_path / f"{where}.pt" for where in ("caller", "device")]
    for where, path in zip(("caller", "device"), paths):
        train(_args(tmp_path, "--batch-size", "512", "--steps", "12", "--seed", "2", "--backward-thread", where,
                    "--checkpoint", str(path)))
    _assert_same_run(*paths, tolerance=0.0)


def test_profile_writes_one_chrome_trace(tmp_path, capsys):
    """--profile DIR: steps 5-9 traced into one Chrome trace in DIR, named for TensorBoard's
    plugin, its path in the result; a run that ends before step 5 says it wrote none."""
    result = train(_args(tmp_path, "--batch-size", "256", "--steps", "12", "--profile", str(tmp_path / "prof")))
    traces = list((tmp_path / "prof").glob("*.pt.trace.json"))
    assert [str(p) for p in traces] == [result["profile_trace"]]
    events = json.loads(traces[0].read_text())["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {f"ProfilerStep#{i}" for i in range(4, 9)}, steps
    assert "Chrome trace" in capsys.readouterr().err
    short = train(_args(tmp_path, "--batch-size", "256", "--steps", "3", "--profile", str(tmp_path / "short")))
    assert short["profile_trace"] is None and not list((tmp_path / "short").iterdir())
    assert "no trace written" in capsys.readouterr().err


def test_metrics_json_is_strict(tmp_path):
    """Without validation rows the metrics are not numbers: null in --metrics-out, not NaN."""
    out = tmp_path / "m.json"
    train(_args(tmp_path, "--batch-size", "256", "--steps", "2", "--val-fraction", "0", "--metrics-out", str(out)))

    def refuse(constant):
        raise ValueError(f"{constant} in the metrics file")

    validation = json.loads(out.read_text(), parse_constant=refuse)["validation"]
    assert validation["rows"] == 0 and validation["auc"] is None and validation["log_loss"] is None


def test_cuda_graph_choice():
    """--cuda-graph: auto (default) captures the fused step on a GPU only; the bare flag means on;
    on without a GPU is refused before any work."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert _args(None).cuda_graph == "auto" and _args(None, "--cuda-graph").cuda_graph == "on"
    assert _args(None, "--cuda-graph", "off").cuda_graph == "off"
    assert resolve_cuda_graph("auto", "fused", gpu) and not resolve_cuda_graph("auto", "fused", cpu)
    assert not resolve_cuda_graph("auto", "eager", gpu) and not resolve_cuda_graph("auto", "compile", gpu)
    assert resolve_cuda_graph("on", "eager", gpu) and not resolve_cuda_graph("off", "fused", gpu)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        resolve_cuda_graph("on", "fused", cpu)
    with pytest.raises(ValueError, match="auto, on or off"):
        resolve_cuda_graph("yes", "fused", gpu)
    with pytest.raises(SystemExit, match="needs a CUDA device"):  # the trainer refuses it up front
        train(_args(None, "--cuda-graph", "on"))


def test_cli_train_eval_synth_preprocess(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    from fusedmlp.cli import main

    tsv = tmp_path / "s.tsv"
    assert main(["dlrm", "synth", "--rows", "600", "--out", str(tsv), "--seed", "1"]) == 0
    assert main(["dlrm", "preprocess", str(tsv), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    ckpt = tmp_path / "m.pt"
    assert main(["dlrm", "train", "--data", str(tmp_path / "p"), "--impl", "eager", "--device", "cpu", "--quiet",
                 "--batch-size", "64", "--checkpoint", str(ckpt), "--metrics-out", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["steps"] == 9
    assert main(["dlrm", "eval", str(ckpt), "--data", str(tmp_path / "p"), "--device", "cpu", "--impl", "eager"]) == 0
    out = capsys.readouterr().out
    assert '"auc"' in out and "wrote" in out
    capsys.readouterr()
    # a bad argument or file: one line naming it, exit status 2, no traceback
    assert main(["dlrm", "train", "--batch-size", "0", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "fusedmlp dlrm train: error: --batch-size must be at least 1"
    assert main(["dlrm", "eval", str(tmp_path / "none.pt"), "--device", "cpu"]) == 2
    assert f"no checkpoint at {tmp_path / 'none.pt'}" in capsys.readouterr().err
    assert main(["dlrm", "preprocess", str(tmp_path / "none.tsv"), "--out", str(tmp_path / "q"), "--quiet"]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def _gpu_args(*extra):
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser.parse_args(["--quiet", "--device", "cuda", *extra])


@pytest.mark.gpu
def test_eager_and_fused_reach_the_same_auc(tmp_path):
    """The issue's equality target: same data, same steps, same seed: validation AUC within 0.002."""
    common = ["--epochs", "2", "--batch-size", "256", "--optimizer", "adagrad", "--seed", "3"]
    eager = train(_gpu_args(*common, "--impl", "eager"))
    fused = train(_gpu_args(*common, "--impl", "fused"))
    assert eager["steps"] == fused["steps"] == 142
    assert abs(eager["validation"]["auc"] - fused["validation"]["auc"]) < 0.002, (eager["validation"],
                                                                                    fused["validation"])
    assert fused["validation"]["auc"] > 0.7


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["fused", "eager"])
def test_backward_thread_choice_trains_the_same_on_gpu(tmp_path, impl):
    """The backward on the training thread (the default) or on autograd's CUDA worker thread
    (PyTorch's default): the same weights after the same steps (the fused tables' update and
    the side stream it runs on included)."""
    paths = [tmp_path / f"{where}.pt" for where in ("caller", "device")]
    for where, path in zip(("caller", "device"), paths):
        train(_gpu_args("--impl", impl, "--optimizer", "adagrad", "--batch-size", "1000", "--steps", "20",
                        "--seed", "4", "--backward-thread", where, "--cuda-graph", "off", "--checkpoint", str(path)))
    _assert_same_run(*paths, tolerance=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("impl,optimizer", [("fused", "adagrad"), ("eager", "sgd")])
def test_cuda_graph_step_matches_the_plain_step(tmp_path, impl, optimizer):
    """--cuda-graph replays the captured step (and runs the short last batch plainly): the same
    weights and optimizer state as the plain run, and a resume from its checkpoint continues.
    The default (auto) captures the fused step and leaves eager's plain."""
    plain, graphed, resumed = (tmp_path / f"{n}.pt" for n in ("plain", "graphed", "resumed"))
    common = ["--impl", impl, "--optimizer", optimizer, "--batch-size", "1000", "--seed", "5"]
    result = train(_gpu_args(*common, "--steps", "40", "--cuda-graph", "off", "--checkpoint", str(plain)))
    graph_result = train(_gpu_args(*common, "--steps", "40", "--cuda-graph", "--checkpoint", str(graphed)))
    assert graph_result["cuda_graph"] and not result["cuda_graph"]
    assert train(_gpu_args(*common, "--steps", "2"))["cuda_graph"] == (impl == "fused")
    a, b = torch.load(plain, weights_only=False), torch.load(graphed, weights_only=False)
    assert a["progress"] == b["progress"] == {"step": 40, "epoch": 2, "position": 4000}  # 18 steps/epoch, last short
    for name in a["model"]:
        assert _rel(b["model"][name], a["model"][name].double()) < 1e-5, name
    steps = lambda c: [s.get("step") for s in c["optimizer"]["dense"]["state"].values()]  # noqa: E731
    assert steps(a) == steps(b)
    train(_gpu_args(*common, "--steps", "50", "--cuda-graph", "--resume", str(graphed), "--checkpoint", str(resumed)))
    assert torch.load(resumed, weights_only=False)["progress"]["step"] == 50


def _eval_args(checkpoint, *extra):
    from fusedmlp.cli import build_parser

    return build_parser().parse_args(["dlrm", "eval", str(checkpoint), "--device", "cpu", "--impl", "eager", *extra])


def _tiny_folders(tmp_path, index):
    """Two small `preprocess` folders (index kind ``index``) of different synthetic logs, and the first log's TSV."""
    pytest.importorskip("pyarrow")
    from fusedmlp.dlrm.data import preprocess, synthesize, write_tsv

    folders = []
    for seed in (1, 2):
        tsv = tmp_path / f"s{seed}.tsv"
        write_tsv(tsv, *synthesize(600, seed=seed))
        folders.append(tmp_path / f"{index}{seed}")
        preprocess(tsv, folders[-1], index=index)
    return folders, tmp_path / "s1.tsv"


def test_checkpoint_refuses_data_indexed_another_way(tmp_path, capsys):
    """A checkpoint trained on a vocab-indexed folder: eval and resume on a TSV (hash-indexed as it
    loads, with the same table sizes) or on a folder of another vocabulary are refused; the folder
    it was trained on passes; an older checkpoint without the record passes with a warning."""
    (vocab, other_vocab), tsv = _tiny_folders(tmp_path, "vocab")
    ckpt = tmp_path / "v.pt"
    train(_args(tmp_path, "--data", str(vocab), "--batch-size", "64", "--steps", "2", "--checkpoint", str(ckpt)))
    assert torch.load(ckpt, weights_only=False)["args"]["data_index"]["kind"] == "vocab"
    with pytest.raises(SystemExit, match="vocabulary .* but .*s1.tsv is hash-indexed"):
        evaluate_checkpoint(_eval_args(ckpt, "--data", str(tsv)))
    with pytest.raises(SystemExit, match="is hash-indexed"):
        train(_args(tmp_path, "--data", str(tsv), "--batch-size", "64", "--steps", "4", "--resume", str(ckpt)))
    with pytest.raises(SystemExit, match="is indexed by vocabulary"):
        evaluate_checkpoint(_eval_args(ckpt, "--data", str(other_vocab)))
    assert evaluate_checkpoint(_eval_args(ckpt, "--data", str(vocab)))["step"] == 2
    old = torch.load(ckpt, weights_only=False)
    del old["args"]["data_index"]
    torch.save(old, ckpt)
    capsys.readouterr()
    assert evaluate_checkpoint(_eval_args(ckpt, "--data", str(vocab)))["step"] == 2
    assert "does not record how its training data was indexed" in capsys.readouterr().err


def test_hash_checkpoint_evaluates_on_its_tsv(tmp_path):
    """A hash-indexed folder and the TSV it came from index alike: the checkpoint evaluates on either."""
    (folder, _), tsv = _tiny_folders(tmp_path, "hash")
    ckpt = tmp_path / "h.pt"
    train(_args(tmp_path, "--data", str(folder), "--batch-size", "64", "--steps", "2", "--checkpoint", str(ckpt)))
    assert torch.load(ckpt, weights_only=False)["args"]["data_index"] == {"kind": "hash"}
    assert evaluate_checkpoint(_eval_args(ckpt, "--data", str(tsv)))["step"] == 2


def test_resume_refuses_another_batch_size_optimizer_or_lr(tmp_path):
    """A resumed run continues exactly: a changed --batch-size (the step budget counts the
    checkpoint's batches), --optimizer (its state is the checkpoint's) or --lr is refused, naming
    the value to use; with them, the resumed checkpoint records what ran."""
    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    common = ["--batch-size", "256", "--optimizer", "sgd", "--lr", "0.05"]
    train(_args(tmp_path, *common, "--steps", "3", "--checkpoint", str(first)))
    for changed, named in ((["--batch-size", "2048"], "--batch-size 256"),
                           (["--optimizer", "adagrad"], "--optimizer sgd"), (["--lr", "0.1"], "--lr 0.05")):
        with pytest.raises(SystemExit, match=f"resume with {named}"):
            train(_args(tmp_path, *common, *changed, "--steps", "5", "--resume", str(first)))
    result = train(_args(tmp_path, *common, "--steps", "5", "--resume", str(first), "--checkpoint", str(second)))
    assert result["steps"] == 5
    recorded = torch.load(second, weights_only=False)["args"]
    assert (recorded["batch_size"], recorded["optimizer"], recorded["lr"]) == (256, "sgd", 0.05)


def test_resume_of_a_finished_run_says_so_and_validates(tmp_path, capsys):
    ckpt = tmp_path / "done.pt"
    train(_args(tmp_path, "--batch-size", "512", "--steps", "3", "--checkpoint", str(ckpt)))
    capsys.readouterr()
    result = train(_args(tmp_path, "--batch-size", "512", "--steps", "3", "--resume", str(ckpt)))
    assert result["steps"] == 3 and result["validation"]["step"] == 3 and 0 < result["validation"]["auc"] < 1
    assert "nothing to train" in capsys.readouterr().err


def test_damaged_checkpoints_are_named(tmp_path):
    """A truncated file, a text file and a file holding a tensor: one ValueError naming the path."""
    from fusedmlp.dlrm.train import load_checkpoint

    good = tmp_path / "good.pt"
    train(_args(tmp_path, "--batch-size", "512", "--steps", "1", "--checkpoint", str(good)))
    truncated, text, tensor = tmp_path / "truncated.pt", tmp_path / "text.pt", tmp_path / "tensor.pt"
    truncated.write_bytes(good.read_bytes()[:20000])
    text.write_text("not a checkpoint\n")
    torch.save(torch.zeros(3), tensor)
    for path in (truncated, text, tensor):
        with pytest.raises(ValueError, match=f"{path.name}: not a readable fusedmlp DLRM checkpoint"):
            load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


def test_tsv_split_follows_the_checkpoint(tmp_path):
    """A TSV's validation rows are its last --val-fraction: eval takes the checkpoint's fraction
    by default, and eval or resume with another one (rows moved between the splits) is refused."""
    ckpt = tmp_path / "c.pt"
    train(_args(tmp_path, "--batch-size", "256", "--steps", "2", "--val-fraction", "0.2", "--checkpoint", str(ckpt)))
    metrics = evaluate_checkpoint(_eval_args(ckpt))
    assert metrics["rows"] == 4000 and metrics["step"] == 2  # 0.2 of the sample's 20000 lines
    with pytest.raises(SystemExit, match="--val-fraction 0.2"):
        evaluate_checkpoint(_eval_args(ckpt, "--val-fraction", "0.5"))
    with pytest.raises(SystemExit, match="--val-fraction 0.2"):
        train(_args(tmp_path, "--batch-size", "256", "--steps", "3", "--resume", str(ckpt)))


def test_eval_checks_its_arguments(tmp_path):
    for bad, message in ((["--eval-batch-size", "0"], "--eval-batch-size must be at least 1"),
                         (["--val-fraction", "1.5"], "--val-fraction must be in")):
        with pytest.raises(SystemExit, match=message):
            evaluate_checkpoint(_eval_args(tmp_path / "unread.pt", *bad))
