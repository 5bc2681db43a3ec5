"""DLRM's top MLP (367-512-256-1) in plain calls at large batches under the plain-call rules of
ops/mlp.py, against torch.compile and eager in the same rounds.

    PYTHONPATH=src python3 benchmarks/mlp_top_plain_rules.py [--batches 16384,32768,65536] [--rounds 3] [--variants ...]

Variants (ops/mlp.py's module constants, set before each variant's rows):
  cublas_wgrad   CUBLAS_WGRAD_MIN_ROWS = 16384: the weight gradients as cuBLAS products from
                 16384 rows in plain calls too (the rule before 2026-11-29)
  kernel_wgrad   CUBLAS_WGRAD_MIN_ROWS = 2**62: the wgrad kernel in plain calls (the rule after)
  kernel_whole   kernel_wgrad, and FIRST_LAYER_GEMM_MIN_ROWS = 2**62: layer 0 inside the
                 whole-stack kernel in plain calls too
  no_pad         kernel_wgrad, and ALIGN_MIN_WIDTH = 2**62: x and W_0 not copied into
                 16-byte rows (the kernels read 367-wide rows as they are; one launch and two
                 allocations fewer per forward)
--variants picks some of them (default: all).
Rows per batch: each variant's fused fwd and fwd+bwd, torch.compile's (default mode) and
eager's, as ``fusedmlp bench mlp`` times its plain impls (``measure``: do_bench, the L2 flushed
before each call), bf16; and per variant the fwd+bwd step's host microseconds from an idle GPU
(synchronise, then the call's wall time). Rounds interleave the variants and peers, every other
round in reverse order. Writes mlp_top_plain_rules.json to $OUT (or .).
"""
import argparse
import statistics

import torch

import fusedmlp.ops.mlp as M
from fusedmlp.bench.harness import host_us_from_idle, measure, write_record
from fusedmlp.bench.suites.mlp import DLRM_TOP, _forward_fn, _make_inputs

VARIANTS = {
    "cublas_wgrad": {"CUBLAS_WGRAD_MIN_ROWS": 16384, "FIRST_LAYER_GEMM_MIN_ROWS": M.FIRST_LAYER_GEMM_MIN_ROWS},
    "kernel_wgrad": {"CUBLAS_WGRAD_MIN_ROWS": 2**62, "FIRST_LAYER_GEMM_MIN_ROWS": M.FIRST_LAYER_GEMM_MIN_ROWS},
    "kernel_whole": {"CUBLAS_WGRAD_MIN_ROWS": 2**62, "FIRST_LAYER_GEMM_MIN_ROWS": 2**62},
    "no_pad": {"CUBLAS_WGRAD_MIN_ROWS": 2**62, "FIRST_LAYER_GEMM_MIN_ROWS": M.FIRST_LAYER_GEMM_MIN_ROWS,
               "ALIGN_MIN_WIDTH": 2**62},
}
LIBRARY = {name: getattr(M, name) for name in ("CUBLAS_WGRAD_MIN_ROWS", "FIRST_LAYER_GEMM_MIN_ROWS", "ALIGN_MIN_WIDTH")}




def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="16384,32768,65536")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    variants = {name: {**LIBRARY, **VARIANTS[name]} for name in args.variants.split(",")}
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        shape = (batch, *DLRM_TOP)
        inputs, g = _make_inputs(shape, torch.bfloat16)
        make = _forward_fn(shape)
        fused, compiled, eager = make("fused"), make("compile"), make("eager")
        names = list(variants) + ["compile", "eager"]
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
                row["step_from_idle_us"] = host_us_from_idle(lambda: torch.autograd.grad(forward(*inputs), wrt, g))
                rows.append(row)
                print(f"{batch:6d} {name:13s} fwd {row['fwd_ms']:7.4f} ms  fwd+bwd {row['fwd+bwd_ms']:7.4f} ms  "
                      f"step from idle {row['step_from_idle_us']:7.1f} us", flush=True)
        for constant, value in LIBRARY.items():
            setattr(M, constant, value)
    print("\nmedians over rounds (ms): batch, impl, fwd, fwd+bwd, step from idle (us)")
    for batch in sorted({r["batch"] for r in rows}):
        for name in list(variants) + ["compile", "eager"]:
            mine = [r for r in rows if r["batch"] == batch and r["impl"] == name]
            med = {k: statistics.median(r[k] for r in mine) for k in ("fwd_ms", "fwd+bwd_ms", "step_from_idle_us")}
            print(f"{batch:6d} {name:13s} {med['fwd_ms']:7.4f} {med['fwd+bwd_ms']:7.4f} "
                  f"{med['step_from_idle_us']:7.1f}")
    write_record("mlp_top_plain_rules", rows=rows)


if __name__ == "__main__":
    main()
