"""linear_act's ping-pong forward: configs (stages, GROUP_M) against cuBLAS, in CUDA graphs.

    python benchmarks/linear_pingpong_sweep.py [CONFIG ...]     (writes $OUT/linear_pingpong_sweep.json)

For each shape (M, K -> N, activation; bias, bf16): the bare cuBLAS GEMM, and the ping-pong
kernel under each config (``s``: stages, ``g``: GROUP_M; 128 x 128 tiles), y only, each
checked against the library's config first (max abs difference). Arguments: only the named
configs.
"""
import sys
import torch
import fusedmlp.ops.linear_act as linear_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep

base = dict(linear_ops.LINEAR_PINGPONG_CONFIG)
cfgs = {f"s{s}g{g}": dict(STAGES=s, GROUP_M=g) for s in (4, 5) for g in (1, 4, 8, 16)}
if len(sys.argv) > 1:
    cfgs = {k: v for k, v in cfgs.items() if k in sys.argv[1:]}
SHAPES = [(16384, 512, 1792, "gelu_tanh"), (8192, 1024, 4096, "gelu_tanh"), (16384, 4096, 14336, "gelu_tanh")]
rows = []
torch.manual_seed(0)
for m, k, n, act in SHAPES:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    call = lambda: linear_ops.linear_act_forward_impl(x, w, b, act, False)  # noqa: E731
    r = dict(shape=[m, k, n], act=act, cublas=graph_us(lambda: x @ w.T), library=graph_us(call))
    ref = call()[0]
    for name, c in cfgs.items():
        linear_ops.LINEAR_PINGPONG_CONFIG = dict(base, **c)
        r[name + "_maxdiff"] = (call()[0].float() - ref.float()).abs().max().item()
        r[name] = graph_us(call)
    linear_ops.LINEAR_PINGPONG_CONFIG = base
    rows.append(r)
    print_sweep_row(r)
write_sweep("linear_pingpong_sweep", rows)
