"""The LoRA forward with x @ A.T in the main loop: the Gluon ping-pong kernel against the
Triton kernel it replaces and against xs from cuBLAS, measured.

For each (tokens, d, r), bf16, identity with bias (a PEFT LoRA Linear, W frozen): kernel time
of the forward replayed from a CUDA graph (no host time), in microseconds, for
    gemm         the bare cuBLAS base GEMM x @ W.T (the floor)
    pingpong     the default: the in-loop ping-pong kernel (ranks 8 and 16, inputs up to
                 LORA_PINGPONG_MAX_K wide)
    triton       the Triton in-loop kernel (``LORA_PINGPONG_IN_LOOP_MAX_RANK = 0``)
    cublas_xs    xs = s * x @ A.T from cuBLAS first, then the ping-pong kernel with xs @ B.T
                 as its tail steps (``IN_LOOP_MAX_MACS = 0``)
and the forward+backward step (gradients for x, A, B) of the first three, also in a graph.
The variants run in turn, twice over (drift touches all alike); both figures are printed.

    python benchmarks/lora_in_loop_pingpong.py [--json FILE]
"""

import argparse
import contextlib
import json

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import format_table, graph_us

SHAPES = [(8192, 1024, 8), (8192, 1024, 16), (32768, 1024, 8), (32768, 1024, 16), (16384, 512, 16)]


@contextlib.contextmanager
def variant(name):
    saved = lora_ops.LORA_PINGPONG_IN_LOOP_MAX_RANK, lora_ops.IN_LOOP_MAX_MACS
    if name == "triton":
        lora_ops.LORA_PINGPONG_IN_LOOP_MAX_RANK = 0
    if name == "cublas_xs":
        lora_ops.IN_LOOP_MAX_MACS = 0
    try:
        yield
    finally:
        lora_ops.LORA_PINGPONG_IN_LOOP_MAX_RANK, lora_ops.IN_LOOP_MAX_MACS = saved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)
    dt = torch.bfloat16
    headers = ["tokens", "d", "r", "gemm us", "pingpong us", "triton us", "cublas_xs us", "pingpong/gemm",
               "triton/gemm", "cublas_xs/gemm", "pingpong fwd+bwd us", "triton fwd+bwd us", "cublas_xs fwd+bwd us"]
    table, raw = [], []
    for tokens, d, r in SHAPES:
        x = torch.randn(tokens, d, device="cuda", dtype=dt, requires_grad=True)
        w = (torch.randn(d, d, device="cuda") / d**0.5).to(dt)
        b = torch.randn(d, device="cuda", dtype=dt)
        a = (torch.randn(r, d, device="cuda") / d**0.5).to(dt).requires_grad_()
        lb = (torch.randn(d, r, device="cuda") / r**0.5).to(dt).requires_grad_()
        g = torch.randn(tokens, d, device="cuda", dtype=dt)
        xd = x.detach()
        samples = {"gemm": [], **{f"{v} {m}": [] for v in ("pingpong", "triton", "cublas_xs") for m in ("fwd", "step")}}
        for _ in range(2):
            samples["gemm"].append(graph_us(lambda: torch.mm(xd, w.t())))
            for name in ("pingpong", "triton", "cublas_xs"):
                with variant(name):
                    samples[f"{name} fwd"].append(graph_us(lambda: lora_ops.lora_linear(xd, w, b, a.detach(),
                                                                                           lb.detach(), 2.0)))
                    samples[f"{name} step"].append(graph_us(
                        lambda: torch.autograd.grad(lora_ops.lora_linear(x, w, b, a, lb, 2.0), (x, a, lb), g)))
        best = {k: min(v) for k, v in samples.items()}
        raw.append({"shape": [tokens, d, r], "samples_us": samples})
        table.append([tokens, d, r, best["gemm"], best["pingpong fwd"], best["triton fwd"], best["cublas_xs fwd"],
                      best["pingpong fwd"] / best["gemm"], best["triton fwd"] / best["gemm"],
                      best["cublas_xs fwd"] / best["gemm"], best["pingpong step"], best["triton step"],
                      best["cublas_xs step"]])
        print(f"{tokens}x{d} r={r}: " + ", ".join(f"{k} {'/'.join(f'{s:.1f}' for s in v)}" for k, v in samples.items()),
              flush=True)
    print(f"LoRA forward kernel time in CUDA graphs (best of 2 rounds), bf16, {torch.cuda.get_device_name()}")
    print(format_table(headers, table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "headers": headers,
                       "rows": table, "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
