"""Bench suite ``geglu``: the fused GEGLU projection d -> 8d (out = 4d) against its peers.

Implementations, side by side in one run on one device:
    fused          fusedmlp.geglu(recompute=True)  (saves x only)
    fused_store    fusedmlp.geglu(recompute=False) (saves h too)
    eager          F.linear + chunk + F.gelu(tanh) + mul, PyTorch eager
    compile        the same function under torch.compile (default mode)
    compile_max    the same under torch.compile(mode="max-autotune") (only with --max-autotune:
                   it compiles for minutes)
    liger          Liger-Kernel's GEGLU path when liger_kernel is installed: two linears and its
                   fused GELU-mul kernel, the two halves of the packed weight (and bias) held
                   as separate tensors, as a model using Liger stores them (slices of the
                   packed weight, taken in each call, would cost its backward two zero-filled
                   [8d, d] gradients and their sum)
    quack          QuACK's gated GEMM forward when installed (bench/quack.py; the weight
                   interleaved as it stores one): fwd only, it has no backward for this op
    gemm           the bare cuBLAS GEMM(s) of the same shape: the floor a fused GEMM+epilogue
                   must reach (fwd: x @ W.T; bwd: dh @ W and dh.T @ x; fwd+bwd: all three)
    fused_graph    fused captured in a CUDA graph and replayed (fwd and fwd+bwd;
                   harness.graph_steps): the kernels' time, no launch or Python time
    fused_store_graph  fused_store captured the same way
    eager_graph    eager captured the same way
    compile_graph  compile captured the same way
    liger_graph    liger captured the same way (when installed): the graphed impls are each
                   other's peers where plain calls are bound by host time (d = 1024, few rows)

Modes: fwd (a training forward: inputs require grad), bwd (backward of a kept forward),
fwd+bwd. TFLOP/s counts the model's GEMM work (2*N*d*8d per GEMM, 3 GEMMs for fwd+bwd)
whatever an implementation does extra (recompute mode runs a fourth GEMM). Peak memory is
above the inputs x, W, b, g. ``act_nd`` is the forward's activation footprint (x plus all
memory still held after the forward: output and saved state) in units of N*d elements; the
analysis gives 5 for the ideal (input + output) and at least 9 when h is kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import quack
from ..harness import Measurement, available_impls, module_importable, peer_forward, run_suite
from ..harness import summary_table as harness_summary_table

NAME = "geglu"
SHAPE_FIELDS = ("d", "N")
SHAPE_PRESETS = {
    # the anchor shapes of DESIGN.md plus one long-N shape
    "default": [(1024, 8192), (2048, 16384), (4096, 8192), (1024, 32768)],
    # the sweep where N > d and fusion saves most memory
    "full": [(d, n) for d in (1024, 2048, 4096, 8192) for n in (4096, 8192, 16384, 32768, 65536)],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_store", "eager", "compile", "compile_max", "liger", "quack", "gemm",
         "fused_graph", "fused_store_graph", "eager_graph", "compile_graph", "liger_graph")
PEERS = ("eager", "compile", "compile_max", "liger", "quack", "eager_graph", "compile_graph", "liger_graph")
MODES = ("fwd", "bwd", "fwd+bwd")


def liger_available() -> bool:
    return module_importable("liger_kernel.ops.geglu")


def default_impls(max_autotune: bool = False) -> list[str]:
    """Every implementation this machine can run (compile_max only when asked for)."""
    return available_impls(IMPLS, max_autotune,
                           {"liger": "liger_kernel.ops.geglu", "liger_graph": "liger_kernel.ops.geglu",
                            "quack": quack.MODULE})


def eager_geglu(x, weight, bias):
    h = F.linear(x, weight, bias)
    x1, x2 = h.chunk(2, dim=-1)
    return x1 * F.gelu(x2, approximate="tanh")


def _gemm_flops(n: int, d: int) -> float:
    return 2.0 * n * d * 8 * d


def _liger_geglu(x, w1, w2, b1, b2):
    """Liger-Kernel's GEGLU: x1 and x2 from two linears, then its GELU-mul kernel on (x2, x1)."""
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    return LigerGELUMulFunction.apply(F.linear(x, w2, b2), F.linear(x, w1, b1))  # gelu_tanh(first) * second


def _halves(inputs):
    """(x, w1, w2, b1, b2): the packed weight's and bias's halves as leaves of their own."""
    x, weight, bias = inputs
    out = weight.shape[0] // 2

    def leaf(t):
        return None if t is None else t.detach().clone().requires_grad_(t.requires_grad)

    return (x, leaf(weight[:out]), leaf(weight[out:]), leaf(None if bias is None else bias[:out]),
            leaf(None if bias is None else bias[out:]))


liger_geglu = peer_forward(_liger_geglu, adapt_inputs=_halves)


def _forward_fn(impl: str):
    from ...ops.glu import geglu

    if impl == "fused":
        return lambda x, w, b: geglu(x, w, b, recompute=True)
    if impl == "fused_store":
        return lambda x, w, b: geglu(x, w, b, recompute=False)
    if impl == "eager":
        return eager_geglu
    if impl == "compile":
        return torch.compile(eager_geglu, dynamic=False)
    if impl == "compile_max":
        return torch.compile(eager_geglu, dynamic=False, mode="max-autotune")
    if impl == "liger":
        return liger_geglu
    if impl == "quack":
        return quack.geglu_forward()
    raise ValueError(impl)


def _make_inputs(shape, dtype):
    d, n = shape
    x = torch.randn(n, d, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(8 * d, d, device="cuda") / d**0.5).to(dtype).requires_grad_()
    b = torch.randn(8 * d, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(n, 4 * d, device="cuda", dtype=dtype)
    return (x, w, b), g


def _gemm_steps(inputs, g):
    """The bare cuBLAS GEMMs: fwd x @ W.T; bwd dh @ W and dh.T @ x; fwd+bwd all three."""
    x, w = inputs[0].detach(), inputs[1].detach()
    dh = torch.randn(x.shape[0], w.shape[0], device=x.device, dtype=x.dtype)
    return {
        "fwd": lambda: torch.mm(x, w.t()),
        "bwd": lambda: (torch.mm(dh, w), torch.mm(dh.t(), x)),
        "fwd+bwd": lambda: (torch.mm(x, w.t()), torch.mm(dh, w), torch.mm(dh.t(), x)),
    }


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    """Every (shape, impl, mode); ``on_shape_done(rows)`` after each shape (to save partial results)."""
    rows = run_suite(NAME, shapes, SHAPE_FIELDS, dtype, impls, modes, _make_inputs, _forward_fn, _gemm_steps,
                     {"fwd": 1, "bwd": 2, "fwd+bwd": 3}, lambda shape: _gemm_flops(shape[1], shape[0]),
                     on_shape_done)
    for row in rows:  # the forward's activation footprint in units of N*d elements (x + retained)
        retained = row.extra.pop("retained_bytes", None)
        if retained is not None:
            n_d, elem = row.shape["N"] * row.shape["d"], torch.empty((), dtype=dtype).element_size()
            row.extra["act_nd"] = (n_d * elem + retained) / (n_d * elem)
    return rows


def summary_table(rows: list[Measurement]):
    """Headers and rows: one line per (shape, mode): ms per impl, ratios to the GEMM floor
    and of each fused mode to each peer that ran (below 1 = fused is faster), peak MiB."""
    return harness_summary_table(rows, IMPLS, PEERS)


def run_cpu_check(dtype) -> tuple[list[str], list[list]]:
    """No GPU: a small interpreted run against the float64 reference (no timings)."""
    from ...ops.glu import geglu, geglu_reference

    n, d_in, out = 96, 48, 40
    headers = ["dtype", "mode", "err y", "err dx", "err dW", "err db"]
    table = []
    x64 = torch.randn(n, d_in, dtype=torch.float64)
    w64 = torch.randn(2 * out, d_in, dtype=torch.float64) / d_in**0.5
    b64 = torch.randn(2 * out, dtype=torch.float64)
    g64 = torch.randn(n, out, dtype=torch.float64)
    ref_leaves = [t.clone().requires_grad_() for t in (x64, w64, b64)]
    geglu_reference(*ref_leaves).backward(g64)
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    for dt in dict.fromkeys([dtype, torch.float32]):
        for recompute in (True, False):
            leaves = [t.to(dt).requires_grad_() for t in (x64, w64, b64)]
            y = geglu(*leaves, recompute=recompute)
            y.backward(g64.to(dt))
            ref_y = geglu_reference(x64, w64, b64)
            table.append(
                [str(dt).replace("torch.", ""), "recompute" if recompute else "store", err(y, ref_y)]
                + [err(t.grad, r.grad) for t, r in zip(leaves, ref_leaves)]
            )
    return headers, table
