"""Loads one chunk ahead on/off in one process: per config GPU time (CUDA graph), interleaved, and the tuned pick."""
import json, os, sys
import torch, triton
from triton.testing import do_bench_cudagraph
import torch.nn.functional as F
from fusedmlp.ops import mlp as M

torch.manual_seed(0)
dt = torch.bfloat16
OUT = os.environ.get("OUT", ".")
stacks = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4), ("h_stream", (32, 64, 512, 64, 16), ("relu",) * 4)]
tiles = [(64, 64, 4, 2), (32, 64, 4, 2), (16, 64, 4, 2), (16, 128, 4, 2)]
ms = [int(a) for a in sys.argv[1:]] or [2048, 8192, 16384, 32768, 65536]
res = []
def timed(x, ws, bs, plan, modes, on, cfg):
    M.LOADS_AHEAD_MAX_ROWS = 1 << 30 if on else 0
    if cfg is None:
        y = M._launch_stack(x, ws, bs, plan, modes)[0]
        torch.cuda.synchronize()
        return y, do_bench_cudagraph(lambda: M._launch_stack(x, ws, bs, plan, modes), rep=100) * 1e3
    with M._fwd_launcher.forcing(cfg):
        y = M._launch_stack(x, ws, bs, plan, modes)[0]
        torch.cuda.synchronize()
        return y, do_bench_cudagraph(lambda: M._launch_stack(x, ws, bs, plan, modes), rep=100) * 1e3
for name, widths, acts in stacks:
    L = len(widths) - 1
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
    plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
    for m in ms:
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        ref = x.float()
        for w, b in zip(ws, bs):
            ref = torch.relu(F.linear(ref, w.float(), b.float()))
        for train in (True, False):
            modes = plan.save if train else ("none",) * L
            for t in [None] + tiles:
                cfg = None if t is None else triton.Config({"BLOCK_M": t[0], "BLOCK_C": t[1]}, num_warps=t[2], num_stages=t[3])
                out = {}
                for rnd in range(2):
                    for on in (False, True):
                        y, us = timed(x, ws, bs, plan, modes, on, cfg)
                        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                        assert err < 2e-2, err
                        out[on] = min(out.get(on, 1e9), us)
                r = dict(stack=name, m=m, train=train, cfg=t or "tuned", off=out[False], on=out[True])
                res.append(r)
                print(f"{name:8s} {m:6d} train={int(train)} {str(t or 'tuned'):18s} off {out[False]:7.2f} on {out[True]:7.2f} on/off {out[True]/out[False]:.3f}", flush=True)
with open(f"{OUT}/mlp_ahead.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, results=res), f, indent=1)
best = {}
for r in res:
    if r["cfg"] != "tuned":
        k = (r["stack"], r["m"], r["train"])
        b = best.setdefault(k, [1e9, 1e9])
        b[0] = min(b[0], r["off"]); b[1] = min(b[1], r["on"])
print("BEST of forced configs: stack m train | off on on/off | tuned off on")
tuned = {(r["stack"], r["m"], r["train"]): r for r in res if r["cfg"] == "tuned"}
for k, (o, n) in best.items():
    t = tuned[k]
    print(k, f"{o:7.2f} {n:7.2f} {n/o:.3f} | {t['off']:7.2f} {t['on']:7.2f} {t['on']/t['off']:.3f}")
