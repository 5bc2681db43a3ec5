"""One launch each of the library's alternating linear forward and the cluster kernel (with and
without W multicast) at 16384 x 4096 -> 14336, for Nsight Compute."""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(__file__))
import mc_linear
from fusedmlp.ops import linear_act as la_ops

M, K, N = 16384, 4096, 14336
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
common = dict(M=M, N=N, K=K, ACT="gelu_tanh", HAS_BIAS=True, STORE_PRE=False)
for _ in range(2):
    la_ops._launch_fwd_pingpong(x, w, b, y, y, common, "alternating")
    mc_linear.run(x, w, b, y=y, clusters=64)
    mc_linear.run(x, w, b, y=y, clusters=64, MULTICAST=False)
torch.cuda.synchronize()
