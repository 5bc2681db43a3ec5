"""The MLP weight-gradient kernel on DLRM's top MLP (367-512-256-1) with x's rows read 367 and
368 wide, against the library's cuBLAS form (one product per layer and per bias), one CUDA
GPU, bf16; then the top MLP's whole fwd+bwd step with each form.

    python benchmarks/mlp_wgrad_cols.py          (writes $OUT/wgrad_cols.json, default .)

x sits in zero-padded 368-wide rows as the forward's copy leaves it; the saved tensors and the
d_i are random. Each launch is ops/mlp.py's (``_wgrad_geometry``'s tiles and row slices, the
reduction of the slices' partials; ``_weight_grads_cublas``); each result's relative error
against float64, and its time in CUDA graphs (microseconds, best of two medians;
``graph_us``). The steps: ``fusedmlp bench mlp``'s fused_graph fwd+bwd (contiguous 367-wide x,
every gradient), with CUBLAS_WGRAD_MIN_ROWS forced to send every batch to one form or the
other, timed as the bench times it (median of replays, L2 flushed), 2 interleaved rounds.
"""
import json, os
import torch, triton
from fusedmlp.bench.harness import graph_steps, graph_us, interleaved_ms
from fusedmlp.bench.suites.mlp import _forward_fn, _make_inputs
from fusedmlp.ops import mlp as M
from fusedmlp.ops._common import dot_meta, num_sms, shared_memory_per_block
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.mlp import mlp_wgrad_kernel, mlp_reduce_kernel

torch.manual_seed(0)
dt = torch.bfloat16
res = []
widths, acts = (367, 512, 256, 1), ("relu", "relu", "sigmoid")
for m in (2048, 8192, 16384, 32768, 65536):  # the mlp suite's batches and between
    xp = torch.zeros(m, 368, device="cuda", dtype=dt)
    xp[:, :367] = torch.randn(m, 367, device="cuda", dtype=dt)
    x = xp[:, :367]
    plan = M.mlp_plan(widths, acts, (True,) * 3, M.FULL_MAX)
    saved = [torch.relu(torch.randn(m, widths[i + 1], device="cuda", dtype=dt)) for i in range(2)]
    d = [torch.randn(m, widths[i + 1], device="cuda", dtype=dt) for i in range(3)]
    tn, tk, br, tiles, slices, rps = M._wgrad_geometry(plan, m, dt, num_sms(x), shared_memory_per_block(x))

    def wgrad(x_cols):
        grads = x.new_empty((plan.total,))
        out = grads if slices == 1 else x.new_empty((slices, plan.total), dtype=torch.float32)
        launch(mlp_wgrad_kernel, (tiles, slices), x, tuple(d), tuple(saved), out, m, rps, x.stride(0), x.stride(1),
               plan.total, WIDTHS=plan.widths, X_COLS=x_cols, A_ACTS=plan.a_acts, HAS_BIAS=plan.has_bias,
               OFFSETS=plan.offsets, TILE_N=tn, TILE_K=tk, BLOCK_R=br, **dot_meta(dt), num_warps=4, num_stages=3)
        if slices > 1:
            launch(mlp_reduce_kernel, (triton.cdiv(plan.total, 1024),), out, grads, plan.total, slices, BLOCK=1024,
                   UPCAST=False)
        return grads

    def cublas():  # the library's cuBLAS form (ops/mlp.py, from CUBLAS_WGRAD_MIN_ROWS rows)
        return M._weight_grads_cublas(d, x, saved, plan)

    ref = torch.cat([t for i in range(3) for t in ((d[i].double().t() @ (x if i == 0 else saved[i - 1]).double()).flatten(),
                                                   d[i].double().sum(0))])
    row = dict(m=m, tiles=tiles, slices=slices)
    for name, fn in (("kernel_367", lambda: wgrad(367)), ("kernel_368", lambda: wgrad(368)), ("cublas", cublas)):
        row[name + "_err"] = ((fn().double() - ref).norm() / ref.norm()).item()
        row[name + "_us"] = min(graph_us(fn) for _ in range(2))
    res.append(row)
    print(json.dumps({k: (float(f"{v:.3g}") if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
steps = []
for m in (2048, 8192, 16384, 32768, 65536):
    shape = (m, *widths)
    inputs, g = _make_inputs(shape, dt)
    calls = {}
    for form, min_rows in (("kernel", 2**62), ("cublas", 0)):
        M.CUBLAS_WGRAD_MIN_ROWS = min_rows  # read when the step is captured
        calls[form] = graph_steps(_forward_fn(shape)("fused"), inputs, g)["fwd+bwd"]
    row = dict(m=m, **{form + "_step_us": [round(t * 1e3, 1) for t in ts] for form, ts in interleaved_ms(calls, 2).items()})
    steps.append(row)
    print(json.dumps(row), flush=True)
res = dict(wgrad=res, steps=steps)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "wgrad_cols.json"), "w"), indent=1)
