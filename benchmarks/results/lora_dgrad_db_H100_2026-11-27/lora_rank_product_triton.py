"""LoRA's backward rank product ``d_xa = s * dpre @ B`` as a Triton kernel against cuBLAS, and
the dgrad kernel's dB partials summed by ``sum_partials_kernel`` against ``sum(0)`` then a cast.

    PYTHONPATH=src python3 benchmarks/lora_rank_product_triton.py [--rounds 3]

bf16, the lora suite's scale (2.0). For each (tokens, out, r): cuBLAS's
``new_empty((M, r)).addmm_(dpre, B, beta=0, alpha=s)`` (what ops/lora.py runs) and
``lora_rank_product_kernel`` at each config of a small grid (BLOCK_M, BLOCK_K, stages, warps),
timed by do_bench (L2 flushed) in interleaved rounds; then for the partials ``[row blocks, out,
r]`` fp32 of 128-row blocks, the two sums. Medians, us; the best config's max difference from
cuBLAS's result.
"""

import argparse
import itertools

import torch

from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.kernels.gemm import sum_partials_kernel
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.lora import lora_rank_product_kernel
from fusedmlp.ops._common import cdiv, dot_meta, dot_width

SCALE = 2.0
CONFIGS = [dict(BLOCK_M=bm, BLOCK_K=bk, num_stages=st, num_warps=w)
           for bm, bk, st, w in itertools.product((64, 128), (64, 128, 256), (3, 4), (4,))
           if bm * bk <= 128 * 128]


def triton_product(dpre, lora_b, out, config):
    m, k = dpre.shape
    r = lora_b.shape[1]
    return lambda: launch(lora_rank_product_kernel, (cdiv(m, config["BLOCK_M"]),), dpre, lora_b, out, m, k, r,
                          SCALE, 0.0, dpre.stride(0), lora_b.stride(0), lora_b.stride(1), out.stride(0),
                          RANK_BLOCK=dot_width(r), **dot_meta(dpre.dtype), **config)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="8192x4096x8,8192x4096x16,8192x4096x32,32768x4096x16,8192x1024x16")
    args = parser.parse_args()
    rows = []
    for text in args.shapes.split(","):
        m, k, r = (int(v) for v in text.split("x"))
        dpre = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        lora_b = torch.randn(k, r, device="cuda", dtype=torch.bfloat16) / r**0.5
        ref = dpre.new_empty((m, r)).addmm_(dpre, lora_b, beta=0, alpha=SCALE)
        outs = [torch.empty(m, r, device="cuda", dtype=torch.bfloat16) for _ in CONFIGS]
        calls = {"cublas": lambda: dpre.new_empty((m, r)).addmm_(dpre, lora_b, beta=0, alpha=SCALE)}
        calls.update({str(i): triton_product(dpre, lora_b, outs[i], c) for i, c in enumerate(CONFIGS)})
        row = interleaved_us_row(calls, args.rounds, shape=text)
        best = min(range(len(CONFIGS)), key=lambda i: row[str(i)])
        row["best"] = dict(CONFIGS[best], us=row[str(best)], maxdiff=(outs[best].float() - ref.float()).abs().max().item())
        print("   best", row["best"], "cublas", round(row["cublas"], 1), flush=True)
        part = torch.randn(cdiv(m, 128), k, r, device="cuda", dtype=torch.float32)
        db = torch.empty(k, r, device="cuda", dtype=torch.bfloat16)
        sums = {"torch_sum_cast": lambda: part.sum(0).to(torch.bfloat16)}
        for block in (256, 1024):
            sums[f"sum_partials_{block}"] = lambda block=block: launch(
                sum_partials_kernel, (cdiv(k * r, block),), part, db, k * r, part.shape[0], BLOCK=block, UPCAST=False)
        row["sums"] = interleaved_us_row(sums, args.rounds, shape=f"{text} dB partials")
        rows.append(row)
    write_record("lora_rank_product_triton", configs=CONFIGS, rows=rows)


if __name__ == "__main__":
    main()
