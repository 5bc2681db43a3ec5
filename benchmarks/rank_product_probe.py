"""Probe: how fast can LoRA's tall-skinny product ``d_xa = s * dpre @ B`` ([M, K] @ [K, r]) run?

cuBLAS (what ops/lora.py runs), a gemv reading the same bytes (the read-bandwidth floor), and a
Triton kernel whose operands come by TMA descriptors, at a few configs. CUDA graphs are not
used: do_bench with its L2 flush, interleaved rounds.

    PYTHONPATH=src python3 benchmarks/rank_product_probe.py [--rounds 3]
"""

import argparse
import itertools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from fusedmlp.bench.harness import interleaved_us_row, write_record

SCALE = 2.0


@triton.jit
def tall_skinny_kernel(a_desc, b_desc, out_ptr, M, K, R, scale, stride_om,
                       BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, R_PAD: tl.constexpr,
                       STAGES: tl.constexpr):
    """``out [M, R] = scale * a [M, K] @ b [K, R]``, one program per BLOCK_M rows walking all of
    K (the tiles by TMA, Triton's pipeline STAGES deep); b's ``[BLOCK_K, R_PAD]`` tiles read
    zeros past R. The product is tiny beside the read of a: the kernel is a stream of a."""
    pid = tl.program_id(0)
    row = pid * BLOCK_M
    acc = tl.zeros((BLOCK_M, R_PAD), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
        a = a_desc.load([row, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, 0])
        acc = tl.dot(a, b, acc)
    rows = row + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, R_PAD)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], (acc * scale).to(out_ptr.dtype.element_ty),
             mask=(rows < M)[:, None] & (cols < R)[None, :])


CONFIGS = [dict(BLOCK_M=bm, BLOCK_K=bk, STAGES=st, num_warps=w)
           for bm, bk, st, w in itertools.product((32, 64, 128), (128, 256), (3, 5), (4,))
           if bm * bk * 2 * st <= 160 * 1024]


def triton_call(dpre, lora_b, out, config):
    m, k = dpre.shape
    r = lora_b.shape[1]
    meta = dict(config)
    bm, bk = meta["BLOCK_M"], meta["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(dpre, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(lora_b, [bk, 16])
    grid = (triton.cdiv(m, bm),)
    return lambda: tall_skinny_kernel[grid](a_desc, b_desc, out, m, k, r, SCALE, out.stride(0), R_PAD=16,
                                            **meta)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="8192x4096x8,8192x4096x16,32768x4096x16")
    args = parser.parse_args()
    rows = []
    for text in args.shapes.split(","):
        m, k, r = (int(v) for v in text.split("x"))
        dpre = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        lora_b = torch.randn(k, r, device="cuda", dtype=torch.bfloat16) / r**0.5
        vec = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        ref = dpre.new_empty((m, r)).addmm_(dpre, lora_b, beta=0, alpha=SCALE)
        outs = [torch.empty(m, r, device="cuda", dtype=torch.bfloat16) for _ in CONFIGS]
        calls = {"cublas": lambda: dpre.new_empty((m, r)).addmm_(dpre, lora_b, beta=0, alpha=SCALE),
                 "gemv": lambda: torch.mv(dpre, vec)}
        calls.update({str(i): triton_call(dpre, lora_b, outs[i], c) for i, c in enumerate(CONFIGS)})
        row = interleaved_us_row(calls, args.rounds, shape=text)
        best = min(range(len(CONFIGS)), key=lambda i: row[str(i)])
        row["best"] = dict(CONFIGS[best], us=row[str(best)],
                           maxdiff=(outs[best].float() - ref.float()).abs().max().item(),
                           refmax=ref.float().abs().max().item())
        print("   best", row["best"], "cublas", round(row["cublas"], 1), "gemv", round(row["gemv"], 1), flush=True)
        rows.append(row)
    write_record("rank_product_probe", configs=CONFIGS, rows=rows)


if __name__ == "__main__":
    main()
