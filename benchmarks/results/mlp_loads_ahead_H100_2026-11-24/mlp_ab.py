"""A/B of the whole-MLP forward kernel: per config GPU time (CUDA graph), one library per process."""
import json, os, sys
import torch, triton
from triton.testing import do_bench_cudagraph
import torch.nn.functional as F
from fusedmlp.ops import mlp as M

tag = sys.argv[1]
torch.manual_seed(0)
dt = torch.bfloat16
OUT = os.environ.get("OUT", ".")
stacks = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4, (2048, 8192, 65536)),
          ("h_stream", (32, 64, 512, 64, 16), ("relu",) * 4, (2048, 65536)),
          ("top_rest", (512, 256, 1), ("relu", "sigmoid"), (2048,))]
tiles = [(64, 64, 4, 2), (128, 128, 8, 3), (32, 64, 4, 2), (16, 64, 4, 2), (16, 128, 4, 2)]
res = []
for name, widths, acts, ms in stacks:
    L = len(widths) - 1
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
    plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
    for m in ms:
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        ref = x.float()
        for w, b, a in zip(ws, bs, acts):
            ref = F.linear(ref, w.float(), b.float())
            ref = torch.relu(ref) if a == "relu" else torch.sigmoid(ref)
        for train in (True, False):
            modes = plan.save if train else ("none",) * L
            for bm, bc, nw, st in tiles:
                cfg = triton.Config({"BLOCK_M": bm, "BLOCK_C": bc}, num_warps=nw, num_stages=st)
                try:
                    with M._fwd_launcher.forcing(cfg):
                        y = M._launch_stack(x, ws, bs, plan, modes)[0]
                        torch.cuda.synchronize()
                        us = do_bench_cudagraph(lambda: M._launch_stack(x, ws, bs, plan, modes), rep=100) * 1e3
                except Exception as ex:
                    print(f"{tag} {name} {m} {bm},{bc},{nw},{st} failed {type(ex).__name__}: {str(ex)[:100]}", flush=True)
                    continue
                err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                res.append(dict(tag=tag, stack=name, m=m, train=train, cfg=[bm, bc, nw, st], us=us, err=err))
                print(f"{tag} {name:8s} {m:6d} train={int(train)} {bm:3d},{bc:3d},{nw},{st} {us:8.2f} us err {err:.1e}", flush=True)
with open(f"{OUT}/mlp_ab_{tag}.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, results=res), f, indent=1)
