"""Bench suite ``lora``: the fused LoRA linear against PEFT-style eager and torch.compile.

Shapes are (tokens, d, r): a square ``d -> d`` base layer with a rank-r adapter, no
activation (a PEFT LoRA ``Linear``), scale 2, W and b frozen, gradients for x, A and B.
Implementations, side by side in one run on one device:
    fused      fusedmlp.lora_linear (xs = s * x @ A.T formed on chip once per unit of a row
               block's tiles, from every tile's main loop, or from cuBLAS; at inputs up to
               1024 wide on Hopper, cuBLAS's GEMM against the merged weight W + s * B @ A,
               xs formed in the backward: ops/lora.py)
    fused_in_loop  the same with x @ A.T always accumulated in every tile's main loop (the
                   Triton kernel, x read once); a failed row where the kernel cannot take it
                   there (r * element size above 128 bytes, as r = 64 in fp32; fp32 at
                   "highest", whose products run on cuBLAS)
    eager      F.linear(x, W, b) + F.linear(F.linear(x, A), B) * scale: PEFT's LoRA forward
    compile    the same function under torch.compile (default mode)
    compile_max  torch.compile(mode="max-autotune") (only with --max-autotune)
    gemm       the bare cuBLAS base GEMM: fwd x @ W.T; bwd g @ W (W is frozen: no dW); both
    fused_graph   fused captured in a CUDA graph and replayed (fwd and fwd+bwd;
                  harness.graph_steps): the kernels' time, no launch or Python time
    eager_graph   eager captured the same way
    compile_graph compile captured the same way: fused_graph's peer where plain
                  calls are bound by host time

TFLOP/s counts the base layer's GEMM work (2 * tokens * d * d per GEMM: 1 fwd, 1 bwd).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...ops._common import gemms_on_cublas
from ..harness import Measurement, available_impls, run_suite
from ..harness import summary_table as harness_summary_table

NAME = "lora"
SCALE = 2.0
SHAPE_FIELDS = ("tokens", "d", "r")
SHAPE_PRESETS = {
    "default": [(t, d, r) for t in (8192, 32768) for d in (1024, 4096) for r in (8, 16, 64)],
    "small": [(8192, 1024, 16), (32768, 4096, 16)],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_in_loop", "eager", "compile", "compile_max", "gemm",
         "fused_graph", "eager_graph", "compile_graph")
PEERS = ("eager", "compile", "compile_max", "eager_graph", "compile_graph")
MODES = ("fwd", "bwd", "fwd+bwd")


def default_impls(max_autotune: bool = False) -> list[str]:
    return available_impls(IMPLS, max_autotune)


def eager_lora(x, w, b, a, lb):
    return F.linear(x, w, b) + F.linear(F.linear(x, a), lb) * SCALE


def _forward_fn(impl: str):
    from ...ops import lora as lora_ops

    if impl == "fused":
        return lambda x, w, b, a, lb: lora_ops.lora_linear(x, w, b, a, lb, SCALE)
    if impl == "fused_in_loop":
        def in_loop(x, w, b, a, lb):
            # where the kernel cannot take the rank product in its loop, no row under this name
            if gemms_on_cublas(x) or a.shape[0] * x.element_size() > 2 * lora_ops.IN_LOOP_MAX_RANK:
                raise ValueError(f"the in-loop form does not run at r = {a.shape[0]} in {x.dtype}"
                                 + (" at fp32 'highest' (cuBLAS products)" if gemms_on_cublas(x) else ""))
            names = ("IN_LOOP_MAX_MACS", "IN_LOOP_MAX_RANK", "ONCHIP_FORWARD", "HANDOFF_FORWARD", "MERGED_FORWARD")
            limits = [getattr(lora_ops, name) for name in names]
            # every size and rank, not the forms that form xs once per row block or merge the weight
            for name, value in zip(names, (1 << 62, 64, False, False, False)):
                setattr(lora_ops, name, value)
            try:
                return lora_ops.lora_linear(x, w, b, a, lb, SCALE)
            finally:
                for name, value in zip(names, limits):
                    setattr(lora_ops, name, value)

        return in_loop
    if impl == "eager":
        return eager_lora
    if impl in ("compile", "compile_max"):
        return torch.compile(eager_lora, dynamic=False, mode="max-autotune" if impl == "compile_max" else None)
    raise ValueError(impl)


def sweep_operands(m: int, k: int, n: int, r: int, dtype=torch.bfloat16):
    """(x [m, k], W [n, k], b [n], A [r, k], B [n, r]) on the GPU, unit-scale products, no
    gradients: the operands of the kernel sweeps in benchmarks/ (lora_*_sweep.py)."""
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    a = torch.randn(r, k, device="cuda", dtype=dtype) / k**0.5
    lb = torch.randn(n, r, device="cuda", dtype=dtype) / r**0.5
    return x, w, b, a, lb


def _make_inputs(shape, dtype):
    tokens, d, r = shape
    x = torch.randn(tokens, d, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(d, d, device="cuda") / d**0.5).to(dtype)
    b = torch.randn(d, device="cuda", dtype=dtype)
    a = (torch.randn(r, d, device="cuda") / d**0.5).to(dtype).requires_grad_()
    lb = (torch.randn(d, r, device="cuda") / r**0.5).to(dtype).requires_grad_()
    return (x, w, b, a, lb), torch.randn(tokens, d, device="cuda", dtype=dtype)


def _gemm_steps(inputs, g):
    x, w = inputs[0].detach(), inputs[1]
    fwd = lambda: torch.mm(x, w.t())  # noqa: E731
    bwd = lambda: torch.mm(g, w)  # noqa: E731
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": lambda: (fwd(), bwd())}


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    return run_suite(NAME, shapes, SHAPE_FIELDS, dtype, impls, modes, _make_inputs, _forward_fn, _gemm_steps,
                     {"fwd": 1, "bwd": 1, "fwd+bwd": 2}, lambda s: 2.0 * s[0] * s[1] * s[1], on_shape_done)


def summary_table(rows: list[Measurement]):
    return harness_summary_table(rows, IMPLS, PEERS)


def run_cpu_check(dtype):
    """No GPU: a small interpreted run against the float64 reference (no timings)."""
    from ...ops.lora import lora_linear, lora_linear_reference

    headers = ["dtype", "r", "err y", "err dx", "err dA", "err dB"]
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    table = []
    for r in (3, 16):
        tensors64 = [torch.randn(96, 48, dtype=torch.float64), torch.randn(40, 48, dtype=torch.float64) / 48**0.5,
                     torch.randn(40, dtype=torch.float64), torch.randn(r, 48, dtype=torch.float64) / 48**0.5,
                     torch.randn(40, r, dtype=torch.float64) / r**0.5]
        g64 = torch.randn(96, 40, dtype=torch.float64)
        trains = (True, False, False, True, True)
        ref = [t.clone().requires_grad_(need) for t, need in zip(tensors64, trains)]
        lora_linear_reference(*ref, SCALE).backward(g64)
        leaves = [t.to(dtype).requires_grad_(need) for t, need in zip(tensors64, trains)]
        y = lora_linear(*leaves, SCALE)
        y.backward(g64.to(dtype))
        y_ref = lora_linear_reference(*tensors64, SCALE)
        table.append([str(dtype).replace("torch.", ""), r, err(y, y_ref)]
                     + [err(leaves[i].grad, ref[i].grad) for i in (0, 3, 4)])
    return headers, table
