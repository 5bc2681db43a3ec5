"""LoRA's wide cooperative kernels at d = 4096 with other tile groupings (GROUP_M).

    PYTHONPATH=src python3 benchmarks/lora_group_m.py [--rounds 3] [--shapes 8192x4096x16,...] [--pairs 16:16,8:16,...]

The forward's handoff kernel (``LORA_HANDOFF_CONFIG``) and the backward's dgrad kernel
(``DGRAD_PINGPONG_CONFIG``, with dB formed in it) walk their tiles in groups of GROUP_M row
blocks (gemm.py ``grouped_tile``); both take 16 from linear_act's wide cooperative config. For
each shape (TOKENSxDxR, the lora suite's inputs: identity, bias, W frozen, bf16) and each pair
``forward:dgrad`` of GROUP_M values, the fused fwd+bwd step and the forward alone are captured
in CUDA graphs, eager PEFT's step beside them, all replays timed in interleaved rounds
(do_bench, L2 flushed before each). Medians over the rounds, us, and eager / fused.
"""

import argparse

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.bench.suites import lora as lora_suite


def replay(fn):
    return capture_cuda_graph(fn)[0].replay


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="8192x4096x8,8192x4096x16,32768x4096x16")
    parser.add_argument("--pairs", default="16:16,8:16,16:8,8:8,4:8")
    args = parser.parse_args()
    forward_config, dgrad_config = lora_ops.LORA_HANDOFF_CONFIG, lora_ops.DGRAD_PINGPONG_CONFIG
    pairs = [tuple(int(v) for v in pair.split(":")) for pair in args.pairs.split(",")]
    rows = []
    for text in args.shapes.split(","):
        tokens, d, r = (int(v) for v in text.split("x"))
        inputs, g = lora_suite._make_inputs((tokens, d, r), torch.bfloat16)
        fused = lora_suite._forward_fn("fused")
        wrt = [t for t in inputs if t.requires_grad]
        calls = {}
        for fwd_group, dgrad_group in pairs:
            lora_ops.LORA_HANDOFF_CONFIG = dict(forward_config, GROUP_M=fwd_group)
            lora_ops.DGRAD_PINGPONG_CONFIG = dict(dgrad_config, GROUP_M=dgrad_group)
            calls[f"fwd+bwd {fwd_group}:{dgrad_group}"] = replay(lambda: torch.autograd.grad(fused(*inputs), wrt, g))
            if f"fwd {fwd_group}" not in calls:  # the forward reads only the handoff config
                calls[f"fwd {fwd_group}"] = replay(lambda: fused(*inputs))
        lora_ops.LORA_HANDOFF_CONFIG, lora_ops.DGRAD_PINGPONG_CONFIG = forward_config, dgrad_config
        calls["fwd+bwd eager"] = replay(lambda: torch.autograd.grad(lora_suite.eager_lora(*inputs), wrt, g))
        row = interleaved_us_row(calls, args.rounds, shape=text)
        row["eager / fused"] = {name: row["fwd+bwd eager"] / row[name] for name in calls
                                if name.startswith("fwd+bwd ") and name != "fwd+bwd eager"}
        print("  ", {k: round(v, 3) for k, v in row["eager / fused"].items()}, flush=True)
        rows.append(row)
        del calls
    write_record("lora_group_m", pairs=args.pairs, rows=rows)


if __name__ == "__main__":
    main()
