"""LoRA's forward with xs formed by work items on the spare programs (lora_fwd_handoff_kernel)
against the forms it replaces, kernel time in CUDA graphs, two interleaved rounds (the best of
each kept).

    python benchmarks/lora_handoff_sweep.py       (writes $OUT/lora_handoff_sweep.json)

For each shape (M, K -> N, rank r; bias, identity, bf16): the bare cuBLAS GEMM x @ W.T and
addmm with the bias (the floors), linear_act's forward (the same GEMM and bias in our kernel),
the library's LoRA forward (``library``: the handoff kernel where its items fit, else the
on-chip units kernel up to K = LORA_PINGPONG_MAX_K, else xs from cuBLAS), the handoff kernel
forced (``handoff``: HANDOFF_FORWARD "always") and the forms before it (``before``:
HANDOFF_FORWARD and ONCHIP_FORWARD off, so xs from cuBLAS and the faster of the Triton and
ping-pong kernels); y and xs of the handoff kernel against the forms before (max abs
difference); ``grid``, the programs ``_handoff_grid`` picks, and where another
HANDOFF_ITEM_COST of COSTS picks another grid, the handoff kernel timed with it
(``handoff_cost<c>``, ``grid_cost<c>``).
"""
import torch

import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep
from fusedmlp.bench.suites.lora import sweep_operands

COSTS = (0.2, 0.5, 0.7)
SHAPES = [(8192, 4096, 4096, 16), (8192, 4096, 4096, 8), (8192, 4096, 4096, 32), (8192, 4096, 4096, 64), (32768, 4096, 4096, 16),
          (16384, 4096, 14336, 16), (2048, 4096, 4096, 16), (16384, 2048, 2048, 16), (32768, 1024, 1024, 16),
          (16384, 1024, 4096, 16)]
torch.manual_seed(0)
rows = []
for m, k, n, r in SHAPES:
    x, w, b, a, lb = sweep_operands(m, k, n, r)

    def lora(handoff, onchip):
        def call():
            saved = lora_ops.HANDOFF_FORWARD, lora_ops.ONCHIP_FORWARD
            lora_ops.HANDOFF_FORWARD, lora_ops.ONCHIP_FORWARD = handoff, onchip
            try:
                return lora_ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
            finally:
                lora_ops.HANDOFF_FORWARD, lora_ops.ONCHIP_FORWARD = saved
        return call

    calls = {"cublas": lambda: x @ w.T, "cublas_addmm": lambda: torch.addmm(b, x, w.T),
             "linear_act": lambda: linear_ops.linear_act_forward_impl(x, w, b, "identity", False),
             "library": lora(True, True), "handoff": lora("always", True),
             "before": lora(False, False)}
    tile_m = 2 * lora_ops.LORA_HANDOFF_CONFIG["BLOCK_M"]
    tiles = -(-m // tile_m) * -(-n // lora_ops.LORA_HANDOFF_CONFIG["BLOCK_N"])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = lora_ops._handoff_grid(tiles, -(-m // tile_m), sms)[0]
    other_grids = {}
    for cost in COSTS:
        saved_cost, lora_ops.HANDOFF_ITEM_COST = lora_ops.HANDOFF_ITEM_COST, cost
        try:
            other = lora_ops._handoff_grid(tiles, -(-m // tile_m), sms)[0]
        finally:
            lora_ops.HANDOFF_ITEM_COST = saved_cost
        if other != grid and other not in other_grids.values():
            other_grids[cost] = other

    def with_cost(cost, call):
        def timed():
            saved_cost, lora_ops.HANDOFF_ITEM_COST = lora_ops.HANDOFF_ITEM_COST, cost
            try:
                return call()
            finally:
                lora_ops.HANDOFF_ITEM_COST = saved_cost
        return timed

    for cost in other_grids:
        calls[f"handoff_cost{cost}"] = with_cost(cost, calls["handoff"])
    times = {name: [] for name in calls}
    for round_ in range(2):
        for name in (list(calls) if round_ == 0 else list(calls)[::-1]):
            times[name].append(graph_us(calls[name]))
    row = dict(shape=[m, k, n, r], grid=grid, **{f"grid_cost{c}": g for c, g in other_grids.items()},
               **{name: min(t) for name, t in times.items()})
    y_handoff, _, xs_handoff = calls["handoff"]()
    y_before, _, xs_before = calls["before"]()
    row["y_maxdiff"] = (y_handoff.float() - y_before.float()).abs().max().item()
    row["xs_maxdiff"] = (xs_handoff.float() - xs_before.float()).abs().max().item()
    for name in ("library", "handoff", "before", "linear_act"):
        row[f"{name}/cublas"] = row[name] / row["cublas"]
    rows.append(row)
    print_sweep_row(row)
write_sweep("lora_handoff_sweep", rows)
