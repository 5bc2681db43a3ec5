"""LoRA's backward with dB formed by the dgrad kernel against dB from cuBLAS beside it.

    PYTHONPATH=src python3 benchmarks/lora_dgrad_db_ab.py [--rounds 5] [--shapes 8192x4096x8,...]

Where the backward's dx is the tail kernel (ops/lora.py ``_dgrad_tail_wanted``) and B trains,
``lora_dgrad_db_kernel`` forms dB from the dpre tiles its main loop reads, and dA alone runs
beside it (``DGRAD_DB_RANK_BLOCKS``); before, dB ran beside the kernel and dA after it. For
each shape (TOKENSxDxR, the lora suite's inputs: identity, bias, W frozen, bf16) the fused
fwd+bwd step is captured in a CUDA graph with dB in the kernel (``in_kernel``) and with
``DGRAD_DB_RANK_BLOCKS = ()`` (``beside``), eager PEFT's step beside them, and the three
replays timed in interleaved rounds (do_bench, L2 flushed before each replay, as the suite's
graphed impls). Medians over the rounds, us; ``eager / in_kernel`` is the fwd+bwd target's
ratio (1.3x).
"""

import argparse

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.bench.suites import lora as lora_suite

DEFAULT_SHAPES = "8192x4096x8,8192x4096x16,8192x4096x32,32768x4096x8,32768x4096x16,8192x1024x16"


def step_replay(forward, inputs, g):
    wrt = [t for t in inputs if t.requires_grad]
    return capture_cuda_graph(lambda: torch.autograd.grad(forward(*inputs), wrt, g))[0].replay


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    args = parser.parse_args()
    rows = []
    blocks = lora_ops.DGRAD_DB_RANK_BLOCKS
    for text in args.shapes.split(","):
        tokens, d, r = (int(v) for v in text.split("x"))
        inputs, g = lora_suite._make_inputs((tokens, d, r), torch.bfloat16)
        fused = lora_suite._forward_fn("fused")
        steps = {}
        for name, setting in (("in_kernel", blocks), ("beside", ())):
            lora_ops.DGRAD_DB_RANK_BLOCKS = setting
            steps[name] = step_replay(fused, inputs, g)
        lora_ops.DGRAD_DB_RANK_BLOCKS = blocks
        steps["eager"] = step_replay(lora_suite.eager_lora, inputs, g)
        row = interleaved_us_row(steps, args.rounds, shape=text)
        row["eager / in_kernel"] = row["eager"] / row["in_kernel"]
        row["eager / beside"] = row["eager"] / row["beside"]
        print("   eager / in_kernel", round(row["eager / in_kernel"], 3), "eager / beside",
              round(row["eager / beside"], 3), flush=True)
        rows.append(row)
        del steps
    write_record("lora_dgrad_db_ab", rows=rows)


if __name__ == "__main__":
    main()
