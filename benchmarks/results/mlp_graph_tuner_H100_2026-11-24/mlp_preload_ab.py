"""The MLP forward's PRELOAD (the small full layers' weights loaded before the streamed pair's
loop) on and off in one process: every forward config forced, kernel time from CUDA graphs
(configs.graph_timing), the two interleaved over 2 rounds (min), and the tuner's table best.

    git apply benchmarks/results/mlp_graph_tuner_H100_2026-11-24/preload_small_layers.diff
    PYTHONPATH=src python benchmarks/results/mlp_graph_tuner_H100_2026-11-24/mlp_preload_ab.py
    (writes $OUT/mlp_preload_ab.json; the change was not kept, so the script needs its diff)
"""
import json
import os
import time

import torch
import torch.nn.functional as F
import triton

from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

OUT = os.environ.get("OUT", ".")
dt = torch.bfloat16
torch.manual_seed(0)
STACKS = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4), ("top_rest", (512, 256, 1), ("relu", "sigmoid")),
          ("h_stream", (32, 64, 512, 64, 16), ("relu",) * 4)]
ROWS = [2048, 8192, 65536]
DEFAULT = M.PRELOAD_MAX_ELEMENTS
res = []
for name, widths, acts in STACKS:
    L = len(widths) - 1
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
    plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
    for m in ROWS:
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        ref = x.double()
        for i, (w, b) in enumerate(zip(ws, bs)):
            ref = F.linear(ref, w.double(), b.double())
            ref = torch.relu(ref) if acts[i] == "relu" else torch.sigmoid(ref)
        for train in (True, False):
            modes = plan.save if train else ("none",) * L
            run = lambda: M._launch_stack(x, ws, bs, plan, modes)  # noqa: E731
            for cfg in C.MLP_FWD_CONFIGS:
                t = (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_C"], cfg.num_warps, cfg.num_stages)
                out = {}
                for rnd in range(2):
                    for on in ((False, True) if rnd == 0 else (True, False)):
                        M.PRELOAD_MAX_ELEMENTS = DEFAULT if on else 0
                        try:
                            with M._fwd_launcher.forcing(cfg):
                                y = run()[0]
                                torch.cuda.synchronize()
                                err = ((y.double() - ref).norm() / ref.norm()).item()
                                assert err < 2e-2, err
                                us = C.graph_timing(run, (0.5,))[0] * 1e3
                        except Exception as exc:  # out of resources: recorded
                            out[on] = float("inf")
                            print(name, m, train, t, on, "FAILED", type(exc).__name__, str(exc)[:100], flush=True)
                            continue
                        out[on] = min(out.get(on, 1e9), us)
                preload = M._preloaded_layers(plan, M._loads_ahead(m, modes))
                res.append(dict(stack=name, m=m, train=train, config=t, off_us=out[False], on_us=out[True],
                                preload_when_on=preload))
                print(f"{name:8s} {m:6d} train={int(train)} {str(t):16s} off {out[False]:7.2f} on {out[True]:7.2f} "
                      f"on/off {out[True] / out[False]:.3f} preload {preload}", flush=True)
M.PRELOAD_MAX_ELEMENTS = DEFAULT
with open(f"{OUT}/mlp_preload_ab.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%d"), results=res), f, indent=1)
print("\nstack m train | best off (config) | best on (config) | on/off")
keys = sorted({(r["stack"], r["m"], r["train"]) for r in res}, key=lambda k: (k[0], k[1], not k[2]))
for k in keys:
    rs = [r for r in res if (r["stack"], r["m"], r["train"]) == k]
    off = min(rs, key=lambda r: r["off_us"])
    on = min(rs, key=lambda r: r["on_us"])
    print(f"{k[0]} {k[1]} {int(k[2])} | {off['off_us']:.2f} {off['config']} | {on['on_us']:.2f} {on['config']} | "
          f"{on['on_us'] / off['off_us']:.3f}")
