"""Bench suite ``mlp``: a whole narrow MLP as one kernel against eager, torch.compile and CUDA graphs.

Shapes are BATCHxIN[xHIDDEN...]xOUT: a stack of Linear layers with ReLU after every layer
but the last, which gets ReLU too when OUT > 1 (DLRM's bottom MLP) and a sigmoid when OUT is
1 (DLRM's top MLP, a click probability). All weights, biases and the input are trained.
Implementations, side by side in one run on one device:
    fused            fusedmlp.mlp (one forward kernel; dgrad + wgrad kernels backward)
    fused_recompute  the same keeping only x for the backward (recompute=True)
    fused_graph      fused captured in a CUDA graph like cuda_graph below (both through
                     fusedmlp.capture_cuda_graph, whose graph_capture_mode lets the fused op
                     pick kernels by GPU time): what fusion gains once launch and host
                     overhead are gone on both sides
    eager            F.linear + activation per layer: what nn.Sequential runs
    compile          the same function under torch.compile (default mode)
    compile_max      torch.compile(mode="max-autotune") (only with --max-autotune)
    cuda_graph       eager captured in a CUDA graph once per mode and replayed: no launch or
                     host overhead at all, the honest peer for small batches (its peak memory
                     is the graph's private pool, allocated at capture, so it reads as 0 here)
    compile_graph    compile captured and replayed the same way: fused_graph's compile peer,
                     where plain calls at small batches time the host

TFLOP/s counts the stack's GEMM work: 2 * batch * (weights) per GEMM, 1 forward, 3 fwd+bwd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..harness import Measurement, available_impls, graph_steps, rounded_to, run_suite
from ..harness import summary_table as harness_summary_table

NAME = "mlp"
SHAPE_FIELDS = ("batch", "sizes")
DLRM_BOTTOM = (13, 512, 256, 64, 16)
DLRM_TOP = (367, 512, 256, 1)
SHAPE_PRESETS = {
    "default": [(b, *s) for s in (DLRM_BOTTOM, DLRM_TOP) for b in (2048, 8192, 65536)],
    "full": [(b, *s) for s in (DLRM_BOTTOM, DLRM_TOP) for b in (2048, 4096, 8192, 16384, 32768, 65536)],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_recompute", "fused_graph", "eager", "compile", "compile_max", "cuda_graph", "compile_graph")
PEERS = ("eager", "compile", "compile_max", "cuda_graph", "compile_graph")
MODES = ("fwd", "fwd+bwd")


def check_shape(shape) -> str | None:
    """Why ``shape`` is not a BATCHxINx...xOUT shape, or None."""
    if len(shape) < 3 or min(shape) <= 0:
        return "mlp shapes are BATCHxINx...xOUT (a batch and at least two widths), all positive"
    return None


def default_impls(max_autotune: bool = False) -> list[str]:
    return available_impls(IMPLS, max_autotune)


def _last_activation(sizes) -> str:
    return "sigmoid" if sizes[-1] == 1 else "relu"


def _unpack(inputs):
    x, params = inputs[0], inputs[1:]
    return x, list(params[0::2]), list(params[1::2])


def _eager_fn(last: str):
    def eager(*inputs):
        x, weights, biases = _unpack(inputs)
        for i, (w, b) in enumerate(zip(weights, biases)):
            x = F.linear(x, w, b)
            x = torch.sigmoid(x) if (i == len(weights) - 1 and last == "sigmoid") else torch.relu(x)
        return x

    return eager


def _forward_fn(shape):
    from ...ops.mlp import mlp

    last = _last_activation(shape[1:])

    def make(impl: str):
        if impl in ("fused", "fused_recompute"):
            recompute = impl == "fused_recompute"

            def fused(*inputs):
                x, weights, biases = _unpack(inputs)
                return mlp(x, weights, biases, "relu", last, recompute=recompute)

            return fused
        if impl in ("eager", "cuda_graph"):
            return _eager_fn(last)
        if impl in ("compile", "compile_max"):
            return torch.compile(_eager_fn(last), dynamic=False, mode="max-autotune" if impl == "compile_max" else None)
        raise ValueError(impl)

    return make


def _make_inputs(shape, dtype, device="cuda"):
    batch, sizes = shape[0], shape[1:]
    inputs = [torch.randn(batch, sizes[0], device=device, dtype=dtype, requires_grad=True)]
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        inputs.append((torch.randn(n_out, n_in, device=device) / n_in**0.5).to(dtype).requires_grad_())
        inputs.append((torch.randn(n_out, device=device) * 0.1).to(dtype).requires_grad_())
    return tuple(inputs), torch.randn(batch, sizes[-1], device=device, dtype=dtype)


def _flops(shape) -> float:
    sizes = shape[1:]
    return 2.0 * shape[0] * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    rows = []
    for shape in shapes:  # one stack at a time: make_forward depends on the stack's last activation
        sub_rows = run_suite(
            NAME, [shape], ("batch", "sizes"), dtype, impls, modes, _make_inputs, _forward_fn(shape),
            None, {"fwd": 1, "fwd+bwd": 3}, _flops,
            custom_steps={"cuda_graph": lambda inputs, g: graph_steps(_eager_fn(_last_activation(shape[1:])),
                                                                       inputs, g)},
        )
        for row in sub_rows:
            row.shape = {"batch": shape[0], "sizes": "-".join(str(s) for s in shape[1:])}
        rows += sub_rows
        if on_shape_done is not None:
            on_shape_done(rows)
    return rows


TABLE_NOTE = ("median ms, each fused impl's time over each peer's, peak MiB above inputs (a/b MiB: peak ratio; "
              "no GEMM floor here)")


def summary_table(rows: list[Measurement]):
    return harness_summary_table(rows, IMPLS, PEERS)


def run_cpu_check(dtype):
    """No GPU: a small interpreted run of both DLRM stacks against the float64 reference (no timings)."""
    from ...ops.mlp import mlp, mlp_reference

    headers = ["dtype", "stack", "err y", "err dx", "worst err dW", "worst err db"]
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    table = []
    for label, sizes in (("bottom", DLRM_BOTTOM), ("top", DLRM_TOP)):
        last = _last_activation(sizes)
        inputs64, g64 = _make_inputs((48, *sizes), torch.float64, device="cpu")
        *inputs64, g64 = rounded_to(dtype, *inputs64, g64)
        ref = [t.clone().requires_grad_() for t in inputs64]
        x, ws, bs = _unpack(ref)
        mlp_reference(x, ws, bs, "relu", last).backward(g64)
        leaves = [t.to(dtype).requires_grad_() for t in inputs64]
        x, ws, bs = _unpack(leaves)
        y = mlp(x, ws, bs, "relu", last)
        y.backward(g64.to(dtype))
        x64, ws64, bs64 = _unpack(inputs64)
        y_ref = mlp_reference(x64, ws64, bs64, "relu", last)
        table.append([str(dtype).replace("torch.", ""), f"{label} {'-'.join(map(str, sizes))}", err(y, y_ref),
                      err(leaves[0].grad, ref[0].grad),
                      max(err(a.grad, b.grad) for a, b in zip(leaves[1::2], ref[1::2])),
                      max(err(a.grad, b.grad) for a, b in zip(leaves[2::2], ref[2::2]))])
    return headers, table

