"""Small host-bound training steps under torch.compile(mode="reduce-overhead").

    PYTHONPATH=src python3 benchmarks/reduce_overhead.py [--rounds 2] [--cases NAME_PART]

At the suites' small shapes a plain fused step waits for the host (the op layer's Python per
call outweighs eager's ATen calls). This times one forward+backward per impl, bf16, median ms
(`median_ms`, the suites' timer; rounds alternate the order):
- eager: the PyTorch formula; fused: the fusedmlp op, plain calls;
- fused_ro: the fused step under ``torch.compile(mode="reduce-overhead", fullgraph=True)``,
  whose cudagraph trees replay the step's kernels from CUDA graphs (inputs copied into the
  graphs' own buffers on each call); compile_ro: the eager formula under the same mode;
- fused_graph: the step captured once by ``fusedmlp.capture_cuda_graph`` and replayed (no
  input copies: the benchmark's graphed impls).
Shapes, each with its bench suite's inputs and formulas (fusedmlp/bench/suites/): LoRA
8192 x 1024 r 16, linear_act gelu_tanh 16384 x 512 -> 1792, SwiGLU 16384 x 512 -> 1792,
DLRM's bottom MLP 13-512-256-64-16 at 2048 rows. Writes reduce_overhead.json to $OUT
(default .). (The first run, results/reduce_overhead_H100_2026-11-27/, built its own copies of
these inputs and formulas, the same but for LoRA's bias, trainable there and frozen in the
suite, and the MLP's biases, drawn at another scale; this version's first GPU run is in
results/capture_after_reduce_overhead_H100_2026-11-27/.)"""

import argparse
import statistics

import torch

import fusedmlp
from fusedmlp.bench.harness import interleaved_ms, write_record
from fusedmlp.bench.suites import linear_act as linear_act_suite
from fusedmlp.bench.suites import lora as lora_suite
from fusedmlp.bench.suites import mlp as mlp_suite
from fusedmlp.bench.suites import swiglu as swiglu_suite

DTYPE = torch.bfloat16


# name -> (suite, shape): each case's inputs and forwards are its bench suite's
CASES = {
    "lora 8192x1024 r16": (lora_suite, (8192, 1024, 16)),
    "linear_act 16384x512->1792": (linear_act_suite, (16384, 512, 1792)),
    "swiglu 16384x512->1792": (swiglu_suite, (16384, 512, 1792)),
    "mlp 2048 13-512-256-64-16": (mlp_suite, (2048, 13, 512, 256, 64, 16)),
}


def case(suite, shape):
    """(fused forward, eager forward, inputs, g) of the suite at ``shape``."""
    inputs, g = suite._make_inputs(shape, DTYPE)
    forward_fn = suite._forward_fn(shape) if suite is mlp_suite else suite._forward_fn
    return forward_fn("fused"), forward_fn("eager"), inputs, g


def training_step(forward, inputs, g, compiled=False):
    wrt = [t for t in inputs if t.requires_grad]

    def step():
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        return torch.autograd.grad(forward(*inputs), wrt, g)

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", default="", help="run only the cases whose name contains this")
    args = parser.parse_args()
    all_steps = {}
    # every fused_graph captured before any reduce-overhead step runs: a capture of a step over
    # leaves that a replayed reduce-overhead step differentiated is invalidated on PyTorch 2.11
    # (benchmarks/capture_after_reduce_overhead.py)
    for name, (suite, shape) in CASES.items():
        if args.cases not in name:
            continue
        fused, eager, inputs, g = case(suite, shape)
        steps = {"eager": training_step(eager, inputs, g), "fused": training_step(fused, inputs, g)}
        graph, _ = fusedmlp.capture_cuda_graph(steps["fused"], warmup=2)
        steps["fused_graph"] = graph.replay
        all_steps[name] = (steps, fused, eager, inputs, g)
    rows = []
    for name, (steps, fused, eager, inputs, g) in all_steps.items():
        torch._dynamo.reset()
        steps["compile_ro"] = training_step(torch.compile(eager, mode="reduce-overhead"), inputs, g, True)
        steps["fused_ro"] = training_step(torch.compile(fused, mode="reduce-overhead", fullgraph=True), inputs, g, True)
        for step in steps.values():  # warm-up, and the compiled steps' recording
            for _ in range(3):
                step()
        times = interleaved_ms(steps, args.rounds)
        row = {"case": name, **{impl: statistics.median(t) for impl, t in times.items()}, "rounds": times}
        rows.append(row)
        print(name, {impl: round(v, 4) for impl, v in row.items() if impl not in ("case", "rounds")}, flush=True)
    write_record("reduce_overhead", rows=rows)
    impls = ["eager", "compile_ro", "fused", "fused_ro", "fused_graph"]
    print("\n| step (fwd+bwd, bf16, ms) | " + " | ".join(impls) + " | eager / fused_ro |")
    print("|---|" + "---|" * (len(impls) + 1))
    for row in rows:
        print(f"| {row['case']} | " + " | ".join(f"{row[i]:.3f}" for i in impls) + f" | {row['eager'] / row['fused_ro']:.2f} |")


if __name__ == "__main__":
    main()
