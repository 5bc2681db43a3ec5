"""DLRM's top MLP (367-512-256-1) in plain calls under the plain-call rules of ops/mlp.py,
against torch.compile and eager in the same rounds.

    PYTHONPATH=src python3 benchmarks/mlp_top_plain_rules.py [--batches 16384,32768,65536] [--rounds 3]
        [--variants ...] [--peers compile,eager] [--graph]

Variants (ops/mlp.py's module constants, set before each variant's rows):
  cublas_wgrad   CUBLAS_WGRAD_MIN_ROWS = 16384: the weight gradients as cuBLAS products from
                 16384 rows in plain calls too (the rule before 2026-11-29)
  kernel_wgrad   CUBLAS_WGRAD_MIN_ROWS = 2**62: the wgrad kernel in plain calls (the rule after)
  kernel_whole   kernel_wgrad, and FIRST_LAYER_GEMM_MIN_ROWS = 2**62: layer 0 inside the
                 whole-stack kernel in plain calls too
  no_pad         kernel_wgrad, and ALIGN_MIN_WIDTH = 2**62: x and W_0 not copied into
                 16-byte rows (the kernels read 367-wide rows as they are; one launch and two
                 allocations fewer per forward; and no first-layer GEMM, which needs it)
--variants picks some of them (default: all); --peers the peers timed beside them.
Rows per batch: each variant's fused fwd and fwd+bwd, torch.compile's (default mode) and
eager's, as ``fusedmlp bench mlp`` times its plain impls (``measure``: do_bench, the L2 flushed
before each call), bf16; and per variant the fwd+bwd step's host microseconds from an idle GPU
(synchronise, then the call's wall time). ``--graph`` adds each variant's GPU time: its
training forward, inference forward (no grad) and fwd+bwd captured as plain calls (not in
graph_capture_mode) and replayed from a CUDA graph (``_plain_rules_replay_us``; a capture
under way still takes cuBLAS's weight gradients from 16384 rows, ``_wgrad_on_cublas``).
Rounds interleave the variants and peers, every other round in reverse order. Writes
mlp_top_plain_rules.json to $OUT (or .).
"""
import argparse
import contextlib
import statistics

import torch

import fusedmlp.ops.mlp as M
import fusedmlp._cuda_graph as cuda_graph
from fusedmlp.bench.harness import host_us_from_idle, measure, median_ms, write_record
from fusedmlp.bench.suites.mlp import DLRM_TOP, _forward_fn, _make_inputs

_KERNEL_WGRAD = {"CUBLAS_WGRAD_MIN_ROWS": 2**62, "FIRST_LAYER_GEMM_MIN_ROWS": M.FIRST_LAYER_GEMM_MIN_ROWS}
VARIANTS = {
    "cublas_wgrad": {**_KERNEL_WGRAD, "CUBLAS_WGRAD_MIN_ROWS": 16384},
    "kernel_wgrad": _KERNEL_WGRAD,
    "kernel_whole": {**_KERNEL_WGRAD, "FIRST_LAYER_GEMM_MIN_ROWS": 2**62},
    "no_pad": {**_KERNEL_WGRAD, "ALIGN_MIN_WIDTH": 2**62},
}
LIBRARY = {name: getattr(M, name) for name in ("CUBLAS_WGRAD_MIN_ROWS", "FIRST_LAYER_GEMM_MIN_ROWS", "ALIGN_MIN_WIDTH")}


def _plain_rules_replay_us(fn) -> float:
    """Microseconds of ``fn`` replayed from a CUDA graph (its GPU time; timed as the bench times
    its graphed impls: ``median_ms``, the L2 flushed before each replay), captured by
    ``capture_cuda_graph`` with graph_capture_mode off: the graph holds the plain-call rules'
    kernels (a user's own capture of plain calls, torch.compile's CUDA graphs)."""
    real = cuda_graph.graph_capture_mode
    cuda_graph.graph_capture_mode = contextlib.nullcontext
    try:
        graph, _ = cuda_graph.capture_cuda_graph(fn)
    finally:
        cuda_graph.graph_capture_mode = real
    return median_ms(graph.replay) * 1e3


def _no_grad(forward, inputs):
    with torch.no_grad():
        return forward(*inputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="16384,32768,65536")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--peers", default="compile,eager")
    parser.add_argument("--graph", action="store_true")
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    variants = {name: {**LIBRARY, **VARIANTS[name]} for name in args.variants.split(",")}
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        shape = (batch, *DLRM_TOP)
        inputs, g = _make_inputs(shape, torch.bfloat16)
        make = _forward_fn(shape)
        fused, eager = make("fused"), make("eager")
        compiled = make("compile") if "compile" in peers else None
        names = list(variants) + peers
        outputs = {}
        for name, constants in variants.items():  # the variants compute the same y (up to rounding)
            for constant, value in constants.items():
                setattr(M, constant, value)
            outputs[name] = fused(*inputs).float()
        first = next(iter(outputs.values()))
        print(f"{batch:6d} largest |y - y({next(iter(outputs))})|: "
              + ", ".join(f"{name} {(y - first).abs().max().item():.3g}" for name, y in outputs.items()))
        for repeat in range(args.rounds):
            for name in (names if repeat % 2 == 0 else names[::-1]):
                for constant, value in variants.get(name, LIBRARY).items():
                    setattr(M, constant, value)
                forward = fused if name in variants else compiled if name == "compile" else eager
                row = {"batch": batch, "impl": name, "round": repeat}
                for mode in ("fwd", "fwd+bwd"):
                    row[mode + "_ms"] = measure(forward, mode, inputs, g)[0]
                wrt = [t for t in inputs if t.requires_grad]
                step = lambda: torch.autograd.grad(forward(*inputs), wrt, g)  # noqa: E731
                row["step_from_idle_us"] = host_us_from_idle(step)
                graphed = ""
                if args.graph and name in variants:
                    # new leaves on the same memory: leaves differentiated on the default stream
                    # before fail a capture's backward (capture_cuda_graph's note)
                    leaves = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
                    captured = [t for t in leaves if t.requires_grad]
                    for mode, fn in (("fwd", lambda: forward(*leaves)), ("infer", lambda: _no_grad(forward, leaves)),
                                     ("fwd+bwd", lambda: torch.autograd.grad(forward(*leaves), captured, g))):
                        row[f"graph_{mode}_us"] = _plain_rules_replay_us(fn)
                    graphed = ("  graph fwd {graph_fwd_us:6.1f} infer {graph_infer_us:6.1f} "
                               "fwd+bwd {graph_fwd+bwd_us:6.1f} us")
                rows.append(row)
                print(f"{batch:6d} {name:13s} fwd {row['fwd_ms']:7.4f} ms  fwd+bwd {row['fwd+bwd_ms']:7.4f} ms  "
                      f"step from idle {row['step_from_idle_us']:7.1f} us" + graphed.format(**row), flush=True)
        for constant, value in LIBRARY.items():
            setattr(M, constant, value)
    print("\nmedians over rounds (ms): batch, impl, fwd, fwd+bwd, step from idle (us)"
          + (", graph fwd, infer, fwd+bwd (us)" if args.graph else ""))
    keys = ("fwd_ms", "fwd+bwd_ms", "step_from_idle_us", "graph_fwd_us", "graph_infer_us", "graph_fwd+bwd_us")
    for batch in sorted({r["batch"] for r in rows}):
        for name in list(variants) + peers:
            mine = [r for r in rows if r["batch"] == batch and r["impl"] == name]
            med = [statistics.median(r[k] for r in mine) for k in keys if k in mine[0]]
            print(f"{batch:6d} {name:13s} "
                  + " ".join(f"{v:8.4f}" if i < 2 else f"{v:7.1f}" for i, v in enumerate(med)))
    write_record("mlp_top_plain_rules", rows=rows)


if __name__ == "__main__":
    main()
