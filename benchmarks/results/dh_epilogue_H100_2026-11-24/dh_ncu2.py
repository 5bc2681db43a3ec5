"""Two launches each of dh kernel variants EXPERIMENT 0, 1, 2, 3 (needs
dh_epilogue_experiments.diff) at 16384 x 4096 -> 14336, for ncu (README: the command)."""
import torch, fusedmlp.ops.glu as glu_ops
base = dict(glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG)
tokens, d, hidden = 16384, 4096, 14336
dt = torch.bfloat16
torch.manual_seed(0)
x = torch.randn(tokens, d, device="cuda", dtype=dt)
gy = torch.randn(tokens, d, device="cuda", dtype=dt)
w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dt) / d**0.5 for _ in range(2))
w_down = torch.randn(d, hidden, device="cuda", dtype=dt) / hidden**0.5
h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dt)
call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)
for e in (0, 1, 2, 3):  # ncu profiles launches 2, 4, 6, 8 (--launch-skip 1 of the regex's)
    glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=e)
    call(); call()
torch.cuda.synchronize()
