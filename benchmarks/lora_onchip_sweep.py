"""LoRA's forward with xs formed on chip (lora_fwd_onchip_kernel) against the forms it replaces,
kernel time in CUDA graphs, two interleaved rounds (the best of each kept).

    python benchmarks/lora_onchip_sweep.py       (writes $OUT/lora_onchip_sweep.json)

For each shape (M, K -> N, rank r; bias, identity, bf16): the bare cuBLAS GEMM x @ W.T and
addmm with the bias (the floors), linear_act's forward (the same GEMM and bias in our kernel),
the LoRA forward with xs formed on chip (units per row block by the rule), and without it
(``ONCHIP_FORWARD = False``: the Triton kernel with x @ A.T in every tile's main loop up to
IN_LOOP_MAX_MACS, else xs from cuBLAS and the ping-pong kernel with xs @ B.T as its tail
steps); xs and y of the two compared (max abs difference).
"""
import torch

import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep
from fusedmlp.bench.suites.lora import sweep_operands

SHAPES = [(32768, 1024, 1024, 16), (32768, 1024, 1024, 8), (8192, 1024, 1024, 16), (8192, 1024, 1024, 8),
          (65536, 1024, 1024, 16), (16384, 512, 1792, 16), (16384, 1024, 4096, 16)]
torch.manual_seed(0)
rows = []
for m, k, n, r in SHAPES:
    x, w, b, a, lb = sweep_operands(m, k, n, r)

    def lora(onchip):
        def call():
            lora_ops.ONCHIP_FORWARD = onchip
            try:
                return lora_ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
            finally:
                lora_ops.ONCHIP_FORWARD = True
        return call

    calls = {"cublas": lambda: x @ w.T, "cublas_addmm": lambda: torch.addmm(b, x, w.T),
             "linear_act": lambda: linear_ops.linear_act_forward_impl(x, w, b, "identity", False),
             "onchip": lora(True), "before": lora(False)}
    times = {name: [] for name in calls}
    for round_ in range(2):
        for name in (list(calls) if round_ == 0 else list(calls)[::-1]):
            times[name].append(graph_us(calls[name]))
    row = dict(shape=[m, k, n, r], **{name: min(t) for name, t in times.items()})
    y_on, _, xs_on = calls["onchip"]()
    y_before, _, xs_before = calls["before"]()
    row["y_maxdiff"] = (y_on.float() - y_before.float()).abs().max().item()
    row["xs_maxdiff"] = (xs_on.float() - xs_before.float()).abs().max().item()
    row["onchip/cublas"] = row["onchip"] / row["cublas"]
    row["before/cublas"] = row["before"] / row["cublas"]
    rows.append(row)
    print_sweep_row(row)
write_sweep("lora_onchip_sweep", rows)
