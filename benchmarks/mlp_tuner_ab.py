"""The MLP tuner's timing, events (Triton's default) against CUDA graphs, A/B in one process:
training forwards and fwd+bwd steps of DLRM's bottom and top MLPs through ``fusedmlp.mlp``,
captured as the bench captures them (fusedmlp._cuda_graph.capture_cuda_graph), each way's
launchers tuned on their own (fresh Launchers over the current tables swapped into
ops/mlp.py), replays timed with CUDA events, the two ways interleaved over rounds.

    PYTHONPATH=src python benchmarks/mlp_tuner_ab.py [rounds]   (writes $OUT/tuner_ab.json)
"""
import json
import os
import sys
import time

import torch
import triton

import fusedmlp
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

OUT = os.environ.get("OUT", ".")
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
dt = torch.bfloat16
torch.manual_seed(0)
STACKS = {"bottom": ((13, 512, 256, 64, 16), "relu"), "top": ((367, 512, 256, 1), "sigmoid")}
ROWS = [2048, 8192, 65536]
launchers = {timing: (C.Launcher(M._fwd_launcher.kernel, C.MLP_FWD_CONFIGS, key=list(M._fwd_launcher.key), timing=timing),
                      C.Launcher(M._dgrad_launcher.kernel, C.MLP_DGRAD_CONFIGS, key=list(M._dgrad_launcher.key), timing=timing))
             for timing in ("events", "graph")}


def replay_us(graph, n=200):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        start.record()
        for _ in range(n):
            graph.replay()
        stop.record()
        stop.synchronize()
        best.append(start.elapsed_time(stop) / n * 1e3)
    best.sort()
    return best[len(best) // 2]


cases = {}
for name, (widths, last) in STACKS.items():
    L = len(widths) - 1
    ws = [(torch.randn(widths[i + 1], widths[i], device="cuda") / widths[i] ** 0.5).to(dt).requires_grad_() for i in range(L)]
    bs = [(torch.randn(widths[i + 1], device="cuda") * 0.1).to(dt).requires_grad_() for i in range(L)]
    for m in ROWS:
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        g = torch.randn(m, widths[-1], device="cuda", dtype=dt)
        cases[(name, m)] = (x, ws, bs, last, g)

res = {}
for rnd in range(rounds):
    for timing in (("events", "graph") if rnd % 2 == 0 else ("graph", "events")):
        M._fwd_launcher, M._dgrad_launcher = launchers[timing]
        for (name, m), (x, ws, bs, last, g) in cases.items():
            def fwd():
                return fusedmlp.mlp(x, ws, bs, "relu", last)

            def step():
                return torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", last), ws + bs, g)

            for mode, fn in (("fwd", fwd), ("fwd+bwd", step)):
                us = replay_us(capture_cuda_graph(fn)[0])
                res.setdefault(f"{name} {m} {mode}", {}).setdefault(timing, []).append(us)
                print(f"round {rnd} {timing:6s} {name:6s} {m:6d} {mode:8s} {us:8.2f} us", flush=True)

picks = {timing: {"fwd": {str(k): str(v) for k, v in fl.tuned.cache.items()},
                  "dgrad": {str(k): str(v) for k, v in dl.tuned.cache.items()}} for timing, (fl, dl) in launchers.items()}
with open(f"{OUT}/tuner_ab.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%d"), rounds=rounds, us=res, picks=picks), f, indent=1)
print("\ncase | events us (median of rounds) | graph us | graph / events")
for case, by in res.items():
    e = sorted(by["events"])[len(by["events"]) // 2]
    gr = sorted(by["graph"])[len(by["graph"]) // 2]
    print(f"{case:24s} | {e:8.2f} | {gr:8.2f} | {gr / e:.3f}")
