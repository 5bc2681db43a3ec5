"""The linear forward's resident-x kernel on 64-row blocks at K = 1024: a main loop for a LoRA
form that forms xs once per row block.

    PYTHONPATH=src python3 benchmarks/resident_k1024_probe.py [--rounds 5] [--shapes MxKxN,...]

Why: issue 5's LoRA forward at d = 1024 (r 8 and 16, training: xs = s * x @ A.T is kept for the
backward) runs 1.21-1.35x the bare base GEMM on an H200 (target 1.08x). Its kernels form xs
beside the base product from the same x tiles, once per run of a row block's tiles or in
every tile, and their base main loop alone had measured slower than linear_act's (benchmarks/
NOTES.md, "LoRA's forward with xs formed in shares by every tile"). The linear forward's
resident-x kernel (``linear_act_fwd_resident_kernel``: a program keeps its row block of x in
shared memory and streams only W) would let one consumer form xs from the resident x once per
row block, for 1/8 of a tile's MMAs at N = 1024, and every tile add xs @ B.T as one more step.
At K = 1024 a 128-row block of x is 256 KB, more than shared memory holds; a 64-row block is
128 KB, beside the same 5-stage W ring and one [64, 64] output buffer (222 KB; ptxas, sm_90a:
no spills). This asks first whether that main loop (64 x 128 tiles, W streamed, three
consumers) runs near cuBLAS's GEMM at LoRA's d = 1024 shapes, without any rank work.

Timed in CUDA graphs (us, interleaved rounds, medians), identity with a bias: cuBLAS's
``x @ W.T``; linear_act's forward (its forms timed on the first call, the fastest kept); the
library's LoRA training forward at r = 16 (``lora_forward_impl``, xs written); the resident
kernel on 64-row blocks with the bias after the main loop and from it. Each output's relative
error against float64, and the resident y's bits against linear_act's.
"""

import argparse

import torch

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, max_abs_difference, write_record
from fusedmlp.kernels.configs import LINEAR_RESIDENT_CONFIG
from fusedmlp.kernels.linear_act import linear_act_fwd_resident_kernel
from fusedmlp.ops._common import cdiv, launch_pingpong, num_sms
from fusedmlp.ops.linear_act import _launch_fwd as linear_forward
from fusedmlp.ops.linear_act import linear_act_reference, resident_row_shares
from fusedmlp.ops.lora import lora_forward_impl

CONFIG = dict(LINEAR_RESIDENT_CONFIG, BLOCK_M=64)


def row_shares(m, n, sms):
    return resident_row_shares(m, n, sms, CONFIG["BLOCK_M"])


def resident_64(x, w, b, y, bias_first):
    m, k = x.shape
    n = w.shape[0]
    shares = row_shares(m, n, num_sms(x))
    launch_pingpong(linear_act_fwd_resident_kernel, CONFIG, m, n, num_sms(x), {"x_desc": x}, {"w_desc": w},
                    {"y_desc": y}, units=cdiv(m, CONFIG["BLOCK_M"]) * shares, b_ptr=b, M=m, N=n, HSPLIT=shares,
                    ACT="identity", HAS_BIAS=True, BIAS_FIRST=bias_first, K_TILES=cdiv(k, CONFIG["BLOCK_K"]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default="8192x1024x1024,32768x1024x1024")
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    rows = []
    for text in args.shapes.split(","):
        m, k, n = (int(v) for v in text.split("x"))
        assert cdiv(k, CONFIG["BLOCK_K"]) * CONFIG["BLOCK_M"] * CONFIG["BLOCK_K"] * 2 <= 128 * 1024, "x's block"
        gen = torch.Generator(device="cuda").manual_seed(m + k + n)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
        lora_a = torch.randn(args.rank, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
        lora_b = torch.randn(n, args.rank, device="cuda", dtype=torch.bfloat16, generator=gen) / args.rank**0.5
        outputs = {"linear_act": None}
        calls = {"gemm": lambda: torch.mm(x, w.t()),
                 "linear_act": lambda: outputs.__setitem__("linear_act", linear_forward(x, w, b, "identity", False)[0]),
                 f"lora r{args.rank} (training forward)": lambda: lora_forward_impl(
                     x, w, b, lora_a, lora_b, None, None, 2.0, "identity", False)}
        for bias_first in (False, True):
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            name = "resident 64 rows" + (" bias first" if bias_first else "")
            calls[name] = lambda y=y, bias_first=bias_first: resident_64(x, w, b, y, bias_first)
            outputs[name] = y
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        reference = linear_act_reference(x.double(), w.double(), b.double(), "identity")
        relerr = lambda y: ((y.double() - reference).norm() / reference.norm()).item()  # noqa: E731
        checks = {name: dict(relerr=relerr(y)) for name, y in outputs.items()}
        for name, y in outputs.items():
            if name != "linear_act":
                checks[name].update(same_bits=torch.equal(y, outputs["linear_act"]),
                                    maxdiff=max_abs_difference([(y, outputs["linear_act"])]))
        replays = {name: capture_cuda_graph(call)[0].replay for name, call in calls.items()}
        row = interleaved_us_row(replays, args.rounds, shape=text, shares=row_shares(m, n, num_sms(x)))
        row["checks"] = checks
        row["ratios to the GEMM"] = {name: row[name] / row["gemm"] for name in calls if name != "gemm"}
        print("   ", checks, {name: round(v, 3) for name, v in row["ratios to the GEMM"].items()}, flush=True)
        rows.append(row)
    write_record("resident_k1024_probe", rows=rows)


if __name__ == "__main__":
    main()
