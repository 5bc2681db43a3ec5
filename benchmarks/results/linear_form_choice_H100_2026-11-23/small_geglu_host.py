"""Is the GEGLU forward host-bound at d = 1024 with 4096 or 8192 rows? For each shape (bf16,
training forward: inputs require grad): the host microseconds per call with no sync
(harness.host_us_per_call), the do_bench median ms (as the bench times the fwd mode) and the
ms of the call replayed from a CUDA graph (kernel time alone), for the fused forward
(recompute and store modes), Liger's path and the bare GEMM x @ W.T. Run on a GPU from the
repository root (writes small_geglu_host.json to $OUT, or the current folder):
PYTHONPATH=src python3 benchmarks/results/linear_form_choice_H100_2026-11-23/small_geglu_host.py"""
import json
import os

import torch

from fusedmlp.bench.harness import graph_us, host_us_per_call, median_ms
from fusedmlp.bench.suites.glu import _forward_fn, _make_inputs, liger_available

rows = []
impls = ["fused", "fused_store", *(["liger"] if liger_available() else [])]
for d, n in [(1024, 4096), (1024, 8192)]:
    (x, w, b), _ = _make_inputs((d, n), torch.bfloat16)
    calls = {impl: (lambda f=_forward_fn(impl): f(x, w, b)) for impl in impls}
    calls["gemm"] = lambda: torch.mm(x.detach(), w.detach().t())
    for impl, call in calls.items():
        call()
        row = dict(d=d, n=n, impl=impl, host_us=round(host_us_per_call(call), 1),
                   do_bench_ms=round(median_ms(call), 4))
        with torch.no_grad():  # a graph replays kernels only; autograd's bookkeeping is host work
            row["graph_ms"] = round(graph_us(call) / 1e3, 4)
        print(json.dumps(row), flush=True)
        rows.append(row)
out = os.environ.get("OUT", ".")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "small_geglu_host.json"), "w") as f:
    json.dump(rows, f, indent=1)
