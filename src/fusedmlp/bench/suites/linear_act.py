"""Bench suite ``linear_act``: fused Linear + bias + activation against its peers.

Shapes are (tokens, in, out). Implementations, side by side in one run on one device:
    fused          fusedmlp.linear_act(save_preact=False): for gelu_tanh the backward
                   recomputes the pre-activation (x is all it keeps)
    fused_preact   fusedmlp.linear_act(save_preact=True): keeps the pre-activation
    eager          F.linear (addmm with the bias) + the activation, PyTorch eager
    compile        the same function under torch.compile (default mode)
    compile_max    torch.compile(mode="max-autotune") (only with --max-autotune)
    quack          QuACK's GEMM with the activation epilogue when installed (bench/quack.py):
                   fwd only, it has no backward for a standalone Linear + activation; not
                   for gelu (erf) and sigmoid, which it lacks
    gemm           the bare cuBLAS GEMMs of the same shape (fwd: x @ W.T; bwd: dpre @ W and
                   dpre.T @ x; fwd+bwd: all three): the floor
    fused_graph    fused captured in a CUDA graph and replayed (fwd and fwd+bwd;
                   harness.graph_steps): the kernels' time, no launch or Python time
    fused_preact_graph  fused_preact captured the same way
    eager_graph    eager captured the same way
    compile_graph  compile captured the same way: fused_graph's peer where plain
                   calls are bound by host time

The activation is gelu_tanh (``ACTIVATION``), or another one with ``--activation`` (every impl
applies the same one). TFLOP/s counts the model's GEMM work
(2 * tokens * in * out per GEMM, 3 for fwd+bwd).
"""

from __future__ import annotations

import torch

from ...ops.activations import activation_reference, check_activation
from .. import quack
from ..harness import Measurement, available_impls, rounded_to, run_suite
from ..harness import summary_table as harness_summary_table

NAME = "linear_act"
ACTIVATION = "gelu_tanh"
SHAPE_FIELDS = ("tokens", "in", "out")
SHAPE_PRESETS = {
    # the seed's FFN width (512 -> 1792 at (B, L) = (8, 2048)) and an LLM FFN (4096 -> 14336)
    "default": [(16384, 512, 1792), (16384, 4096, 14336)],
    "full": [(t, i, o) for t in (4096, 16384, 65536) for i, o in ((512, 1792), (1024, 4096), (4096, 14336))],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_preact", "eager", "compile", "compile_max", "quack", "gemm",
         "fused_graph", "fused_preact_graph", "eager_graph", "compile_graph")
PEERS = ("eager", "compile", "compile_max", "quack", "eager_graph", "compile_graph")
MODES = ("fwd", "bwd", "fwd+bwd")


def set_activation(name: str) -> None:
    """``fusedmlp bench linear_act --activation NAME``: the activation of every impl."""
    global ACTIVATION
    ACTIVATION = check_activation(name)


def default_impls(max_autotune: bool = False) -> list[str]:
    """Every implementation this machine can run for ``ACTIVATION`` (compile_max only when
    asked for; quack where it is installed and has the activation)."""
    impls = available_impls(IMPLS, max_autotune, {"quack": quack.MODULE})
    return [i for i in impls if i != "quack" or ACTIVATION in quack.ACTIVATIONS]


def eager_linear_act(x, w, b):
    return activation_reference(torch.nn.functional.linear(x, w, b), ACTIVATION)


def _forward_fn(impl: str):
    from ...ops.linear_act import linear_act

    if impl in ("fused", "fused_preact"):
        save_preact = impl == "fused_preact"
        return lambda x, w, b: linear_act(x, w, b, ACTIVATION, save_preact)
    if impl == "eager":
        return eager_linear_act
    if impl in ("compile", "compile_max"):
        return torch.compile(eager_linear_act, dynamic=False, mode="max-autotune" if impl == "compile_max" else None)
    if impl == "quack":
        return quack.linear_act_forward(ACTIVATION)
    raise ValueError(impl)


def _make_inputs(shape, dtype):
    tokens, d_in, d_out = shape
    x = torch.randn(tokens, d_in, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(d_out, d_in, device="cuda") / d_in**0.5).to(dtype).requires_grad_()
    b = torch.randn(d_out, device="cuda", dtype=dtype, requires_grad=True)
    return (x, w, b), torch.randn(tokens, d_out, device="cuda", dtype=dtype)


def _gemm_steps(inputs, g):
    x, w = inputs[0].detach(), inputs[1].detach()
    return {
        "fwd": lambda: torch.mm(x, w.t()),
        "bwd": lambda: (torch.mm(g, w), torch.mm(g.t(), x)),
        "fwd+bwd": lambda: (torch.mm(x, w.t()), torch.mm(g, w), torch.mm(g.t(), x)),
    }


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    return run_suite(NAME, shapes, SHAPE_FIELDS, dtype, impls, modes, _make_inputs, _forward_fn, _gemm_steps,
                     {"fwd": 1, "bwd": 2, "fwd+bwd": 3}, lambda s: 2.0 * s[0] * s[1] * s[2], on_shape_done)


def summary_table(rows: list[Measurement]):
    return harness_summary_table(rows, IMPLS, PEERS)


def run_cpu_check(dtype):
    """No GPU: a small interpreted run against the float64 reference (no timings)."""
    from ...ops.activations import ACTIVATIONS
    from ...ops.linear_act import linear_act, linear_act_reference

    headers = ["dtype", "activation", "save_preact", "err y", "err dx", "err dW", "err db"]
    x64, w64, b64 = torch.randn(96, 48, dtype=torch.float64), torch.randn(40, 48, dtype=torch.float64) / 7, \
        torch.randn(40, dtype=torch.float64)
    g64 = torch.randn(96, 40, dtype=torch.float64)
    x64, w64, b64, g64 = rounded_to(dtype, x64, w64, b64, g64)
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    table = []
    for act in ACTIVATIONS:
        ref = [t.clone().requires_grad_() for t in (x64, w64, b64)]
        y_ref = linear_act_reference(*ref, act)
        y_ref.backward(g64)
        for save_preact in (False, True):
            leaves = [t.to(dtype).requires_grad_() for t in (x64, w64, b64)]
            y = linear_act(*leaves, act, save_preact)
            y.backward(g64.to(dtype))
            table.append([str(dtype).replace("torch.", ""), act, save_preact, err(y, y_ref)]
                         + [err(t.grad, r.grad) for t, r in zip(leaves, ref)])
    return headers, table
