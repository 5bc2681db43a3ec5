"""The GEMM floor timed as the graphed impls are: does a CUDA-graph replay cost GPU time that a
plain call of the same kernels does not?

    PYTHONPATH=src python3 benchmarks/graph_floor.py [--rounds 5]

The suites set each graphed impl (``X_graph``: the step captured by ``capture_cuda_graph``,
its replay timed by do_bench with the L2 flushed before each call) against the bare cuBLAS GEMM
timed as a plain call by the same do_bench. For short GEMMs (30-100 us) a fixed cost per replay
would show up as a ratio above 1 that is no kernel's. Here, for the LoRA suite's d = 1024
shapes (forward: x @ W.T; fwd+bwd: that and g @ W), GEGLU's 1024 x 4096 forward and
linear_act's 16384 x 512 -> 1792 forward, each floor is timed three ways in turn, in several
interleaved rounds: plain (``plain``), its replay from a CUDA graph (``replay``), and
``do_bench_cudagraph`` (``graph_us``: many launches in one graph, the per-replay cost spread
over them, the L2 warm). The fused LoRA forward and fwd+bwd at the same shapes are timed as
replays too (``fused_replay``), so that they can be set against either floor. Medians over the
rounds, in us (``interleaved_us_row``); one JSON record (``write_record``).
"""

import argparse

import torch

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import graph_us, interleaved_us_row, write_record
from fusedmlp.bench.suites import lora as lora_suite


def replay_of(fn):
    return capture_cuda_graph(fn)[0].replay


def floor_cases():
    """(name, callable) of each floor: cuBLAS products on fresh bf16 operands."""
    cases = []
    for tokens in (8192, 32768):
        x = torch.randn(tokens, 1024, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16) / 32
        g = torch.randn(tokens, 1024, device="cuda", dtype=torch.bfloat16)
        fwd = lambda x=x, w=w: torch.mm(x, w.t())  # noqa: E731
        cases.append((f"lora {tokens}x1024 fwd", fwd))
        cases.append((f"lora {tokens}x1024 fwd+bwd", lambda fwd=fwd, g=g, w=w: (fwd(), torch.mm(g, w))))
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16) / 32
    cases.append(("geglu 1024x4096 fwd", lambda x=x, w=w: torch.mm(x, w.t())))
    x = torch.randn(16384, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1792, 512, device="cuda", dtype=torch.bfloat16) / 23
    cases.append(("linear_act 16384x512->1792 fwd", lambda x=x, w=w: torch.mm(x, w.t())))
    return cases


def fused_cases(ranks):
    """(name, fwd step, fwd+bwd step) of the fused LoRA op on the suite's inputs (the steps hold
    them: a replayed graph reads the memory it was captured on)."""
    from fusedmlp.ops.lora import lora_linear

    cases = []
    for tokens in (8192, 32768):
        for r in ranks:
            (x, w, b, a, lb), g = lora_suite._make_inputs((tokens, 1024, r), torch.bfloat16)
            fwd = lambda x=x, w=w, b=b, a=a, lb=lb: lora_linear(x, w, b, a, lb, lora_suite.SCALE)  # noqa: E731
            step = lambda fwd=fwd, g=g, wrt=(x, a, lb): torch.autograd.grad(fwd(), wrt, g)  # noqa: E731
            cases.append((f"lora {tokens}x1024 r{r}", fwd, step))
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ranks", default="8,16,64")
    args = parser.parse_args()
    rows = []
    for name, fn in floor_cases():
        fn()
        replay = replay_of(fn)
        row = interleaved_us_row({"plain": fn, "replay": replay}, args.rounds, case=f"floor {name}")
        row["graph_us"] = graph_us(fn, 100)
        print("   graph_us", round(row["graph_us"], 1), flush=True)
        rows.append(row)
    for name, fwd, step in fused_cases([int(r) for r in args.ranks.split(",")]):
        replays = {"fwd": replay_of(fwd), "fwd+bwd": replay_of(step)}
        row = interleaved_us_row(replays, args.rounds, case=f"fused_replay {name}")
        rows.append(row)
    write_record("graph_floor", rows=rows)


if __name__ == "__main__":
    main()
