"""The MLP forward's configs with the L2 warm and cold, without the host in the timing: warm,
the launches back to back in a CUDA graph (configs.graph_timing, as the tuner times them);
cold, a graph of (write a buffer twice the L2's size, launch) pairs minus a graph of the
writes alone.

    PYTHONPATH=src python benchmarks/mlp_cold_configs.py   (writes $OUT/mlp_cold_configs.json)
"""
import json
import os
import time

import torch
import triton

from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

OUT = os.environ.get("OUT", ".")
dt = torch.bfloat16
torch.manual_seed(0)
STACKS = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4), ("top_rest", (512, 256, 1), ("relu", "sigmoid"))]
PAIRS = 100
l2 = torch.cuda.get_device_properties(0).L2_cache_size
flush = torch.empty(2 * l2, dtype=torch.int8, device="cuda")


def graph_us(body, reps=7):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            for _ in range(PAIRS):
                body()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / PAIRS * 1e3)
    torch.cuda.current_stream().wait_stream(side)
    times.sort()
    return times[len(times) // 2]


res = []
flush_us = graph_us(flush.zero_)
print(f"flush of {2 * l2 >> 20} MiB: {flush_us:.2f} us", flush=True)
for name, widths, acts in STACKS:
    L = len(widths) - 1
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
    plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
    for m in (2048, 8192):
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        for train in (True, False):
            modes = plan.save if train else ("none",) * L
            y, saved, _ = M._launch_stack(x, ws, bs, plan, modes)
            for cfg in C.MLP_FWD_CONFIGS:
                t = (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_C"], cfg.num_warps, cfg.num_stages)
                with M._fwd_launcher.forcing(cfg):
                    launch = lambda: M._launch_stack(x, ws, bs, plan, modes)  # noqa: E731
                    launch()
                    warm = C.graph_timing(launch, (0.5,))[0] * 1e3
                    flush_again = graph_us(flush.zero_)

                    def pair():
                        flush.zero_()
                        launch()

                    cold = graph_us(pair) - (flush_us + flush_again) / 2
                res.append(dict(stack=name, m=m, train=train, config=t, warm_us=warm, cold_us=cold))
                print(f"{name:8s} {m:6d} train={int(train)} {str(t):16s} warm {warm:7.2f} cold {cold:7.2f}", flush=True)
with open(f"{OUT}/mlp_cold_configs.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%d"), flush_mib=2 * l2 >> 20, flush_us=flush_us, results=res), f, indent=1)
print("\nstack m train | best warm (its cold) | best cold (its warm)")
for name, _, _ in STACKS:
    for m in (2048, 8192):
        for train in (True, False):
            rs = [r for r in res if (r["stack"], r["m"], r["train"]) == (name, m, train)]
            bw = min(rs, key=lambda r: r["warm_us"])
            bc = min(rs, key=lambda r: r["cold_us"])
            print(f"{name} {m} {int(train)} | {bw['config']} {bw['warm_us']:.2f} ({bw['cold_us']:.2f}) | "
                  f"{bc['config']} {bc['cold_us']:.2f} ({bc['warm_us']:.2f})")
