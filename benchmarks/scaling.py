"""Multi-GPU scaling (issue: scale-out), one torchrun job per world size:

    torchrun --nproc-per-node N benchmarks/scaling.py dlrm   --out DIR [--batch 65536] [--dtype bf16]
    torchrun --nproc-per-node N benchmarks/scaling.py swiglu --out DIR [--tokens 16384] [--layers 4]

dlrm    data-parallel training steps of the Kaggle-size DLRM (fusedmlp.dlrm.parallel) with
        --batch rows per GPU: samples/s over all ranks = N x batch / median step time.
        Impls: fused (the fused step: each backward exchanges the ranks' per-row table
        gradient sums and updates the tables on a side stream, alongside the dense backward),
        fused_graph (that step captured in a CUDA graph, collectives included), eager_sparse;
        fused_serial and fused_graph_serial run the table exchange and update on the main
        stream instead (DLRMOptimizer(overlap_tables=False)); fused_late and fused_graph_late
        all-reduce the dense gradients after the backward, not module by module during it
        (DataParallel.reduce_early left off); fused_nccl and fused_graph_nccl exchange the
        tables' keys and gradient sums through NCCL's all-gather (FUSEDMLP_EXCHANGE=nccl), not
        through symmetric memory and the copy engines (the default on one host's GPUs).
swiglu  a stack of --layers SwiGLU feed-forwards (d=4096, hidden=14336, bf16), forward +
        backward on --tokens tokens per GPU; fused (fusedmlp.SwiGLU) and eager (the same
        projections as nn.Linear + F.silu). With N = 1 the plain modules, with N > 1 each layer
        and the stack under FSDP2 (fully_shard). tokens/s over all ranks.
Every rank runs the same 30 timed steps (CUDA events, median); rank 0 writes DIR/scaling_{suite}_{N}gpu.json
(and with --profile DIR/scaling_dlrm_profile_{impl}_{N}gpu.txt: GPU time per kernel; with
--timeline DIR/scaling_dlrm_timeline_{impl}_{N}gpu.txt: one step's operations, stream by stream).

    python benchmarks/scaling.py plot JSON... --out PNG     throughput against GPUs, one line per impl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fusedmlp.bench.harness import environment


def _median_step_ms(step, iters: int = 30) -> float:
    """Median of ``iters`` CUDA-event-timed steps after 3 warm-up steps. The same count on
    every rank: each step holds collectives (an adaptive repeat count could differ between
    ranks and hang them)."""
    for _ in range(3):  # warm-up: compilation, autotuning, optimizer state, NCCL set-up
        step()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def _profile(step, parallel, path: Path, steps: int = 5) -> None:
    """GPU time per kernel over ``steps`` more steps (every rank runs them: they hold
    collectives); rank 0 writes the profiler's table, heaviest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    if parallel.is_main:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{steps} steps, rank 0 of {parallel.world}\n"
                        + prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


def _timeline(step, parallel, path: Path, steps: int = 4) -> None:
    """Where one step's GPU time goes, stream by stream: rank 0 writes each kernel, copy and
    fill of the last of ``steps`` profiled steps (the ranks have settled into step by then:
    the first one's collectives wait for the rank that started later) with its start and end in
    us from the step's first GPU operation, its stream and name, then each stream's busy time
    and the step's span. Steps are told apart by a marker kernel (torch.cuda._sleep) launched
    before each. Kernels of a CUDA-graph replay are listed too (CUPTI reports them one by one)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            torch.cuda._sleep(100)
            step()
        torch.cuda.synchronize()
    if not parallel.is_main:
        return
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(f"{tmp}/trace.json")
        trace = json.loads(Path(f"{tmp}/trace.json").read_text())
    ops = sorted((e["ts"], e["ts"] + e["dur"], e["args"].get("stream", "?"), e["name"])
                 for e in trace["traceEvents"]
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    markers = [i for i, op in enumerate(ops) if "spin_kernel" in op[3]]
    ops = ops[markers[-1] + 1:] if markers else ops
    if not ops:
        path.write_text("no GPU operations recorded\n")
        return
    origin = ops[0][0]
    lines = [f"step {steps} of {steps}, rank 0 of {parallel.world}: start_us end_us stream name"]
    lines += [f"{start - origin:9.1f} {end - origin:9.1f} {stream!s:>6} {name[:90]}" for start, end, stream, name in ops]
    busy = {}
    for start, end, stream, _ in ops:
        busy[stream] = busy.get(stream, 0.0) + end - start
    lines += [f"stream {stream}: {us:.1f} us busy" for stream, us in sorted(busy.items(), key=lambda kv: str(kv[0]))]
    lines.append(f"span: {max(end for _, end, _, _ in ops) - origin:.1f} us")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def dlrm_row(impl, args, parallel) -> dict:
    from fusedmlp.bench.suites.dlrm import _inputs, _model
    from fusedmlp.dlrm.train import DLRMOptimizer, GraphedTrainStep, train_step

    dtype = getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[args.dtype])
    global_batch = args.batch * parallel.world
    torch.manual_seed(0)
    serial = impl.endswith("_serial")  # the table update on the main stream, not overlapped
    late = impl.endswith("_late")  # the dense all-reduce after the backward
    nccl = impl.endswith("_nccl")  # the tables' exchange through NCCL
    base = impl.removesuffix("_serial").removesuffix("_late").removesuffix("_nccl")
    os.environ["FUSEDMLP_EXCHANGE"] = "nccl" if nccl else "copy_engine"
    model = _model(base, dtype, device="cuda")
    parallel.broadcast_model(model)
    if not late:
        parallel.reduce_early(model)
    optimizer = DLRMOptimizer(model, "sgd", 0.01, group=parallel.table_group,
                              overlap_tables=False if serial else None)
    # the global batch on every rank (same seed): each rank trains on its share
    tensors = _inputs(global_batch, model.config, dtype, device="cuda", seed=1)
    index = torch.arange(global_batch, device="cuda")
    if base == "fused_graph":
        graphed = GraphedTrainStep(model, model, optimizer, tensors, global_batch, parallel=parallel,
                                   backward_thread=args.backward_thread)
        step = lambda: graphed(index)  # noqa: E731
    else:
        step = lambda: train_step(model, model, optimizer, parallel, tensors, index, args.backward_thread)  # noqa: E731
    ms = _median_step_ms(step)
    if args.profile and base != "fused_graph":
        _profile(step, parallel, Path(args.out) / f"scaling_dlrm_profile_{impl}_{parallel.world}gpu.txt")
    if args.timeline:
        _timeline(step, parallel, Path(args.out) / f"scaling_dlrm_timeline_{impl}_{parallel.world}gpu.txt")
    return {"suite": "dlrm", "impl": impl, "gpus": parallel.world, "batch_per_gpu": args.batch,
            "dtype": args.dtype, "ms": ms, "samples_per_s": global_batch / (ms * 1e-3)}


class EagerSwiGLU(nn.Module):
    """The Hugging Face LlamaMLP computation in plain PyTorch (same parameter names)."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def swiglu_row(impl, args, parallel) -> dict:
    import fusedmlp

    torch.manual_seed(0)
    layer = (lambda: fusedmlp.SwiGLU(args.dim, args.hidden)) if impl == "fused" else \
        (lambda: EagerSwiGLU(args.dim, args.hidden))
    model = nn.Sequential(*[layer() for _ in range(args.layers)]).to(device="cuda", dtype=torch.bfloat16)
    if parallel.world > 1:
        from torch.distributed.fsdp import fully_shard

        for block in model:
            fully_shard(block)
        fully_shard(model)
    x = torch.randn(args.tokens // 2048, 2048, args.dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ms = _median_step_ms(lambda: model(x).float().square().mean().backward())
    return {"suite": "swiglu", "impl": impl, "gpus": parallel.world, "tokens_per_gpu": args.tokens,
            "layers": args.layers, "dim": args.dim, "hidden": args.hidden, "fsdp2": parallel.world > 1,
            "ms": ms, "tokens_per_s": args.tokens * parallel.world / (ms * 1e-3)}


def plot(paths, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for path in paths for row in json.loads(Path(path).read_text())["rows"]]
    suites = sorted({row["suite"] for row in rows})
    fig, axes = plt.subplots(1, len(suites), figsize=(5 * len(suites), 4), squeeze=False)
    for ax, suite in zip(axes[0], suites):
        def rate(impl, gpus):  # median over an impl's rows at that GPU count (runs repeat impls)
            found = [row.get("samples_per_s", row.get("tokens_per_s")) / 1e6 for row in rows
                     if row["suite"] == suite and row["impl"] == impl and row["gpus"] == gpus]
            return statistics.median(found) if found else None

        for impl in sorted({row["impl"] for row in rows if row["suite"] == suite}):
            # with one GPU there is no exchange: an _nccl impl's 1-GPU point is its base impl's
            one = rate(impl, 1) or rate(impl.removesuffix("_nccl"), 1)
            points = [(gpus, value) for gpus, value in ((1, one), (2, rate(impl, 2))) if value is not None]
            ax.plot(*zip(*points), marker="o", label=impl)
            if one is not None:
                ax.plot([1, 2], [one, 2 * one], ls=":", color="grey")
        ax.set_xlabel("GPUs")
        ax.set_ylabel("M samples/s" if suite == "dlrm" else "M tokens/s")
        ax.set_title(f"{suite} (dotted: linear scaling)")
        ax.set_xticks([1, 2])
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main():
    from fusedmlp.dlrm.parallel import DataParallel

    if sys.argv[1:2] == ["plot"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("json", nargs="+")
        parser.add_argument("--out", required=True)
        args = parser.parse_args(sys.argv[2:])
        return plot(args.json, args.out)

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=("dlrm", "swiglu"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=14336)
    parser.add_argument("--impls", default=None)
    parser.add_argument("--profile", action="store_true",
                        help="dlrm: also write the GPU time per kernel of 5 steps of each impl but fused_graph")
    parser.add_argument("--timeline", action="store_true",
                        help="dlrm: also write one step's GPU operations, stream by stream, of each impl")
    parser.add_argument("--backward-thread", choices=("caller", "device"), default="caller",
                        help="where every impl's backward runs: the calling thread (default, what `fusedmlp "
                             "dlrm train` does) or autograd's per-device worker thread (PyTorch's default)")
    args = parser.parse_args()
    args.impls = args.impls or ("fused,fused_graph,eager_sparse" if args.suite == "dlrm" else "fused,eager")
    parallel, device = DataParallel.from_environment("cuda")
    if ":" in device:  # a torchrun rank: its own GPU
        torch.cuda.set_device(torch.device(device))
    rows = []
    with torch.autograd.set_multithreading_enabled(args.backward_thread == "device"):
        for impl in args.impls.split(","):
            rows.append((dlrm_row if args.suite == "dlrm" else swiglu_row)(impl, args, parallel))
            torch.cuda.empty_cache()
    if parallel.is_main:
        out = Path(args.out) / f"scaling_{args.suite}_{parallel.world}gpu.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"environment": dict(environment(), backward_thread=args.backward_thread),
                                   "command": " ".join(sys.argv),
                                   "world_size": parallel.world, "rows": rows}, indent=2))
        for row in rows:
            rate = row.get("samples_per_s", row.get("tokens_per_s"))
            print(f"{row['suite']} {row['impl']:>12} gpus={row['gpus']} {row['ms']:.3f} ms  {rate / 1e6:.2f} M/s")
    parallel.close()


if __name__ == "__main__":
    main()
