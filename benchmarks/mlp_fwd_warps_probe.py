"""The whole-MLP forward at small batches with 8 warps on 16- and 32-row tiles.

    PYTHONPATH=src python3 benchmarks/mlp_fwd_warps_probe.py [--rows 2048,8192]

At DLRM's 2048 rows the forward kernel's time is one program's serial chain of weight loads and
dots (benchmarks/NOTES.md, "The MLP forward at 2048 rows: one program's latency"), and the
tuned tables (configs.py ``_MLP_FWD_TILES``) run 16- and 32-row tiles on 4 warps at most. With
8 warps a program splits each dot's columns over twice the warps and has twice the loads in
flight. For DLRM's bottom MLP (13-512-256-64-16, ReLU, bf16) at each row count, training
forward (the saved activations written) and inference: every config of the table and the extra
ones below, forced, each timed as the library's tuner times them (``graph_timing``: launches
replayed from a CUDA graph, weights warm in L2), us, with the output's error against float64.
"""

import argparse
import json
import os

import torch
import torch.nn.functional as F
import triton

from fusedmlp.bench.harness import environment
from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

EXTRA = [(16, 128, 8, 2), (16, 64, 8, 2), (16, 256, 4, 2), (16, 256, 8, 2), (32, 128, 8, 2), (32, 64, 8, 2)]


def config_of(t):
    return triton.Config({"BLOCK_M": t[0], "BLOCK_C": t[1]}, num_warps=t[2], num_stages=t[3])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="2048,8192")
    args = parser.parse_args()
    widths, acts = (13, 512, 256, 64, 16), ("relu",) * 4
    layers = len(widths) - 1
    torch.manual_seed(0)
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=torch.bfloat16) / widths[i] ** 0.5
          for i in range(layers)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=torch.bfloat16) * 0.1 for i in range(layers)]
    plan = M.mlp_plan(widths, acts, (True,) * layers, M.FULL_MAX)
    table = [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_C"], c.num_warps, c.num_stages) for c in C.MLP_FWD_CONFIGS]
    rows = []
    for m in (int(v) for v in args.rows.split(",")):
        x = torch.randn(m, widths[0], device="cuda", dtype=torch.bfloat16)
        ref = x.double()
        for w, b in zip(ws, bs):
            ref = torch.relu(F.linear(ref, w.double(), b.double()))
        for train in (True, False):
            modes = plan.save if train else ("none",) * layers
            run = lambda: M._launch_stack(x, ws, bs, plan, modes)  # noqa: E731
            cell = {"m": m, "train": train, "us": {}, "error": {}}
            for t in table + [t for t in EXTRA if t not in table]:
                try:
                    with M._fwd_launcher.forcing(config_of(t)):
                        y = run()[0]
                        torch.cuda.synchronize()
                        us = C.graph_timing(run, (0.5,))[0] * 1e3
                except Exception as exc:  # out of resources
                    cell["error"][str(t)] = type(exc).__name__
                    continue
                cell["us"][str(t)] = us
                cell["error"][str(t)] = ((y.double() - ref).norm() / ref.norm()).item()
            best = min(cell["us"], key=cell["us"].get)
            best_table = min((str(t) for t in table if str(t) in cell["us"]), key=cell["us"].get)
            print(m, "train" if train else "infer", {k: round(v, 2) for k, v in cell["us"].items()},
                  "best", best, "best in the table", best_table, flush=True)
            rows.append(cell)
    with open(os.path.join(os.environ.get("OUT", "."), "mlp_fwd_warps_probe.json"), "w") as f:
        env = environment()
        env["command"] = "python3 benchmarks/mlp_fwd_warps_probe.py --rows " + args.rows
        json.dump({"environment": env, "table": [str(t) for t in table], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
