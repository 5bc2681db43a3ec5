"""Two launches each of the SwiGLU dh kernel and cuBLAS's g = gy @ Wd at 16384 x 4096 -> 14336,
for ncu (README: the command)."""
import torch, fusedmlp.ops.glu as glu_ops
tokens, d, hidden = 16384, 4096, 14336
dt = torch.bfloat16
torch.manual_seed(0)
x = torch.randn(tokens, d, device="cuda", dtype=dt)
gy = torch.randn(tokens, d, device="cuda", dtype=dt)
w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dt) / d**0.5 for _ in range(2))
w_down = torch.randn(d, hidden, device="cuda", dtype=dt) / hidden**0.5
h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dt)
call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)
for _ in range(2):
    call(); gy @ w_down
torch.cuda.synchronize()
