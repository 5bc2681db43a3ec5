"""Bench suite ``dlrm``: DLRM training and inference throughput, eager vs torch.compile vs fused.

Shapes are BATCH sizes. The model is the Kaggle-size DLRM: 26 tables with the Criteo Kaggle
cardinalities capped at 2M rows (10.6M rows in all), dim 16, bottom MLP 13-512-256-64-16,
dot interaction (367 wide), top MLP 367-512-256-1, BCE-with-logits. Inputs are random
(dense features log-normal counts after log1p, indices uniform per table), held on the GPU.

Modes:
    train   one optimizer step: forward, loss, backward, SGD step (lr 0.01), gradients set to None
    infer   forward without autograd
Implementations:
    eager          plain PyTorch: nn.Embedding per table, bmm interaction, nn.Sequential MLPs;
                   dense table gradients
    eager_sparse   the same with sparse table gradients (SGD updates the touched rows only)
    compile        eager under torch.compile (dense gradients)
    fused          fusedmlp's kernels: the MLPs, the interaction, one lookup kernel for all
                   tables whose backward applies SGD to the touched rows (no table gradient)
    fused_graph    the fused step captured in a CUDA graph and replayed (what the trainer runs for
                   the fused path on a GPU, --cuda-graph auto; the step also gathers the batch's
                   rows, as the trainer's does)
    eager_graph    the eager step (dense table gradients) captured in a CUDA graph the same way
    compile_graph  the compiled step captured in a CUDA graph the same way (the peer of
                   fused_graph: neither pays launch or Python time per kernel)
The table is in samples/s (batch / median step time); ratios are fused over each peer's time.
"""

from __future__ import annotations

import torch

from ..._cuda_graph import capture_cuda_graph
from ..harness import Measurement, median_ms, peak_mib_above_current, progress, with_clock

NAME = "dlrm"
SHAPE_FIELDS = ("batch",)
SHAPE_PRESETS = {
    "default": [(2048,), (8192,), (65536,)],
    "full": [(2048,), (4096,), (8192,), (16384,), (32768,), (65536,)],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_graph", "eager", "eager_sparse", "compile", "eager_graph", "compile_graph")
PEERS = ("eager", "eager_sparse", "compile", "eager_graph", "compile_graph")
MODES = ("train", "infer")
LR = 0.01


def default_impls(max_autotune: bool = False) -> list[str]:
    return list(IMPLS)


def check_shape(shape) -> str | None:
    if len(shape) != 1 or shape[0] <= 0:
        return "dlrm shapes are BATCH sizes (positive integers), e.g. 2048,65536"
    return None


def _model(impl: str, dtype, device="cuda", config=None):
    from ...dlrm.model import DLRM, DLRMConfig

    config = config or DLRMConfig()
    model = DLRM(config, impl="fused" if impl.startswith("fused") else "eager", sparse=impl == "eager_sparse")
    return model.to(device=device, dtype=dtype)


def _inputs(batch: int, config, dtype, device="cuda", seed=0):
    generator = torch.Generator(device=device).manual_seed(seed)
    dense = torch.log1p(torch.exp(torch.randn(batch, 13, device=device, generator=generator) * 1.5)).to(dtype)
    cats = torch.stack([torch.randint(0, n, (batch,), device=device, generator=generator)
                        for n in config.cardinalities], 1)
    labels = (torch.rand(batch, device=device, generator=generator) < 0.25).to(dtype)
    return dense, cats, labels


def _steps(impl: str, dtype, batch: int):
    from ...dlrm.train import DLRMOptimizer, GraphedTrainStep

    model = _model(impl, dtype)
    forward = torch.compile(model) if impl.startswith("compile") else model
    optimizer = DLRMOptimizer(model, "sgd", LR)  # the fused tables take SGD in their backward
    dense, cats, labels = _inputs(batch, model.config, dtype)

    def train():
        loss = model.loss(forward(dense, cats), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def infer():
        with torch.no_grad():
            return forward(dense, cats)

    if impl.endswith("_graph"):
        graphed = GraphedTrainStep(model, forward, optimizer, (dense, cats, labels), batch)
        rows = torch.arange(batch, device=dense.device)
        return {"train": lambda: graphed(rows), "infer": capture_cuda_graph(infer)[0].replay}, model
    return {"train": train, "infer": infer}, model


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    rows = []
    bar = progress(len(shapes) * len(impls) * len(modes), "bench dlrm")
    for (batch,) in shapes:
        for impl in impls:
            try:
                steps, model = _steps(impl, dtype, batch)
            except Exception as exc:  # a peer failing must not lose the other figures
                for mode in modes:
                    rows.append(Measurement(NAME, {"batch": batch}, str(dtype).replace("torch.", ""), impl, mode,
                                            note=f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
                    bar.update()
                continue
            for mode in modes:
                bar.set_postfix_str(f"batch {batch} {impl} {mode}")
                row = Measurement(NAME, {"batch": batch}, str(dtype).replace("torch.", ""), impl, mode)
                try:
                    fn = steps[mode]
                    for _ in range(3):  # warm-up: compilation, autotuning, optimizer state
                        fn()
                    row.ms, clock = with_clock(median_ms, fn)
                    row.peak_mib = peak_mib_above_current(fn)
                    row.extra = {"samples_per_s": batch / (row.ms * 1e-3), **clock}
                except Exception as exc:
                    row.note = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                rows.append(row)
                bar.update()
            del steps, model
            torch.cuda.empty_cache()
        if on_shape_done is not None:
            on_shape_done(rows)
    bar.close()
    return rows


TABLE_NOTE = "million samples/s per impl; a/b = a's median step time over b's (below 1: a is faster)"


def summary_table(rows: list[Measurement]):
    """One line per (batch, mode): million samples/s per impl, then fused time over each peer's
    (the plain fused step over the plain peers', the graphed one over every peer's)."""
    impls = [i for i in IMPLS if any(r.impl == i for r in rows)]
    fused = [i for i in impls if i.startswith("fused")]
    peers = [i for i in impls if i in PEERS]
    lookup = {(r.shape["batch"], r.mode, r.impl): r for r in rows}
    keys = list(dict.fromkeys((r.shape["batch"], r.mode) for r in rows))
    # the plain fused step against the plain peers; the graphed one against every peer
    pairs = [(f, p) for f in fused for p in peers if f.endswith("_graph") or not p.endswith("_graph")]
    headers = ["batch", "mode"] + [f"{i} M/s" for i in impls] + [f"{f}/{p}" for f, p in pairs]
    table = []
    for batch, mode in keys:
        ms = {i: (lookup[(batch, mode, i)].ms if (batch, mode, i) in lookup else None) for i in impls}
        line = [batch, mode] + [(batch / (ms[i] * 1e-3) / 1e6 if ms[i] else None) for i in impls]
        line += [(ms[f] / ms[p] if ms[f] and ms[p] else None) for f, p in pairs]
        table.append(line)
    return headers, table


def run_cpu_check(dtype):
    """No GPU: the fused model (interpreter) against the float64 eager model on a small DLRM:
    logits, the dense parameters' gradients, and the tables' in-backward SGD step (the change
    of each table is minus lr times its gradient)."""
    from ...dlrm.model import DLRMConfig

    config = DLRMConfig(cardinalities=tuple(range(5, 31)), embedding_dim=16, bottom_mlp=(32, 16), top_mlp=(32, 1))
    dtype = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype  # (the interpreter's bf16 dots)
    reference = _model("eager", torch.float64, "cpu", config)
    fused = _model("fused", dtype, "cpu", config)
    fused.load_state_dict(reference.state_dict())
    # the tables' gradients are read off an SGD step, (before - after) / lr: a large lr (a power
    # of two: the division is exact) keeps the step's fp32 rounding, eps |table|, far below it
    lr = 64.0
    fused.set_table_optimizer("sgd", lr=lr)
    tables_before = {k: v.clone() for k, v in fused.state_dict().items() if k.startswith("embeddings.")}
    dense, cats, _ = _inputs(48, config, torch.float64, "cpu")
    # labels 0: the last bias's gradient, a sum over the batch of sigmoid(logit) - label, then
    # cannot cancel far below its terms (with random labels fp32's rounding of such a sum read
    # as a 1e-4 relative error in a CI run: no bug)
    labels = torch.zeros(48, dtype=torch.float64)
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    ref_loss = reference.loss(reference(dense, cats), labels)
    ref_loss.backward()
    logits = fused(dense.to(dtype), cats)
    fused.loss(logits, labels.to(dtype)).backward()
    ref_params = dict(reference.named_parameters())
    grads = {n: err(p.grad, ref_params[n].grad) for n, p in fused.named_parameters() if p.grad is not None}
    after = fused.state_dict()
    grads.update({k: err((v - after[k]) / lr, ref_params[k].grad) for k, v in tables_before.items()})
    headers = ["dtype", "model", "err logits", "worst err grad (parameter)"]
    worst = max(grads, key=grads.get)
    table = [[str(dtype).replace("torch.", ""), "DLRM 13-32-16 / dot / 367-32-1",
              err(logits, reference(dense, cats).detach()), f"{grads[worst]:.2e} ({worst})"]]
    return headers, table
