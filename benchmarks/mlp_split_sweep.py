"""The top DLRM MLP's forward as one kernel against layer 0 as a GEMM of its own (linear_act's
ping-pong kernel) followed by the rest of the stack as one kernel (one Hopper GPU, bf16).

    python benchmarks/mlp_split_sweep.py [ROWS,...]   (writes $OUT/mlp_split_sweep.json)

367-512-256-1 (ReLU, ReLU, then identity or sigmoid), ops/mlp.py's training forward
(``_launch_forward``: y and each layer's tensor for the backward) and inference forward, as
the op runs them with FIRST_LAYER_GEMM_MIN_ROWS set so that every row count takes the path
named: ``whole`` (x and W_0 copied into zero-padded 368-wide rows, one kernel) or ``split``
(W_0 copied likewise, x too unless its rows are aligned in place; then linear_act's forward
and the 512-256-1 rest as one kernel). x in contiguous 367-wide rows, or in the
interaction's 368-wide rows (``aligned_rows_empty``, NaN in the padding). Kernel time in
CUDA graphs; the max error against fp32 over max |y|. Then the host time of each path through
``fusedmlp.mlp`` at $HOST_ROWS rows (default 2048), forward and forward+backward.
"""
import os
import sys

import torch
import torch.nn.functional as F

import fusedmlp
from fusedmlp.bench.harness import graph_us, host_us_per_call, print_sweep_row, write_sweep
from fusedmlp.ops import mlp as M
from fusedmlp.ops._common import aligned_rows_empty

torch.manual_seed(0)
dt = torch.bfloat16
rows_list = [int(r) for r in sys.argv[1].split(",")] if len(sys.argv) > 1 else [2048, 4096, 8192, 16384, 65536]
out = []
for last in ("identity", "sigmoid"):
    widths = (367, 512, 256, 1)
    acts = ("relu", "relu", last)
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(3)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(3)]
    plan = M.mlp_plan(widths, acts, (True,) * 3, M.FULL_MAX)
    for m in rows_list:
        contiguous = torch.randn(m, widths[0], device="cuda", dtype=dt)
        interaction = aligned_rows_empty(contiguous, m, widths[0])
        interaction._base.fill_(float("nan"))
        interaction.copy_(contiguous)
        ref = contiguous.float()
        for w, b, act in zip(ws, bs, acts):
            ref = F.linear(ref, w.float(), b.float())
            ref = torch.relu(ref) if act == "relu" else (torch.sigmoid(ref) if act == "sigmoid" else ref)
        for layout, x in (("contiguous", contiguous), ("interaction", interaction)):
            for save in (True, False):
                for path, min_rows in (("whole", 2**62), ("split", 0)):
                    M.FIRST_LAYER_GEMM_MIN_ROWS = min_rows
                    fn = lambda: M._launch_forward(x, ws, bs, plan, save)  # noqa: E731
                    y = fn()[0]
                    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                    row = dict(last=last, rows=m, layout=layout, training=save, path=path, us=graph_us(fn),
                               err_maxdiff=err)
                    print_sweep_row(row)
                    out.append(row)
# Host time of the op (fusedmlp.mlp, training forward and forward+backward) by path, at a
# row count small enough for the host to be the bound (``host_us_per_call``).
m = int(os.environ.get("HOST_ROWS", 2048))
x = torch.randn(m, 367, device="cuda", dtype=dt, requires_grad=True)
params = [t.clone().requires_grad_() for t in ws + bs]
g = torch.randn(m, 1, device="cuda", dtype=dt)
for path, min_rows in (("whole", 2**62), ("split", 0)):
    M.FIRST_LAYER_GEMM_MIN_ROWS = min_rows
    fwd = lambda: fusedmlp.mlp(x, params[:3], params[3:], "relu", "sigmoid")  # noqa: E731
    step = lambda: torch.autograd.grad(fwd(), [x] + params, g)  # noqa: E731
    for name, fn in (("fwd", fwd), ("fwd+bwd", step)):
        row = dict(rows=m, path=path, mode=name, host_us=host_us_per_call(fn))
        print_sweep_row(row)
        out.append(row)
write_sweep("mlp_split_sweep", out)
