"""What mc_bench*.py share: the record, the interleaved CUDA-graph timing, the inputs."""
import json
import os

import torch
import triton
from triton.testing import do_bench_cudagraph

GLU = dict(BN=64, STAGES=5, paired=True)  # mc_linear.run's GLU forward: the library's GLU tiles


def new_record():
    torch.manual_seed(0)
    return {"triton": triton.__version__, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "rows": []}


def bench(fns, rounds, rep):
    """Microseconds of each callable: do_bench_cudagraph, ``rounds`` interleaved rounds (every
    other one in reverse order), the best round."""
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    times = {}
    for rnd in range(rounds):
        for name, f in (fns.items() if rnd % 2 == 0 else reversed(list(fns.items()))):
            times.setdefault(name, []).append(do_bench_cudagraph(f, rep=rep) * 1e3)
    return {k: min(v) for k, v in times.items()}


def report(out, tag, shape, t):
    out["rows"].append({"kind": tag, "shape": shape, "us": t, "ratio_to_mm": {k: v / t["mm"] for k, v in t.items()}})
    print(f"{tag} {shape}: " + "  ".join(f"{k} {v:.1f} ({v / t['mm']:.3f})" for k, v in t.items()), flush=True)


def linear_case(M, K, N):
    """x, W, b, y of a linear forward M x K -> N (bf16) and linear_act's launch arguments."""
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    return x, w, b, y, dict(M=M, N=N, K=K, ACT="gelu_tanh", HAS_BIAS=True, STORE_PRE=False)


def geglu_case(M, d):
    """x, packed W [8d, d], b, y [M, 4d] and the bare GEMM's output [M, 8d] (bf16)."""
    x = torch.randn(M, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8 * d, d, device="cuda", dtype=torch.bfloat16) / d ** 0.5
    b = torch.randn(8 * d, device="cuda", dtype=torch.bfloat16)
    return x, w, b, torch.empty(M, 4 * d, device="cuda", dtype=torch.bfloat16), \
        torch.empty(M, 8 * d, device="cuda", dtype=torch.bfloat16)


def save(out, name):
    json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), name), "w"), indent=1)
