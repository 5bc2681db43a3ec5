"""The MLP tuner's timing, events (Triton's default) against CUDA graphs, on the whole DLRM
step: ``fusedmlp bench dlrm``'s fused_graph train and infer steps (its _steps), each way's MLP
launchers tuned on their own (fresh Launchers over the current tables swapped into
ops/mlp.py before the step is built), interleaved over rounds. Each step timed back to back
(replays in a loop, CUDA events around the loop: step after step, as a training loop runs)
and as the bench times it (bench.harness.median_ms: the L2 flushed before each replay).

    PYTHONPATH=src python benchmarks/dlrm_tuner_ab.py [rounds]   (writes $OUT/dlrm_tuner_ab.json)
"""
import json
import os
import sys
import time

import torch
import triton

from fusedmlp.bench.harness import median_ms
from fusedmlp.bench.suites import dlrm as D
from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

OUT = os.environ.get("OUT", ".")
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
launchers = {timing: (C.Launcher(M._fwd_launcher.kernel, C.MLP_FWD_CONFIGS, key=list(M._fwd_launcher.key), timing=timing),
                      C.Launcher(M._dgrad_launcher.kernel, C.MLP_DGRAD_CONFIGS, key=list(M._dgrad_launcher.key), timing=timing))
             for timing in ("events", "graph")}


def back_to_back_ms(fn, n=200):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(n):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / n)
    times.sort()
    return times[len(times) // 2]


res = {}
for rnd in range(rounds):
    for timing in (("events", "graph") if rnd % 2 == 0 else ("graph", "events")):
        M._fwd_launcher, M._dgrad_launcher = launchers[timing]
        for batch in (2048, 8192):
            steps, model = D._steps("fused_graph", torch.bfloat16, batch)
            for mode in ("train", "infer"):
                fn = steps[mode]
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                b2b, flushed = back_to_back_ms(fn) * 1e3, median_ms(fn) * 1e3
                by = res.setdefault(f"{batch} {mode}", {}).setdefault(timing, {"back_to_back_us": [], "flushed_us": []})
                by["back_to_back_us"].append(b2b)
                by["flushed_us"].append(flushed)
                print(f"round {rnd} {timing:6s} {batch:6d} {mode:5s} back-to-back {b2b:8.2f} us  L2 flushed {flushed:8.2f} us", flush=True)
            del steps, model
            torch.cuda.empty_cache()

with open(f"{OUT}/dlrm_tuner_ab.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%d"), rounds=rounds, results=res), f, indent=1)
print("\ncase | back-to-back events / graph us (graph/events) | L2 flushed events / graph us (graph/events)")
for case, by in res.items():
    med = {t: {k: sorted(v)[len(v) // 2] for k, v in d.items()} for t, d in by.items()}
    e, g = med["events"], med["graph"]
    print(f"{case:12s} | {e['back_to_back_us']:8.2f} / {g['back_to_back_us']:8.2f} ({g['back_to_back_us'] / e['back_to_back_us']:.3f})"
          f" | {e['flushed_us']:8.2f} / {g['flushed_us']:8.2f} ({g['flushed_us'] / e['flushed_us']:.3f})")
