"""The linear forward under sustained load: time per launch against the SM clock, board power and
throttle reasons read by nvidia-smi while it runs, for cuBLAS's GEMM and the library's ping-pong
forward (alternating form, bias) with several epilogues.

Why: at 16384 x 512 -> 1792 the ping-pong forward with gelu_tanh stays 1.07-1.09x the bare GEMM
on an H100 (1.04-1.05x on an H200), and a kernel-level look (ncu, SASS) did not show one cause.
If the GPU runs at its power limit, a kernel's time follows its energy per launch, so the clock
each variant runs at, and the cycles it takes (time x clock), separate an epilogue's issue cost
from its power cost.

For each shape (bf16): CUDA graphs of 50 back-to-back launches of each variant, each replayed
for about a second after a warm-up while ``nvidia-smi --query-gpu=clocks.sm,power.draw,
clocks_throttle_reasons.active -lms 20`` samples (the first quarter of the samples dropped);
ROUNDS rounds, every other one in reverse order. EXTRA_ACTS (comma-separated) adds activations
by name (for experiments on a patched activations.py; the op layer is bypassed, so no name check).
Run on a GPU from the repository root:
    PYTHONPATH=src python3 benchmarks/linear_power_clocks.py [MxKxN ...]
(default 65536x512x1792 16384x4096x14336; writes linear_power_clocks.json to $OUT or the
current folder)."""
import json
import os
import subprocess
import sys
import time

import torch

from fusedmlp.kernels.configs import LINEAR_PINGPONG_CONFIG
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.ops._common import launch_pingpong, num_sms

ROUNDS = int(os.environ.get("ROUNDS", "2"))
ACTS = ("identity", "relu", "gelu_tanh") + tuple(a for a in os.environ.get("EXTRA_ACTS", "").split(",") if a)
LAUNCHES_PER_GRAPH = 50


def _pingpong(x, w, b, y, act):
    m, k = x.shape
    n = w.shape[0]
    return lambda: launch_pingpong(linear_act_fwd_pingpong_kernel, LINEAR_PINGPONG_CONFIG, m, n, num_sms(x),
                                   {"x_desc": x}, {"w_desc": w}, {"y_desc": y, "pre_desc": y}, b_ptr=b, M=m, N=n,
                                   K=k, ACT=act, HAS_BIAS=True, STORE_PRE=False)


def _graph(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES_PER_GRAPH):
            fn()
    return graph


def _sustained(graph, seconds=1.0):
    """(us per launch, mean SM MHz, mean W, throttle reasons seen) over about ``seconds`` of replays."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    stop.record()
    torch.cuda.synchronize()
    replays = max(4, int(seconds * 1e3 / start.elapsed_time(stop)))
    for _ in range(replays // 4):  # loaded clocks first
        graph.replay()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "20"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    start.record()
    for _ in range(replays):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    smi.terminate()
    rows = [line.split(",") for line in smi.communicate()[0].splitlines() if line.count(",") == 2]
    rows = rows[len(rows) // 4:] or rows
    us = start.elapsed_time(stop) / replays / LAUNCHES_PER_GRAPH * 1e3
    return (us, sum(float(r[0]) for r in rows) / len(rows), sum(float(r[1]) for r in rows) / len(rows),
            sorted({r[2].strip() for r in rows}))


def main():
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]] or [(65536, 512, 1792), (16384, 4096, 14336)]
    dtype = torch.bfloat16
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": ROUNDS, "shapes": {}}
    for m, k, n in shapes:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        variants = {"cublas mm (no bias)": lambda: torch.mm(x, w.t())}
        variants.update({f"pingpong {act}": _pingpong(x, w, b, y, act) for act in ACTS})
        graphs = {name: _graph(fn) for name, fn in variants.items()}
        rows = {name: [] for name in graphs}
        for round_ in range(ROUNDS):
            for name in (list(graphs) if round_ % 2 == 0 else list(graphs)[::-1]):
                us, mhz, watts, reasons = _sustained(graphs[name])
                rows[name].append({"us": round(us, 2), "sm_mhz": round(mhz), "watts": round(watts), "throttle": reasons,
                                   "kcycles": round(us * mhz / 1e3, 1)})
        results["shapes"][f"{m}x{k}x{n}"] = rows
        base = rows["cublas mm (no bias)"]
        print(f"{m} x {k} -> {n}: us per launch, SM MHz, W, kcycles (time x clock), ratio of time to the GEMM's")
        for name, runs in rows.items():
            for i, r in enumerate(runs):
                print(f"  {name:24s} round {i}: {r['us']:8.1f} us {r['sm_mhz']:5d} MHz {r['watts']:4d} W "
                      f"{r['kcycles']:7.1f} kcyc {r['us'] / base[i]['us']:6.3f}x  throttle {r['throttle']}")
        del graphs
    with open(os.path.join(os.environ.get("OUT", "."), "linear_power_clocks.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
