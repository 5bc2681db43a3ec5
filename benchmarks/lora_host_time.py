"""Host time of the fused LoRA linear at the small shapes, where a step waits for the host.

For each (tokens, d, r) (bf16, the ``lora`` bench suite's layer: W and b frozen, gradients for
x, A and B, the backward on the calling thread): host microseconds per call, measured as the
wall time of back-to-back calls with no sync in between (the GPU work of each call is
shorter, so the host sets the pace), next to ``do_bench``'s median for the same call; then a
cProfile of the fused forward+backward sorted by own time.

    python benchmarks/lora_host_time.py [--shapes 8192x1024x16,...] [--no-profile]
"""

import argparse
import cProfile
import io
import pstats

import torch
import torch.nn.functional as F

import fusedmlp
from fusedmlp.bench.harness import host_us_per_call, median_ms

SCALE = 2.0



def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x1024x16,32768x1024x16", help="comma-separated TOKENSxDxR")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile listing")
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)  # the backward on the calling thread
    dtype = torch.bfloat16
    for shape in args.shapes.split(","):
        tokens, d, r = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        x = torch.randn(tokens, d, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.randn(d, d, device="cuda") / d**0.5).to(dtype)
        b = torch.randn(d, device="cuda", dtype=dtype)
        a = (torch.randn(r, d, device="cuda") / d**0.5).to(dtype).requires_grad_()
        lb = (torch.randn(d, r, device="cuda") / r**0.5).to(dtype).requires_grad_()
        g = torch.randn(tokens, d, device="cuda", dtype=dtype)
        wrt = (x, a, lb)

        def fused_fwd():
            return fusedmlp.lora_linear(x, w, b, a, lb, SCALE)

        def eager_fwd():
            return F.linear(x, w, b) + F.linear(F.linear(x, a), lb) * SCALE

        compiled = torch.compile(eager_fwd)
        y = fused_fwd()
        calls = {
            "fused fwd+bwd": lambda: torch.autograd.grad(fused_fwd(), wrt, g),
            "eager fwd+bwd": lambda: torch.autograd.grad(eager_fwd(), wrt, g),
            "compile fwd+bwd": lambda: torch.autograd.grad(compiled(), wrt, g),
            "fused fwd": fused_fwd,
            "fused bwd (retained graph)": lambda: torch.autograd.grad(y, wrt, g, retain_graph=True),
            "eager fwd": eager_fwd,
        }
        print(f"\n=== LoRA {tokens} x {d}, r={r}, bf16 ({torch.cuda.get_device_name()})")
        for name, fn in calls.items():
            print(f"  {name:28s} host {host_us_per_call(fn):8.1f} us/call   do_bench {median_ms(fn) * 1e3:8.1f} us",
                  flush=True)
        if args.no_profile:
            continue
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            calls["fused fwd+bwd"]()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        print("--- cProfile, fused fwd+bwd, 200 calls (own time first)")
        print("\n".join(text.getvalue().splitlines()[:48]))


if __name__ == "__main__":
    main()
