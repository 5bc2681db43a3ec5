"""Where the device time of the LoRA backward goes, kernel by kernel.

For each (tokens, d, r): ``fusedmlp.LoRALinear(d, d, r)`` (identity activation, base weight
and bias frozen, as in ``fusedmlp bench lora``; gradients for x, A and B) on bf16 rows. Five
backward calls (retained graph, the same g) run under torch.profiler and the kernels of the
last one are listed with their device time, next to the bare cuBLAS dgrad GEMM ``g @ W`` (the
backward's floor, since W is frozen).

    python benchmarks/lora_bwd_profile.py [--shapes 8192x4096x16,...] [--json FILE]
"""

import argparse
import json

import torch

import fusedmlp
from fusedmlp.bench.harness import median_ms


def profile_backward(tokens, d, r, dtype):
    torch.manual_seed(0)
    layer = fusedmlp.LoRALinear(d, d, r=r, alpha=2 * r).to("cuda", dtype)
    x = torch.randn(tokens, d, device="cuda", dtype=dtype, requires_grad=True)
    y = layer(x)
    g = torch.randn_like(y)
    backward = lambda: torch.autograd.grad(y, [x, layer.lora_a, layer.lora_b], g,  # noqa: E731
                                            retain_graph=True)
    for _ in range(3):
        backward()
    torch.cuda.synchronize()
    ms = median_ms(backward)
    calls = 5
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            backward()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = len(kernels) // calls
    last = kernels[-per_call:] if per_call else []
    floor = median_ms(lambda: torch.mm(g, layer.base_layer.weight))
    return {
        "tokens": tokens, "d": d, "r": r, "backward_ms": ms, "dgrad_gemm_ms": floor,
        "kernels": [(e.name, e.device_time) for e in last],
        "kernels_us": sum(e.device_time for e in last),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x4096x16,32768x4096x16,32768x1024x16,32768x4096x64",
                        help="comma-separated TOKENSxDxR")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    results = []
    for shape in args.shapes.split(","):
        tokens, d, r = (int(v) for v in shape.split("x"))
        res = profile_backward(tokens, d, r, torch.bfloat16)
        results.append(res)
        print(f"\n{tokens} x {d}, r={r}: backward {res['backward_ms']:.3f} ms (median), kernels "
              f"{res['kernels_us']:.1f} us, bare dgrad GEMM {res['dgrad_gemm_ms'] * 1e3:.1f} us")
        for name, us in res["kernels"]:
            print(f"  {us:8.1f} us  {name[:100]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "fusedmlp": fusedmlp.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
