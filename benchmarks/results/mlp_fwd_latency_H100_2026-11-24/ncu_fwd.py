import sys, torch, triton
from fusedmlp.ops import mlp as M
torch.manual_seed(0)
dt = torch.bfloat16
widths = tuple(int(v) for v in sys.argv[1].split("-"))
m = int(sys.argv[2])
bm, bc, w, st = (int(v) for v in sys.argv[3].split(","))
L = len(widths) - 1
acts = ("relu",) * L
ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
x = torch.randn(m, widths[0], device="cuda", dtype=dt)
cfg = triton.Config({"BLOCK_M": bm, "BLOCK_C": bc}, num_warps=w, num_stages=st)
with M._fwd_launcher.forcing(cfg):
    for _ in range(3):
        M._launch_stack(x, ws, bs, plan, plan.save)
torch.cuda.synchronize()
