"""Bench suite ``swiglu``: the fused SwiGLU feed-forward (LLaMA MLP) against its peers.

Shapes are (tokens, d, hidden). Implementations, side by side in one run on one device:
    fused            fusedmlp.swiglu(recompute=False): keeps h = [up | gate]
    fused_recompute  fusedmlp.swiglu(recompute=True): keeps x only
    eager            down(silu(gate(x)) * up(x)) with F.linear / F.silu, PyTorch eager
    compile          the same function under torch.compile (default mode)
    compile_max      torch.compile(mode="max-autotune") (only with --max-autotune)
    liger            Liger-Kernel's SwiGLU MLP path when installed: three linears around its
                     fused SiLU-mul kernel (with --activation gelu_tanh its GELU-mul kernel,
                     as its Gemma MLP; no other activation)
    quack            QuACK's MLP when installed (bench/quack.py): its GEMM with the SwiGLU
                     epilogue, the down GEMM, and a backward with the SwiGLU gradient in the
                     down projection's dgrad; h kept
    quack_recompute  the same with h recomputed from x in the backward (x kept only); silu only
    gemm             the bare cuBLAS GEMMs: fwd 3 (gate, up, down), bwd 6, fwd+bwd 9
    fused_graph      fused captured in a CUDA graph and replayed (fwd and fwd+bwd;
                     harness.graph_steps): the kernels' time, no launch or Python time
    fused_recompute_graph  fused_recompute captured the same way
    eager_graph      eager captured the same way
    compile_graph    compile captured the same way: fused_graph's peer where plain
                     calls are bound by host time

The gate's activation is silu (``ACTIVATION``), or another one with ``--activation`` (every
impl applies the same one; gelu_tanh is Gemma's GeGLU feed-forward). With ``--packed``
(``PACKED``) the gate and up weights are one ``[2*hidden, d]`` tensor, as Phi-3's and GLM's
``gate_up_proj`` holds them: fused is ``fusedmlp.swiglu_packed``, eager, compile and liger take
``gate, up = F.linear(x, w_gate_up).chunk(2, -1)`` (the Phi3MLP form; Liger's Phi-3 MLP), the
GEMM floor is the packed products (fwd: x -> 2*hidden, then down; bwd: g @ w_down, its weight's
gradient, dx and the packed weight's gradient, each one product) and QuACK is not offered.
TFLOP/s counts the model's GEMM work (2 * tokens * d * hidden per GEMM).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from ...ops.activations import activation_reference, check_activation
from .. import quack
from ..harness import Measurement, available_impls, module_importable, rounded_to, run_suite
from ..harness import summary_table as harness_summary_table

NAME = "swiglu"
ACTIVATION = "silu"
PACKED = False  # --packed: the gate and up weights in one [2*hidden, d] tensor (gate rows first)
# Liger-Kernel's gated-activation kernels by activation: (module, Function of (gate, up))
LIGER_KERNELS = {"silu": ("liger_kernel.ops.swiglu", "LigerSiLUMulFunction"),
                 "gelu_tanh": ("liger_kernel.ops.geglu", "LigerGELUMulFunction")}
SHAPE_FIELDS = ("tokens", "d", "hidden")
SHAPE_PRESETS = {
    # the seed's FFN (d=512, hidden=1792, (B, L) = (8, 2048)) and a LLaMA-8B-sized FFN
    "default": [(16384, 512, 1792), (16384, 4096, 14336)],
    "full": [(t, d, h) for t in (4096, 16384, 65536) for d, h in ((512, 1792), (2048, 5632), (4096, 14336))],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_recompute", "eager", "compile", "compile_max", "liger", "quack", "quack_recompute", "gemm",
         "fused_graph", "fused_recompute_graph", "eager_graph", "compile_graph")
PEERS = ("eager", "compile", "compile_max", "liger", "quack", "quack_recompute", "eager_graph", "compile_graph")
MODES = ("fwd", "bwd", "fwd+bwd")


def set_activation(name: str) -> None:
    """``fusedmlp bench swiglu --activation NAME``: the gate's activation of every impl."""
    global ACTIVATION
    ACTIVATION = check_activation(name)


def set_packed(packed: bool) -> None:
    """``fusedmlp bench swiglu --packed``: every impl takes the packed gate/up weight."""
    global PACKED
    PACKED = bool(packed)


def liger_available() -> bool:
    return ACTIVATION in LIGER_KERNELS and module_importable(LIGER_KERNELS[ACTIVATION][0])


def default_impls(max_autotune: bool = False) -> list[str]:
    """Every implementation this machine can run for ``ACTIVATION`` (compile_max only when asked
    for; liger for silu and gelu_tanh, quack for silu with separate weights, where installed)."""
    peers = {"liger": LIGER_KERNELS[ACTIVATION][0]} if ACTIVATION in LIGER_KERNELS else {}
    if ACTIVATION == "silu" and not PACKED:
        peers.update(quack=quack.MODULE, quack_recompute=quack.MODULE)
    impls = available_impls(IMPLS, max_autotune, peers)
    return [i for i in impls if i in peers or i not in ("liger", "quack", "quack_recompute")]


def _gate(gate):
    return F.silu(gate) if ACTIVATION == "silu" else activation_reference(gate, ACTIVATION)


def eager_swiglu(x, w_gate, w_up, w_down):
    return F.linear(_gate(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def eager_swiglu_packed(x, w_gate_up, w_down):
    gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
    return F.linear(_gate(gate) * up, w_down)


def _liger_gated_mul():
    module, function = LIGER_KERNELS[ACTIVATION]
    return getattr(importlib.import_module(module), function)


def liger_swiglu(x, w_gate, w_up, w_down):
    return F.linear(_liger_gated_mul().apply(F.linear(x, w_gate), F.linear(x, w_up)), w_down)


def liger_swiglu_packed(x, w_gate_up, w_down):
    gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
    return F.linear(_liger_gated_mul().apply(gate, up), w_down)


def _forward_fn(impl: str):
    from ...ops.swiglu import swiglu, swiglu_packed

    eager = eager_swiglu_packed if PACKED else eager_swiglu
    if impl in ("fused", "fused_recompute"):
        recompute, activation = impl == "fused_recompute", ACTIVATION
        if PACKED:
            return lambda x, wgu, wd: swiglu_packed(x, wgu, wd, recompute=recompute, activation=activation)
        return lambda x, wg, wu, wd: swiglu(x, wg, wu, wd, recompute=recompute, activation=activation)
    if impl == "eager":
        return eager
    if impl in ("compile", "compile_max"):
        return torch.compile(eager, dynamic=False, mode="max-autotune" if impl == "compile_max" else None)
    if impl == "liger":
        return liger_swiglu_packed if PACKED else liger_swiglu
    if impl in ("quack", "quack_recompute") and not PACKED:
        return quack.swiglu_forward(recompute=impl == "quack_recompute")
    raise ValueError(impl)


def _make_inputs(shape, dtype):
    tokens, d, hidden = shape
    x = torch.randn(tokens, d, device="cuda", dtype=dtype, requires_grad=True)
    weight_shapes = ((2 * hidden, d), (d, hidden)) if PACKED else ((hidden, d), (hidden, d), (d, hidden))
    weights = [(torch.randn(o, i, device="cuda") / i**0.5).to(dtype).requires_grad_() for o, i in weight_shapes]
    return (x, *weights), torch.randn(tokens, d, device="cuda", dtype=dtype)


def _gemm_steps(inputs, g):
    if PACKED:
        return _packed_gemm_steps(inputs, g)
    x, wg, wu, wd = (t.detach() for t in inputs)
    z = torch.randn(x.shape[0], wg.shape[0], device=x.device, dtype=x.dtype)

    def fwd():
        return torch.mm(x, wg.t()), torch.mm(x, wu.t()), torch.mm(z, wd.t())

    def bwd():
        return (torch.mm(g, wd), torch.mm(g.t(), z), torch.mm(z, wg), torch.mm(z, wu),
                torch.mm(z.t(), x), torch.mm(z.t(), x))

    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": lambda: (fwd(), bwd())}


def _packed_gemm_steps(inputs, g):
    """The same work over the packed weight: one product where the separate form takes two."""
    x, wgu, wd = (t.detach() for t in inputs)
    z = torch.randn(x.shape[0], wd.shape[1], device=x.device, dtype=x.dtype)
    dh = torch.randn(x.shape[0], wgu.shape[0], device=x.device, dtype=x.dtype)

    def fwd():
        return torch.mm(x, wgu.t()), torch.mm(z, wd.t())

    def bwd():
        return torch.mm(g, wd), torch.mm(g.t(), z), torch.mm(dh, wgu), torch.mm(dh.t(), x)

    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": lambda: (fwd(), bwd())}


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    return run_suite(NAME, shapes, SHAPE_FIELDS, dtype, impls, modes, _make_inputs, _forward_fn, _gemm_steps,
                     {"fwd": 3, "bwd": 6, "fwd+bwd": 9}, lambda s: 2.0 * s[0] * s[1] * s[2], on_shape_done)


def summary_table(rows: list[Measurement]):
    return harness_summary_table(rows, IMPLS, PEERS)


def run_cpu_check(dtype):
    """No GPU: a small interpreted run against the float64 reference (no timings), with the
    suite's gate activation and weight layout."""
    from ...ops.swiglu import swiglu, swiglu_packed, swiglu_reference

    tensors64 = [torch.randn(96, 48, dtype=torch.float64)] + [
        torch.randn(o, i, dtype=torch.float64) / i**0.5 for o, i in ((80, 48), (80, 48), (48, 80))]
    g64 = torch.randn(96, 48, dtype=torch.float64)
    *tensors64, g64 = rounded_to(dtype, *tensors64, g64)
    ref = [t.clone().requires_grad_() for t in tensors64]
    y_ref = swiglu_reference(*ref, activation=ACTIVATION)
    y_ref.backward(g64)
    x_ref, wg_ref, wu_ref, wd_ref = ref
    if PACKED:  # the packed weight [gate; up] and its gradient
        inputs64 = [tensors64[0], torch.cat(tensors64[1:3]), tensors64[3]]
        ref_grads = [x_ref.grad, torch.cat([wg_ref.grad, wu_ref.grad]), wd_ref.grad]
        headers = ["dtype", "recompute", "err y", "err dx", "err dW_gate_up", "err dW_down"]
    else:
        inputs64, ref_grads = tensors64, [t.grad for t in ref]
        headers = ["dtype", "recompute", "err y", "err dx", "err dW_gate", "err dW_up", "err dW_down"]
    op = swiglu_packed if PACKED else swiglu
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    table = []
    for recompute in (False, True):
        leaves = [t.to(dtype).requires_grad_() for t in inputs64]
        y = op(*leaves, recompute=recompute, activation=ACTIVATION)
        y.backward(g64.to(dtype))
        table.append([str(dtype).replace("torch.", ""), recompute, err(y, y_ref)]
                     + [err(t.grad, r) for t, r in zip(leaves, ref_grads)])
    return headers, table
