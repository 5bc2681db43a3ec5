"""Where the rank-r product of the fused LoRA forward should come from, measured.

For each (tokens, d, r): the fused forward with ``x @ A.T`` accumulated in the GEMM's main
loop (every column tile recomputes the narrow product) against the same kernel reading
``xs`` that cuBLAS computed first (one more read of x), and the bare cuBLAS base GEMM.
The limits of ``fusedmlp.ops.lora`` (``IN_LOOP_MAX_MACS``, ``IN_LOOP_MAX_RANK``,
``IN_LOOP_WIDE_RANK``) are set from this table.

    python benchmarks/lora_rank_paths.py [--dtype bf16]
"""

import argparse
import json
import os

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import format_table, median_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    headers = ["tokens", "d", "r", "gemm ms", "in-loop ms", "cuBLAS-xs ms", "in-loop/gemm", "cuBLAS-xs/gemm"]
    table = []
    for tokens in (8192, 32768):
        for d in (1024, 4096):
            x = torch.randn(tokens, d, device="cuda", dtype=dtype)
            w = torch.randn(d, d, device="cuda", dtype=dtype) / d**0.5
            b = torch.randn(d, device="cuda", dtype=dtype)
            gemm = median_ms(lambda: torch.mm(x, w.t()))
            for r in (8, 16, 32, 64):
                a = torch.randn(r, d, device="cuda", dtype=dtype) / d**0.5
                lb = torch.randn(d, r, device="cuda", dtype=dtype) / r**0.5
                times = []
                for limit in (10**6, 0):  # every size and rank in the loop, then none
                    lora_ops.IN_LOOP_MAX_MACS, lora_ops.IN_LOOP_MAX_RANK = 1 << 62, limit
                    fn = lambda: lora_ops.lora_linear(x, w, b, a, lb, 2.0)  # noqa: E731
                    fn()
                    times.append(median_ms(fn))
                table.append([tokens, d, r, gemm, *times, times[0] / gemm, times[1] / gemm])
    print(f"fused LoRA forward, {args.dtype}, {torch.cuda.get_device_name()}, autotune "
          f"{os.environ.get('FUSEDMLP_AUTOTUNE', '1')}")
    print(format_table(headers, table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "headers": headers,
                       "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()
