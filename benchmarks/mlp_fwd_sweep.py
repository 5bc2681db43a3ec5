"""Sweep of the whole-MLP forward kernel's tile configs on the DLRM MLPs (one CUDA GPU).

    python benchmarks/mlp_fwd_sweep.py          (writes $OUT/mlp_fwd_sweep.json, default .)

For the top (367-512-256-1, ReLU then sigmoid) and bottom (13-512-256-64-16, ReLU) MLPs at
8192 and 65536 rows in bf16, each config of ``kernels/configs._MLP_FWD_TILES`` runs the
training forward of ops/mlp.py (``_launch_forward``: the kernel writes y and the saved
tensors; for the top MLP also the copy of x into zero-padded 368-wide rows and the padding of
W_0 that the op does) on x in contiguous rows, in the interaction's padded rows
(``aligned_rows_empty``), and, for reference, as a 368-wide stack whose extra column of x and
of W_0 is zero (the kernel alone, with no copy). Each result is checked against fp32 (max error over
max |y|) and timed in a CUDA graph (``triton.testing.do_bench_cudagraph``): a forced config
launches without the launch cache, whose host time would otherwise be measured at 8192 rows.
Eager PyTorch (``F.linear`` + activation per layer, the same weights) is timed alongside.
"""
import json
import os

import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph

from fusedmlp.ops import mlp as M
from fusedmlp.ops._common import aligned_rows_empty

torch.manual_seed(0)
dt = torch.bfloat16
M.FIRST_LAYER_GEMM_MIN_ROWS = 2**62  # the whole-stack kernel at every row count (its configs are swept)
results = []
for name, widths, last in [("top", (367, 512, 256, 1), "sigmoid"), ("bottom", (13, 512, 256, 64, 16), "relu")]:
    layers = len(widths) - 1
    acts = ("relu",) * (layers - 1) + (last,)
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(layers)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(layers)]
    plan = M.mlp_plan(widths, acts, (True,) * layers, M.FULL_MAX)
    for m in (8192, 65536):
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        padded = aligned_rows_empty(x, m, widths[0])
        padded.copy_(x)
        ref = x.float()
        for w, b, act in zip(ws, bs, acts):
            ref = F.linear(ref, w.float(), b.float())
            ref = torch.relu(ref) if act == "relu" else torch.sigmoid(ref)

        def eager():
            h = x
            for w, b, act in zip(ws, bs, acts):
                h = F.linear(h, w, b)
                h = torch.relu(h) if act == "relu" else torch.sigmoid(h)
            return h

        us = do_bench_cudagraph(eager, rep=100) * 1000
        print(f"{name} {m} eager {us:.1f} us", flush=True)
        results.append(dict(stack=name, rows=m, impl="eager", us=us))
        layouts = {"contiguous": (x, ws, plan)}
        if padded.stride(0) != x.stride(0):
            wide = padded.stride(0)
            zero_col = torch.nn.functional.pad(x, (0, wide - widths[0]))
            ws_wide = [torch.nn.functional.pad(ws[0], (0, wide - widths[0]))] + ws[1:]
            layouts["padded"] = (padded, ws, plan)
            layouts[f"{wide}-wide"] = (zero_col, ws_wide, M.mlp_plan((wide,) + widths[1:], acts, (True,) * layers,
                                                                     M.FULL_MAX))
        for layout, (inp, ws_in, plan_in) in layouts.items():
            for config in M._fwd_launcher.configs:
                meta = dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
                with M._fwd_launcher.forcing(config):
                    try:
                        y = M._launch_forward(inp, ws_in, bs, plan_in, True)[0]
                        step = lambda: M._launch_forward(inp, ws_in, bs, plan_in, True)  # noqa: E731
                        us = do_bench_cudagraph(step, rep=100) * 1000
                    except Exception as e:  # a config that does not fit the GPU
                        print(f"  {layout} {meta} failed: {type(e).__name__}", flush=True)
                        continue
                err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                print(f"  {layout:10s} {meta} {us:8.1f} us  err {err:.1e}", flush=True)
                results.append(dict(stack=name, rows=m, impl="fused", layout=layout, config=meta, us=us, err=err))
with open(os.path.join(os.environ.get("OUT", "."), "mlp_fwd_sweep.json"), "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=__import__("triton").__version__, results=results), f, indent=1)
