"""Does the order in which the bench times its implementations move the LLM-shape ratios?
The bench times each shape's implementations one after another (fused first, the GEMM floor
last), and at these shapes an H100's clock under a sustained GEMM load drifts over a run.
Here the implementations of one comparison are timed in rounds, each round in the reverse
order of the one before (harness.median_ms per timing, 6 rounds), for:
  linear_act fwd, 16384 x 4096 -> 14336, gelu_tanh with bias: fused vs the GEMM x @ W.T;
  SwiGLU fwd+bwd, 16384 x 4096 -> 14336: fused (recompute=False) vs torch.compile vs Liger.
Run on a GPU from the repository root (writes interleaved_check.json to $OUT, or .):
PYTHONPATH=src python3 benchmarks/results/linear_form_choice_H100_2026-11-23/interleaved_check.py"""
import json
import os
import statistics

import torch

from fusedmlp.bench.harness import median_ms
from fusedmlp.bench.suites import linear_act as linear_suite
from fusedmlp.bench.suites import swiglu as swiglu_suite

ROUNDS = 6


def rounds(calls: dict) -> dict:
    for call in calls.values():  # compile, tune, choose forms
        for _ in range(2):
            call()
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    order = list(calls)
    for round_ in range(ROUNDS):
        for name in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(round(median_ms(calls[name]), 4))
    return times


results = {}
(x, w, b), _ = linear_suite._make_inputs((16384, 4096, 14336), torch.bfloat16)
fused_linear = linear_suite._forward_fn("fused")
results["linear_act fwd 16384x4096->14336"] = rounds({
    "fused": lambda: fused_linear(x, w, b),
    "gemm": lambda: torch.mm(x.detach(), w.detach().t()),
})
inputs, g = swiglu_suite._make_inputs((16384, 4096, 14336), torch.bfloat16)
impls = ["fused", "compile", *(["liger"] if swiglu_suite.liger_available() else [])]
forwards = {impl: swiglu_suite._forward_fn(impl) for impl in impls}
results["swiglu fwd+bwd 16384x4096->14336"] = rounds({
    impl: (lambda f=f: torch.autograd.grad(f(*inputs), inputs, g)) for impl, f in forwards.items()
})
summary = {}
for name, times in results.items():
    medians = {impl: statistics.median(ms) for impl, ms in times.items()}
    base = "gemm" if "gemm" in medians else "compile"
    summary[name] = {"median_ms": medians, f"ratio_to_{base}": {k: round(v / medians[base], 4) for k, v in medians.items()}}
    print(name, json.dumps(times), json.dumps(summary[name]), flush=True)
out = os.environ.get("OUT", ".")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "interleaved_check.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "rounds": results, "summary": summary}, f, indent=1)
