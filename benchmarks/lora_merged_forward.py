"""The LoRA forward against the merged weight, or the one-kernel forms, at d = 1024.

    PYTHONPATH=src python3 benchmarks/lora_merged_forward.py [--rounds 3]

The LoRA suite's inputs and fused step (fusedmlp/bench/suites/lora.py: identity with a frozen
bias and W, gradients for x, A and B, scale 2, bf16) at 8192 and 32768 tokens x 1024, r 8, 16,
64 (``--shapes``), with ``ops.lora.MERGED_FORWARD`` "always" (the merged form: F.linear against
W + s * B @ A, xs formed in the backward) and off (the one-kernel forms), each captured in a CUDA graph
(harness.graph_steps) for fwd and fwd+bwd, and the bare base GEMM ``x @ W.T``; the graphs timed
by ``interleaved_ms`` (L2 flushed before each replay; rounds alternate the order). Prints a
table of medians and writes lora_merged_forward.json to $OUT (default .)."""

import argparse

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_steps, interleaved_us_row, write_record
from fusedmlp.bench.suites import lora as lora_suite
from fusedmlp._cuda_graph import capture_cuda_graph

SHAPES = [(8192, 1024, 8), (8192, 1024, 16), (8192, 1024, 64), (32768, 1024, 8), (32768, 1024, 16), (32768, 1024, 64)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="", help="TOKENSxDxR,... (default: the six above)")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    rows = []
    for shape in shapes:
        inputs, g = lora_suite._make_inputs(shape, torch.bfloat16)
        replays = {}
        for merged in ("always", False):  # captured with the setting in force; replays run the kernels captured
            lora_ops.MERGED_FORWARD = merged
            for mode, replay in graph_steps(lora_suite._forward_fn("fused"), inputs, g).items():
                replays[f"{'merged' if merged else 'one_kernel'} {mode}"] = replay
        lora_ops.MERGED_FORWARD = True
        x, w = inputs[0].detach(), inputs[1]
        replays["gemm fwd"] = capture_cuda_graph(lambda: torch.mm(x, w.t()))[0].replay
        rows.append(interleaved_us_row(replays, args.rounds, shape=shape))
    write_record("lora_merged_forward", rows=rows)
    print("\n| tokens x d, r | fwd merged | fwd one-kernel | GEMM | merged / GEMM | one-kernel / GEMM "
          "| fwd+bwd merged | fwd+bwd one-kernel |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        m, d, r = row["shape"]
        gemm = row["gemm fwd"]
        print(f"| {m} x {d}, r {r} | {row['merged fwd']:.1f} | {row['one_kernel fwd']:.1f} | {gemm:.1f} "
              f"| {row['merged fwd'] / gemm:.3f} | {row['one_kernel fwd'] / gemm:.3f} "
              f"| {row['merged fwd+bwd']:.1f} | {row['one_kernel fwd+bwd']:.1f} |")


if __name__ == "__main__":
    main()
