"""The whole-MLP forward kernel with and without its L2 prefetch of the weights, captured steps.

    PYTHONPATH=src python3 benchmarks/mlp_prefetch_ab.py [--rounds 5] [--batches 2048,8192,65536]

``mlp_fwd_kernel``'s programs each carry a row block through every layer, touching the
weight tiles one after another; where the weights are not in the L2 (the bench's graphed
impls flush it before each replay; a training step's other work evicts them too) each first
touch waits on DRAM in turn. With ``PREFETCH_L2`` (ops/mlp.py ``MLP_PREFETCH_L2``) the
programs first ask the L2 for every weight and bias line (``prefetch.global.L2``; 2: with
``evict_last``). For DLRM's bottom and top MLPs (the mlp suite's inputs, bf16) and each batch,
the fused step is captured once per setting (0, 1, 2) through ``capture_cuda_graph``, for the
inference forward (no_grad), the training forward and fwd+bwd, and eager's step as the
suite's cuda_graph impl beside them; then timed in interleaved rounds two ways: ``cold``, each
replay after an L2 flush (do_bench, as the suite), and ``warm``, 100 replays back to back
(CUDA events around them; the L2 keeps the weights). Medians over the rounds, us.
"""

import argparse
import statistics

import torch

import fusedmlp.ops.mlp as mlp_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_ms, write_record
from fusedmlp.bench.suites import mlp as mlp_suite

SETTINGS = (0, 1, 2)


def warm_us(replay, calls: int = 100) -> float:
    """Microseconds per replay of ``calls`` back-to-back replays (no flush between them)."""
    replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def steps_of(forward, inputs, g):
    """{mode: graph replay} of ``forward`` on ``inputs``: inference (no_grad), training fwd, fwd+bwd."""
    wrt = [t for t in inputs if t.requires_grad]

    def infer():
        with torch.no_grad():
            return forward(*inputs)

    fns = {"infer": infer, "fwd": lambda: forward(*inputs),
           "fwd+bwd": lambda: torch.autograd.grad(forward(*inputs), wrt, g)}
    return {mode: capture_cuda_graph(fn)[0].replay for mode, fn in fns.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", default="2048,8192,65536")
    args = parser.parse_args()
    rows = []
    for sizes in (mlp_suite.DLRM_BOTTOM, mlp_suite.DLRM_TOP):
        for batch in (int(b) for b in args.batches.split(",")):
            shape = (batch, *sizes)
            inputs, g = mlp_suite._make_inputs(shape, torch.bfloat16)
            make = mlp_suite._forward_fn(shape)
            steps = {}
            for setting in SETTINGS:
                mlp_ops.MLP_PREFETCH_L2 = setting
                for mode, replay in steps_of(make("fused"), inputs, g).items():
                    steps[f"fused{setting} {mode}"] = replay
            mlp_ops.MLP_PREFETCH_L2 = 1
            for mode, replay in steps_of(make("eager"), inputs, g).items():
                steps[f"eager {mode}"] = replay
            cold = interleaved_ms(steps, args.rounds)
            warm = {name: [] for name in steps}
            for round_ in range(args.rounds):
                for name in steps if round_ % 2 == 0 else list(steps)[::-1]:
                    warm[name].append(warm_us(steps[name]))
            row = {"batch": batch, "sizes": "-".join(map(str, sizes)),
                   "cold_us": {n: statistics.median(t) * 1e3 for n, t in cold.items()},
                   "warm_us": {n: statistics.median(t) for n, t in warm.items()},
                   "cold_rounds_ms": cold, "warm_rounds_us": warm}
            rows.append(row)
            for mode in ("infer", "fwd", "fwd+bwd"):
                print(row["sizes"], batch, mode,
                      "cold", [round(row["cold_us"][f"fused{s} {mode}"], 1) for s in SETTINGS],
                      "eager", round(row["cold_us"][f"eager {mode}"], 1),
                      "| warm", [round(row["warm_us"][f"fused{s} {mode}"], 1) for s in SETTINGS],
                      "eager", round(row["warm_us"][f"eager {mode}"], 1), flush=True)
            del steps, inputs, g
    write_record("mlp_prefetch_ab", settings=list(SETTINGS), rows=rows)


if __name__ == "__main__":
    main()
