"""The MLP kernels' tuner: every config's time as the tuner measures it (events after an L2
flush, Triton's do_bench, twice) and from a CUDA graph (graph_timing), and the config that
each way of tuning picks, over the current table and an extended one.

    PYTHONPATH=src python benchmarks/mlp_tuner_sweep.py [fwd|dgrad|both]  (writes $OUT/tuner_sweep_*.json)

"current" is the table of kernels/configs.py when the script runs; the extra configs are
timed as well (those already in the table once).
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

OUT = os.environ.get("OUT", ".")
what = sys.argv[1] if len(sys.argv) > 1 else "both"
dt = torch.bfloat16
torch.manual_seed(0)

STACKS = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4), ("top_rest", (512, 256, 1), ("relu", "sigmoid"))]
ROWS = {"bottom": [2048, 8192, 16384, 65536], "top_rest": [2048, 8192, 65536]}
FWD_EXTRA = [(16, 128, 4, 2), (32, 128, 4, 2), (16, 128, 2, 2), (64, 128, 4, 2)]
DGRAD_EXTRA = [(16, 128, 4, 2), (32, 128, 4, 2), (64, 64, 4, 2)]


def cfg_of(t):
    return triton.Config({"BLOCK_M": t[0], "BLOCK_C": t[1]}, num_warps=t[2], num_stages=t[3])


def tup(c):
    return (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_C"], c.num_warps, c.num_stages)


def times_of(fn):
    g = C.graph_timing(fn, (0.5,))[0] * 1e3
    e1 = do_bench(fn, quantiles=(0.5, 0.2, 0.8))[0] * 1e3
    e2 = do_bench(fn, quantiles=(0.5, 0.2, 0.8))[0] * 1e3
    return g, e1, e2


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def tuned_pick(launcher_attr, configs, key, timing, run):
    """The config a fresh Launcher over ``configs`` with ``timing`` picks for ``run``."""
    old = getattr(M, launcher_attr)
    fresh = C.Launcher(old.kernel, configs, key=list(old.key), timing=timing)
    setattr(M, launcher_attr, fresh)
    try:
        t0 = time.time()
        run()
        torch.cuda.synchronize()
        return tup(fresh.tuned.best_config), time.time() - t0
    finally:
        setattr(M, launcher_attr, old)


results = []
current_fwd = [tup(c) for c in C.MLP_FWD_CONFIGS]
current_dgrad = [tup(c) for c in C.MLP_DGRAD_CONFIGS]
print("current fwd", current_fwd, "dgrad", current_dgrad, flush=True)
for name, widths, acts in STACKS:
    L = len(widths) - 1
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
    plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
    for m in ROWS[name]:
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        ref = x.double()
        for i, (w, b) in enumerate(zip(ws, bs)):
            ref = F.linear(ref, w.double(), b.double())
            ref = torch.relu(ref) if acts[i] == "relu" else torch.sigmoid(ref)
        for train in ((True, False) if what in ("fwd", "both") else ()):
            modes = plan.save if train else ("none",) * L
            run = lambda: M._launch_stack(x, ws, bs, plan, modes)  # noqa: E731
            cell = dict(kernel="fwd", stack=name, m=m, train=train, configs={})
            for t in current_fwd + [t for t in FWD_EXTRA if t not in current_fwd]:
                try:
                    with M._fwd_launcher.forcing(cfg_of(t)):
                        y = run()[0]
                        torch.cuda.synchronize()
                        err = rel(y, ref)
                        g, e1, e2 = times_of(run)
                except Exception as exc:  # out of resources
                    cell["configs"][str(t)] = dict(error=type(exc).__name__)
                    print(name, m, train, t, "FAILED", type(exc).__name__, flush=True)
                    continue
                cell["configs"][str(t)] = dict(graph_us=g, events_us=[e1, e2], err=err)
                print(f"fwd {name:8s} {m:6d} train={int(train)} {str(t):16s} graph {g:8.2f} events {e1:8.2f} {e2:8.2f} err {err:.1e}", flush=True)
            cur = [cfg_of(t) for t in current_fwd]
            ext = cur + [cfg_of(t) for t in FWD_EXTRA if t not in current_fwd and "error" not in cell["configs"][str(t)]]
            cell["picks"] = {}
            for label, cfgs, timing in (("events_current", cur, "events"), ("graph_current", cur, "graph"),
                                        ("graph_extended", ext, "graph"), ("events_extended", ext, "events")):
                pick, secs = tuned_pick("_fwd_launcher", cfgs, M._fwd_launcher.key, timing, run)
                cell["picks"][label] = dict(config=pick, graph_us=cell["configs"][str(pick)]["graph_us"], tune_s=secs)
                print(f"   pick {label:16s} {str(pick):16s} -> graph {cell['picks'][label]['graph_us']:8.2f} us (tuning {secs:.2f} s)", flush=True)
            results.append(cell)
        if what in ("dgrad", "both"):
            y, saved, padded = M._launch_forward(x, ws, bs, plan, True)
            gy = torch.randn_like(y)
            run = lambda: M._launch_backward(gy, x, ws, saved, y, plan, True, padded)  # noqa: E731
            with M._dgrad_launcher.forcing(cfg_of(current_dgrad[0])):
                dx0, gr0 = run()
            cell = dict(kernel="dgrad", stack=name, m=m, train=True, configs={})
            for t in current_dgrad + [t for t in DGRAD_EXTRA if t not in current_dgrad]:
                try:
                    with M._dgrad_launcher.forcing(cfg_of(t)):
                        dx, gr = run()
                        torch.cuda.synchronize()
                        err = max(rel(dx, dx0), rel(gr, gr0))
                        g, e1, e2 = times_of(run)
                except Exception as exc:
                    cell["configs"][str(t)] = dict(error=type(exc).__name__)
                    print(name, m, "dgrad", t, "FAILED", type(exc).__name__, flush=True)
                    continue
                cell["configs"][str(t)] = dict(graph_us=g, events_us=[e1, e2], err_vs_first=err)
                print(f"bwd {name:8s} {m:6d} {str(t):16s} graph {g:8.2f} events {e1:8.2f} {e2:8.2f} err {err:.1e}", flush=True)
            cur = [cfg_of(t) for t in current_dgrad]
            ext = cur + [cfg_of(t) for t in DGRAD_EXTRA if t not in current_dgrad and "error" not in cell["configs"][str(t)]]
            cell["picks"] = {}
            for label, cfgs, timing in (("events_current", cur, "events"), ("graph_current", cur, "graph"),
                                        ("graph_extended", ext, "graph")):
                pick, secs = tuned_pick("_dgrad_launcher", cfgs, M._dgrad_launcher.key, timing, run)
                cell["picks"][label] = dict(config=pick, graph_us=cell["configs"][str(pick)]["graph_us"], tune_s=secs)
                print(f"   pick {label:16s} {str(pick):16s} -> graph {cell['picks'][label]['graph_us']:8.2f} us (tuning {secs:.2f} s)", flush=True)
            results.append(cell)
        with open(f"{OUT}/tuner_sweep_{what}.json", "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                           date=time.strftime("%Y-%m-%d"), results=results), f, indent=1)

print("\nSUMMARY: kernel stack m train | best forced (graph us) | picks: label config graph_us")
for c in results:
    ok = {k: v for k, v in c["configs"].items() if "graph_us" in v}
    best = min(ok, key=lambda k: ok[k]["graph_us"])
    picks = " ".join(f"{lab}={v['config'][0]}x{v['config'][1]}w{v['config'][2]}:{v['graph_us']:.2f}" for lab, v in c["picks"].items())
    print(f"{c['kernel']} {c['stack']} {c['m']} {int(c['train'])} | {best} {ok[best]['graph_us']:.2f} | {picks}")
