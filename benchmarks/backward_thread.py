"""Forward+backward steps with the backward on autograd's device thread or on the caller's.

    python benchmarks/backward_thread.py [--out DIR] [--dtype bf16] [--batches 2048,65536]

PyTorch runs the backward of CUDA tensors on a per-device worker thread; the thread that
called ``backward()`` waits for it. ``torch.autograd.set_multithreading_enabled(False)`` runs
it on the calling thread instead. The kernels are the same; what moves is the host's work,
which is what bounds a step whose GPU work is short (the fused ops' backward is Python:
launches, allocations). Side by side, each step timed both ways (median ms, ``do_bench``):
the DLRM bottom and top MLPs (fused and eager as ``fusedmlp bench mlp`` runs them, fwd+bwd
with respect to x and every weight and bias) and the DLRM training step of
``fusedmlp bench dlrm`` (fused, eager with dense and with sparse table gradients).
Writes DIR/backward_thread_{dtype}.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fusedmlp.bench.harness import environment, format_table, median_ms
from fusedmlp.bench.suites import dlrm as dlrm_suite
from fusedmlp.bench.suites import mlp as mlp_suite

MLPS = {"bottom": (13, 512, 256, 64, 16), "top": (367, 512, 256, 1)}  # last activation: relu, sigmoid


def both_threads(step) -> dict:
    """{thread: median ms} of ``step`` with the backward on each thread."""
    out = {}
    for thread in ("device", "caller"):
        with torch.autograd.set_multithreading_enabled(thread == "device"):
            for _ in range(3):
                step()
            out[thread] = median_ms(step)
    return out


def mlp_steps(sizes, batch, dtype) -> dict:
    """{impl: fwd+bwd step} for fused and eager, on the inputs of ``fusedmlp bench mlp``."""
    torch.manual_seed(0)
    inputs, grad = mlp_suite._make_inputs((batch, *sizes), dtype)
    wrt = [t for t in inputs if t.requires_grad]
    make = mlp_suite._forward_fn((batch, *sizes))
    return {impl: (lambda fn=make(impl): torch.autograd.grad(fn(*inputs), wrt, grad)) for impl in ("fused", "eager")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--batches", default="2048,65536")
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for batch in batches:
        for name, sizes in MLPS.items():
            for impl, step in mlp_steps(sizes, batch, dtype).items():
                rows.append({"workload": f"mlp {name} fwd+bwd", "impl": impl, "batch": batch, **both_threads(step)})
                print(rows[-1], flush=True)
    for batch in batches:
        for impl in ("fused", "eager", "eager_sparse"):
            steps, model = dlrm_suite._steps(impl, dtype, batch)
            rows.append({"workload": "dlrm train step", "impl": impl, "batch": batch, **both_threads(steps["train"])})
            print(rows[-1], flush=True)
            del steps, model
            torch.cuda.empty_cache()
    out = Path(args.out) / f"backward_thread_{args.dtype}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))
    table = [[r["workload"], r["batch"], r["impl"], r["device"], r["caller"], r["device"] / r["caller"]]
             for r in rows]
    print(format_table(["workload", "batch", "impl", "device thread ms", "caller thread ms", "speedup"], table))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
