"""Bench suite ``add_mul_act``: the pointwise LoRA epilogue ``act(out + bias + s * lora_out)``.

Shapes are (rows, cols). Forward only (the op's kernels are forward kernels). Side by side
in one run on one device:
    fused_triton  fusedmlp.fused_add_mul_activation(backend="triton")
    fused_cuda    the CUDA C++ twin (backend="cuda"; built with nvcc on first use)
    eager         act(out + bias + s * lora_out) in PyTorch eager: four kernels (mul, two adds, act)
    compile       the same function under torch.compile (one generated Triton kernel)

The op is memory-bound: ``extra["gbps"]`` is the bytes it must move (read out and lora_out,
write y, read the bias) over the time. The activation is ``ACTIVATION``.
"""

from __future__ import annotations

import torch

from ...ops.activations import activation_reference
from ..harness import Measurement, available_impls, run_suite
from ..harness import summary_table as harness_summary_table

NAME = "add_mul_act"
ACTIVATION = "relu"
MULTIPLIER = 2.0
SHAPE_FIELDS = ("rows", "cols")
SHAPE_PRESETS = {
    "default": [(8192, 1024), (8192, 4096), (32768, 4096), (16384, 14336)],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused_triton", "fused_cuda", "eager", "compile")
PEERS = ("eager", "compile")
MODES = ("fwd",)


def default_impls(max_autotune: bool = False) -> list[str]:
    return available_impls(IMPLS, max_autotune)


def eager_add_mul_act(out, bias, lora_out):
    return activation_reference(out + bias + MULTIPLIER * lora_out, ACTIVATION)


def _forward_fn(impl: str):
    from ...ops.add_mul_act import fused_add_mul_activation

    if impl.startswith("fused_"):
        backend = impl.removeprefix("fused_")
        return lambda out, bias, lora: fused_add_mul_activation(out, bias, lora, MULTIPLIER, ACTIVATION,
                                                                backend=backend)
    if impl == "eager":
        return eager_add_mul_act
    if impl == "compile":
        return torch.compile(eager_add_mul_act, dynamic=False)
    raise ValueError(impl)


def _make_inputs(shape, dtype):
    rows, cols = shape
    out = torch.randn(rows, cols, device="cuda", dtype=dtype)
    lora = torch.randn(rows, cols, device="cuda", dtype=dtype)
    return (out, torch.randn(cols, device="cuda", dtype=dtype), lora), None


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    rows = run_suite(NAME, shapes, SHAPE_FIELDS, dtype, impls, modes, _make_inputs, _forward_fn, None,
                     {"fwd": 0}, lambda s: 0.0, on_shape_done)
    element = torch.tensor([], dtype=dtype).element_size()
    for row in rows:  # bandwidth instead of TFLOP/s
        row.tflops = None
        if row.ms:
            moved = (3 * row.shape["rows"] + 1) * row.shape["cols"] * element
            row.extra["gbps"] = moved / (row.ms * 1e-3) / 1e9
    return rows


TABLE_NOTE = ("median ms, each fused impl's time over each peer's, peak MiB above inputs (a/b MiB: peak ratio), "
              "GB/s moved")


def summary_table(rows: list[Measurement]):
    headers, table = harness_summary_table(rows, IMPLS, PEERS)
    impls = [i for i in IMPLS if any(r.impl == i for r in rows)]
    lookup = {(tuple(r.shape.values()), r.impl): r for r in rows}
    headers += [f"{i} GB/s" for i in impls]
    for line in table:
        got = [lookup.get((tuple(line[:2]), i)) for i in impls]
        line += [r.extra.get("gbps") if r else None for r in got]
    return headers, table


def run_cpu_check(dtype):
    """No GPU: the Triton kernel interpreted on a small shape against the float64 reference."""
    from ...ops.add_mul_act import add_mul_act_reference, fused_add_mul_activation

    headers = ["dtype", "activation", "err y"]
    inputs64 = (torch.randn(64, 96, dtype=torch.float64), torch.randn(96, dtype=torch.float64),
                torch.randn(64, 96, dtype=torch.float64))
    table = []
    for act in ("relu", "sigmoid", "gelu_tanh"):
        y = fused_add_mul_activation(*(t.to(dtype) for t in inputs64), MULTIPLIER, act)
        ref = add_mul_act_reference(*inputs64, MULTIPLIER, act)
        table.append([str(dtype).replace("torch.", ""), act, ((y.double() - ref).norm() / ref.norm()).item()])
    return headers, table
