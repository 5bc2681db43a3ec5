"""LoRA's rank-r products on cuBLAS by rank and by form, at the d = 4096 backward's shapes.

    PYTHONPATH=src python3 benchmarks/lora_rank_product_forms.py [--rounds 3] [--tokens 8192] [--d 4096]

The backward's narrow products (ops/lora.py, ``_backward``) with g [M, d], x [M, d], B [d, r],
A [r, d], xs and d_xa [M, r], bf16, scale 2, each captured alone in a CUDA graph and timed by
``interleaved_ms`` (L2 flushed before each replay), medians in us, for r in 8, 16, 32, 64, in
the library's form and in others:

- d_xa = s * g @ B: ``addmm_(g, B, beta=0, alpha=s)`` (the library's), ``torch.mm(g, B)``,
  and B zero-padded to 64 columns (``mm`` then the first r columns);
- dB = g.T @ xs: ``g.t() @ xs`` (the library's), ``(xs.t() @ g).t()``;
- dA = d_xa.T @ x: ``d_xa.t() @ x`` (the library's), ``(x.t() @ d_xa).t()``.

Prints a table and writes lora_rank_product_forms.json to $OUT (default .)."""

import argparse
import statistics

import torch

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_ms, write_record

RANKS = (8, 16, 32, 64)


def forms(g, x, lora_a, lora_b, xs, d_xa, scale):
    r = lora_a.shape[0]
    padded_b = torch.zeros(lora_b.shape[0], 64, dtype=lora_b.dtype, device=lora_b.device)
    padded_b[:, :r] = lora_b
    return {
        "d_xa addmm_": lambda: g.new_empty((g.shape[0], r)).addmm_(g, lora_b, beta=0, alpha=scale),
        "d_xa mm": lambda: torch.mm(g, lora_b),
        "d_xa padded 64": lambda: torch.mm(g, padded_b)[:, :r],
        "dB g.T @ xs": lambda: g.t() @ xs,
        "dB (xs.T @ g).T": lambda: (xs.t() @ g).t(),
        "dA d_xa.T @ x": lambda: d_xa.t() @ x,
        "dA (x.T @ d_xa).T": lambda: (x.t() @ d_xa).t(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--d", type=int, default=4096)
    args = parser.parse_args()
    m, d, scale, dtype = args.tokens, args.d, 2.0, torch.bfloat16
    g = torch.randn(m, d, device="cuda", dtype=dtype)
    x = torch.randn(m, d, device="cuda", dtype=dtype)
    replays, kept = {}, []  # kept: every tensor a graph reads lives as long as the graphs
    for r in RANKS:
        lora_a = (torch.randn(r, d, device="cuda") / d**0.5).to(dtype)
        lora_b = (torch.randn(d, r, device="cuda") / r**0.5).to(dtype)
        xs = torch.randn(m, r, device="cuda", dtype=dtype)
        d_xa = torch.randn(m, r, device="cuda", dtype=dtype)
        calls = forms(g, x, lora_a, lora_b, xs, d_xa, scale)
        kept.append(calls)  # the closures hold B's padded copy and the inputs
        for name, call in calls.items():
            graph, out = capture_cuda_graph(call)
            kept.append(out)
            replays[f"r {r} {name}"] = graph.replay
    times = interleaved_ms(replays, args.rounds)
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    write_record("lora_rank_product_forms", us=medians, rounds_ms=times)
    names = list(forms(g, x, lora_a, lora_b, xs, d_xa, scale))
    print(f"{m} x {d}, bf16, us (graphed, L2 flushed)")
    print("| form | " + " | ".join(f"r {r}" for r in RANKS) + " |")
    print("|---|" + "---|" * len(RANKS))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{medians[f'r {r} {name}']:.1f}" for r in RANKS) + " |")


if __name__ == "__main__":
    main()
