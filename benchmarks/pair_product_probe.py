"""The gated layers' weight-gradient product ``dh.T @ x`` as one cuBLAS product or as several over
row blocks of the result, bf16.

    python benchmarks/pair_product_probe.py [ROUNDS]   (default 5)

SwiGLU's backward forms ``[dW_up; dW_gate] = dh.T @ x`` (dh ``[tokens, 2*hidden]``, x ``[tokens, d]``)
as one product into a ``[2*hidden, d]`` buffer; ``swiglu_packed`` forms the same buffer as two
products (one per half, the packed weight's order), and eager PyTorch's two ``nn.Linear`` layers
also take two. GEGLU's backward forms ``dW = dh.T @ x`` ([2*out, d]) as one. Each product's time
depends on the shape cuBLAS is given, so this times, per shape, the product whole (``parts=1``)
and split into 2 and 4 row blocks of the result (each ``torch.mm(dh[:, cols].t(), x, out=rows)``),
in turn within each round (``triton.testing.do_bench`` medians; the median over the rounds
printed), and prints the largest difference between the split products' values and the whole's.
The last line printed is the results as JSON.
"""
import json
import statistics
import sys

import torch
import triton

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
# (name, tokens, d, width of dh = rows of the weight gradient)
SHAPES = [
    ("swiglu 16384x512->1792", 16384, 512, 2 * 1792),
    ("swiglu 16384x2048->5632", 16384, 2048, 2 * 5632),
    ("swiglu phi3 16384x3072->8192", 16384, 3072, 2 * 8192),
    ("swiglu llama 16384x4096->14336", 16384, 4096, 2 * 14336),
    ("swiglu 8192x4096->14336", 8192, 4096, 2 * 14336),
    ("geglu 8192x1024", 8192, 1024, 8 * 1024),
    ("geglu 32768x1024", 32768, 1024, 8 * 1024),
    ("geglu 16384x2048", 16384, 2048, 8 * 2048),
    ("geglu 8192x4096", 8192, 4096, 8 * 4096),
]


def product(dh, x, out, parts):
    width = dh.shape[1] // parts
    for p in range(parts):
        cols = slice(p * width, (p + 1) * width)
        torch.mm(dh[:, cols].t(), x, out=out[cols])


def main():
    dt = torch.bfloat16
    results = {}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    for name, tokens, d, width in SHAPES:
        dh = torch.randn(tokens, width, device="cuda", dtype=dt)
        x = torch.randn(tokens, d, device="cuda", dtype=dt)
        outs = {parts: torch.empty(width, d, device="cuda", dtype=dt) for parts in (1, 2, 4)}
        for parts, out in outs.items():
            product(dh, x, out, parts)
        diff = max((outs[p] - outs[1]).abs().max().item() for p in (2, 4))
        times = {parts: [] for parts in outs}
        for _ in range(ROUNDS):
            for parts, out in outs.items():
                times[parts].append(triton.testing.do_bench(lambda: product(dh, x, out, parts), warmup=25, rep=200))
        medians = {parts: statistics.median(t) for parts, t in times.items()}
        tflops = {parts: 2 * tokens * d * width / (ms * 1e-3) / 1e12 for parts, ms in medians.items()}
        results[name] = {"tokens": tokens, "d": d, "width": width, "ms": times, "median_ms": medians,
                         "tflops": tflops, "max_abs_diff": diff}
        print(f"{name:32s} " + "  ".join(f"{p} part(s) {medians[p]:.3f} ms ({tflops[p]:.0f} TF/s)" for p in medians)
              + f"  2/1 {medians[2] / medians[1]:.3f}  4/1 {medians[4] / medians[1]:.3f}  diff {diff:.1e}",
              flush=True)
        del dh, x, outs
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "triton": triton.__version__, "rounds": ROUNDS, "results": results}))


if __name__ == "__main__":
    main()
