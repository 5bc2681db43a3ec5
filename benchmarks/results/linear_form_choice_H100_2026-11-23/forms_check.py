"""Does the linear forward's timed choice of form pick the fastest one? For each shape (bias,
bf16): the form the first call chose and its own ms per form, then each form timed by the
harness's median_ms (do_bench) with the form forced, and the bare cuBLAS GEMM x @ W.T.
Run on a GPU from the repository root:
PYTHONPATH=src python3 benchmarks/results/linear_form_choice_H100_2026-11-23/forms_check.py
(writes forms_check.json to $OUT, or the current folder)."""
import json
import os

import torch

import fusedmlp.kernels.configs as configs
import fusedmlp.ops.linear_act as ops
from fusedmlp.bench.harness import median_ms
from fusedmlp.ops._common import autotune_m_key

configs.AUTOTUNE = True
SHAPES = [  # M, K, N, activation, pre stored
    (16384, 4096, 14336, "gelu_tanh", False), (16384, 4096, 14336, "gelu_tanh", True),
    (16384, 4096, 14336, "identity", False), (8192, 4096, 4096, "gelu_tanh", False),
    (32768, 4096, 4096, "gelu_tanh", False), (16384, 2048, 8192, "gelu_tanh", False),
    (8192, 1024, 4096, "gelu_tanh", False), (16384, 512, 1792, "gelu_tanh", False),
    (16384, 512, 1792, "gelu_tanh", True),
]
rows = []
for m, k, n, act, store_pre in SHAPES:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    call = lambda: ops.linear_act_forward_impl(x, w, b, act, store_pre)  # noqa: E731
    call()  # the first call of the key: times the forms and files the fastest
    key = next(key for key in ops.linear_forward_form.times
               if key[2:6] == (autotune_m_key(m), n, k, act) and key[7] == store_pre)
    row = dict(m=m, k=k, n=n, activation=act, store_pre=store_pre, chosen=ops.linear_forward_form.chosen[key],
               chooser={name: round(ms, 4) for name, ms in ops.linear_forward_form.times[key].items()},
               cublas=round(median_ms(lambda: x @ w.T), 4))
    bench = {}
    for form in ops.LINEAR_FORWARD_FORMS:
        with ops.linear_forward_form.forcing(form):
            bench[form] = round(median_ms(call), 4)
    row["do_bench"] = bench
    row["best"] = min(bench, key=bench.get)
    row["loss_pct"] = round(100 * (bench[row["chosen"]] / bench[row["best"]] - 1), 1)
    print(json.dumps(row), flush=True)
    rows.append(row)
out = os.environ.get("OUT", ".")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "forms_check.json"), "w") as f:
    json.dump(rows, f, indent=1)
