"""Fused GEGLU: output and every gradient against a float64 reference, both memory modes."""

import os
import subprocess
import sys

import pytest
import torch
from helpers import (
    TOLERANCE, assert_close, backward_peak_bytes, check_backward_twice, compile_pingpong_for_hopper,
    check_inference_forward, first_store_backward_errors, forcing_tma_config, fp32_matmul_precision,
    recording_launches, recording_pingpong_launches, rel_err,
)
from torch.utils._python_dispatch import TorchDispatchMode

import fusedmlp
from fusedmlp.kernels.configs import GLU_BWD_FP32_CONFIGS, GLU_FP32_CONFIGS, GLU_TMA_CONFIGS
from fusedmlp.ops.activations import ACTIVATIONS
from fusedmlp.ops.glu import geglu_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def make_inputs(lead_shape, in_features, out_features, dtype, device, bias=True):
    """float64 masters and their casts to ``dtype``; the weight scale keeps h in GELU's curved range."""
    x64 = torch.randn(*lead_shape, in_features, dtype=torch.float64, device=device)
    w64 = torch.randn(2 * out_features, in_features, dtype=torch.float64, device=device) / in_features**0.5
    b64 = torch.randn(2 * out_features, dtype=torch.float64, device=device) if bias else None
    g64 = torch.randn(*lead_shape, out_features, dtype=torch.float64, device=device)
    return x64, w64, b64, g64


def reference_grads(x64, w64, b64, g64, activation="gelu_tanh"):
    leaves = [t.clone().requires_grad_() if t is not None else None for t in (x64, w64, b64)]
    y = geglu_reference(*leaves, activation)
    y.backward(g64)
    return y.detach(), [t.grad if t is not None else None for t in leaves]


def check_against_reference(x, w, b, g, recompute, what="", activation="gelu_tanh"):
    """Run the fused op on (x, w, b) with upstream gradient g; compare y, dx, dW, db to float64
    run on the same values (the inputs as the op gets them, not their unrounded masters: with
    a near-cancelling output, bf16's input rounding alone can exceed the tolerance)."""
    dtype = x.dtype
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]  # strides kept
    y = fusedmlp.geglu(*leaves, recompute=recompute, activation=activation)
    y.backward(g)
    ref_y, ref_grads = reference_grads(*(t.detach().double() if t is not None else None for t in (x, w, b, g)),
                                       activation)
    assert y.dtype == dtype and y.shape == ref_y.shape
    assert_close(y, ref_y, dtype, f"{what} y")
    for name, leaf, ref in zip(("dx", "dW", "db"), leaves, ref_grads):
        if leaf is None:
            continue
        assert leaf.grad is not None and leaf.grad.dtype == dtype, name
        assert_close(leaf.grad, ref, dtype, f"{what} {name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize(
    "lead_shape,in_features,out_features",
    [((37,), 45, 29), ((1,), 16, 8), ((3, 7), 33, 20)],
    ids=["odd", "N=1", "3d"],
)
def test_matches_float64(device, dtype, recompute, bias, lead_shape, in_features, out_features):
    x64, w64, b64, g64 = make_inputs(lead_shape, in_features, out_features, dtype, device, bias)
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute)


# layout name -> (which input, shape of the fresh base tensor, view taken of it)
STRIDED_LAYOUTS = {
    "x_col_step": ("x", lambda n, k, o: (n, 2 * k), lambda t: t[:, ::2]),  # non-unit stride along K
    "x_transposed": ("x", lambda n, k, o: (k, n), lambda t: t.t()),
    "w_sliced": ("w", lambda n, k, o: (2 * o, k + 9), lambda t: t[:, :-9]),  # row stride > row length
    "w_transposed": ("w", lambda n, k, o: (k, 2 * o), lambda t: t.t()),
    "x_3d_permuted": ("x", lambda n, k, o: (5, n // 5, k), lambda t: t.permute(1, 0, 2)),
    "g_transposed": ("g", lambda n, k, o: (o, n), lambda t: t.t()),
    "b_step": ("b", lambda n, k, o: (4 * o,), lambda t: t[::2]),  # the kernels read b with unit stride: copied
}


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
@pytest.mark.parametrize("layout", list(STRIDED_LAYOUTS))
def test_strided_inputs(device, recompute, layout):
    dtype = torch.float32
    n, k, out = 40, 35, 23
    x64, w64, b64, g64 = make_inputs((n,), k, out, dtype, device)
    which, base_shape, view = STRIDED_LAYOUTS[layout]
    base64 = torch.randn(base_shape(n, k, out), dtype=torch.float64, device=device)
    if which == "w":
        base64 /= k**0.5
    strided64, strided = view(base64), view(base64.to(dtype))
    assert not strided.is_contiguous()
    if which == "x":
        x64 = strided64
        g64 = torch.randn(*x64.shape[:-1], out, dtype=torch.float64, device=device)
    elif which == "w":
        w64 = strided64
    elif which == "b":
        b64 = strided64
    else:
        g64 = strided64
    x = strided if which == "x" else x64.to(dtype)
    w = strided if which == "w" else w64.to(dtype)
    b = strided if which == "b" else b64.to(dtype)
    g = strided if which == "g" else g64.to(dtype)
    check_against_reference(x, w, b, g, recompute, layout)


class _OpRecorder(TorchDispatchMode):
    """Records the names of the aten ops that run while it is active."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))

    def matching(self, prefixes):
        return [op for op in self.ops if op.startswith(prefixes)]


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_strided_2d_input_is_not_copied(device, monkeypatch, recompute):
    """The kernels receive the caller's strided x and W themselves (same storage, same strides)."""
    import fusedmlp.ops.glu as glu_ops

    seen = {}
    real_launch = glu_ops._launch_fwd

    def spy(x, w1, *args):  # w1: the first half of the packed weight, a view of it
        seen["x"], seen["weight"] = x, w1
        return real_launch(x, w1, *args)

    monkeypatch.setattr(glu_ops, "_launch_fwd", spy)
    monkeypatch.setattr(glu_ops, "use_triton", lambda t: True)
    x = torch.randn(64, 48, device=device).t()  # [48, 64] with strides (1, 48)
    w = torch.randn(64, 30, device=device).t()  # [30, 64] with strides (1, 30)
    b = torch.randn(30, device=device)
    fusedmlp.geglu(x, w, b, recompute=recompute)
    for name, original in (("x", x), ("weight", w)):
        passed = seen[name]
        assert passed.data_ptr() == original.data_ptr() and passed.stride() == original.stride(), name


@pytest.mark.parametrize("path", ["function", "custom_op"])
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_backward_fills_no_zero_gradients(device, recompute, path):
    """Nothing is zero-filled in the backward; on the custom-op path (what torch.compile
    traces) that includes the gradient of the internal saved-h output."""
    x = torch.randn(33, 16, device=device, requires_grad=True)
    w = torch.randn(20, 16, device=device, requires_grad=True)
    if path == "function":
        y = fusedmlp.geglu(x, w, None, recompute=recompute)
    else:
        y, _ = torch.ops.fusedmlp.geglu(x, w, None, "gelu_tanh", not recompute)
    g = torch.randn_like(y)
    with _OpRecorder() as recorder:
        y.backward(g)
    assert recorder.matching(("aten.zeros", "aten.new_zeros", "aten.fill_", "aten.zero_")) == []
    assert x.grad is not None and w.grad is not None


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
@pytest.mark.parametrize("lead_shape", [(0,), (2, 0)], ids=["N=0", "3d-empty"])
def test_empty_batch(device, recompute, lead_shape):
    x = torch.randn(*lead_shape, 24, device=device, requires_grad=True)
    w = torch.randn(18, 24, device=device, requires_grad=True)
    b = torch.randn(18, device=device, requires_grad=True)
    y = fusedmlp.geglu(x, w, b, recompute=recompute)
    assert y.shape == (*lead_shape, 9)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_db_is_bitwise_deterministic(device, recompute):
    n = 2000 if device == "cuda" else 300  # several row blocks, so db is a reduction over partials
    x = torch.randn(n, 40, device=device)
    w = torch.randn(50, 40, device=device, requires_grad=True)
    b = torch.randn(50, device=device, requires_grad=True)
    g = torch.randn(n, 25, device=device)
    runs = []
    for _ in range(3):
        w.grad = b.grad = None
        fusedmlp.geglu(x, w, b, recompute=recompute).backward(g)
        runs.append((w.grad.clone(), b.grad.clone()))
    for dw, db in runs[1:]:
        assert torch.equal(db, runs[0][1])
        assert torch.equal(dw, runs[0][0])


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_saved_for_backward(device, recompute):
    """Bytes kept for the backward, beyond the parameters: x alone in recompute mode, x + h otherwise."""
    n, k, out = 64, 32, 24
    layer = fusedmlp.GEGLU(k, out, recompute=recompute).to(device)
    params = {p.data_ptr() for p in layer.parameters()}
    x = torch.randn(n, k, device=device, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    activations = [t for t in saved if t.data_ptr() not in params]
    saved_bytes = sum(t.numel() * t.element_size() for t in activations)
    expected = x.numel() * x.element_size() + (0 if recompute else n * 2 * out * x.element_size())
    assert saved_bytes == expected
    assert any(t.data_ptr() == x.data_ptr() for t in activations)  # x itself, not a copy
    y.sum().backward()


def test_inference_forward_keeps_no_h(device, monkeypatch):
    """The store mode writes no h where autograd records nothing (helpers.check_inference_forward)."""
    import fusedmlp.ops.glu as glu_ops

    x64, w64, b64, _ = make_inputs((3, 7), 33, 20, torch.float64, device)
    check_inference_forward(
        monkeypatch, glu_ops, "glu_forward_impl", lambda args: args[6],
        lambda grad: fusedmlp.geglu(x64.float(), w64.float().requires_grad_(grad), b64.float(), recompute=False),
        geglu_reference(x64, w64, b64), torch.float32, "geglu")


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_torch_compile_fullgraph(device, recompute):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    backend = "inductor" if device == "cuda" else "aot_eager"  # CPU CI: trace without a C++ build
    layer = fusedmlp.GEGLU(40, 24, recompute=recompute).to(device)

    def step(x):
        return layer(x).square().sum()

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    x = torch.randn(2, 19, 40, device=device, requires_grad=True)
    loss = compiled(x)
    loss.backward()
    grads = (x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone())
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}
    x.grad = layer.weight.grad = layer.bias.grad = None
    eager_loss = step(x)
    eager_loss.backward()
    assert rel_err(loss, eager_loss) < 1e-5
    for got, want in zip(grads, (x.grad, layer.weight.grad, layer.bias.grad)):
        assert rel_err(got, want) < 1e-5
    with torch.no_grad():  # the inference branch traces too (the op without h)
        assert rel_err(compiled(x), eager_loss) < 1e-5
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}


def test_module_loads_linear_state_dict(device):
    linear = torch.nn.Linear(27, 2 * 13).to(device)
    layer = fusedmlp.GEGLU(27, 13).to(device)
    layer.load_state_dict(linear.state_dict())
    assert set(layer.state_dict()) == {"weight", "bias"}
    x = torch.randn(5, 27, device=device)
    h = linear(x).double()
    ref = h[:, :13] * torch.nn.functional.gelu(h[:, 13:], approximate="tanh")
    assert rel_err(layer(x), ref) < TOLERANCE[torch.float32]
    shared = fusedmlp.GEGLU.from_linear(linear)
    assert shared.weight is linear.weight
    assert rel_err(shared(x), ref) < TOLERANCE[torch.float32]
    no_bias = fusedmlp.GEGLU(27, 13, bias=False)
    assert set(no_bias.state_dict()) == {"weight"} and no_bias.bias is None


def _bad(device, **overrides):
    args = {
        "x": torch.randn(4, 8, device=device),
        "weight": torch.randn(12, 8, device=device),
        "bias": torch.randn(12, device=device),
    }
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("x_dtype_mismatch", TypeError, "weight has dtype"),
        ("bias_dtype_mismatch", TypeError, "bias has dtype"),
        ("integer_x", TypeError, "x must be float16"),
        ("integer_weight", TypeError, "weight must be float16"),
        ("not_a_tensor", TypeError, "x must be a torch.Tensor"),
        ("weight_1d", ValueError, "weight must be 2-D"),
        ("bias_2d", ValueError, "bias must be 1-D"),
        ("x_0d", ValueError, "x must have at least 1"),
        ("in_mismatch", ValueError, "weight expects in=8"),
        ("odd_rows", ValueError, "even number of rows"),
        ("bias_length", ValueError, "bias must have 12 elements"),
        ("device_mismatch", ValueError, "move them to one device"),
        ("recompute_not_bool", TypeError, "recompute must be a bool"),
    ],
)
def test_bad_inputs(device, case, exc, match):
    kwargs = {}
    if case == "x_dtype_mismatch":
        args = _bad(device, x=torch.randn(4, 8, device=device, dtype=torch.float16))
    elif case == "bias_dtype_mismatch":
        args = _bad(device, bias=torch.randn(12, device=device, dtype=torch.float64))
    elif case == "integer_x":
        args = _bad(device, x=torch.ones(4, 8, device=device, dtype=torch.int64))
    elif case == "integer_weight":
        args = _bad(device, weight=torch.ones(12, 8, device=device, dtype=torch.int32))
    elif case == "not_a_tensor":
        args = _bad(device, x=[[1.0] * 8])
    elif case == "weight_1d":
        args = _bad(device, weight=torch.randn(96, device=device))
    elif case == "bias_2d":
        args = _bad(device, bias=torch.randn(1, 12, device=device))
    elif case == "x_0d":
        args = _bad(device, x=torch.tensor(1.0, device=device))
    elif case == "in_mismatch":
        args = _bad(device, x=torch.randn(4, 9, device=device))
    elif case == "odd_rows":
        args = _bad(device, weight=torch.randn(11, 8, device=device), bias=torch.randn(11, device=device))
    elif case == "bias_length":
        args = _bad(device, bias=torch.randn(6, device=device))
    elif case == "device_mismatch":
        other = "meta"
        args = _bad(device, weight=torch.randn(12, 8, device=other))
    else:
        args = _bad(device)
        kwargs = {"recompute": "yes"}
    with pytest.raises(exc, match=match):
        fusedmlp.geglu(args["x"], args["weight"], args["bias"], **kwargs)


def test_cpu_without_interpreter_uses_reference():
    """CPU tensors without TRITON_INTERPRET take the PyTorch path, with the same results."""
    code = r"""
import torch, fusedmlp
from fusedmlp.ops._common import use_triton
x = torch.randn(10, 12, dtype=torch.float64, requires_grad=True)
w = torch.randn(14, 12, dtype=torch.float64, requires_grad=True)
b = torch.randn(14, dtype=torch.float64, requires_grad=True)
assert not use_triton(x)
for recompute in (True, False):
    y = fusedmlp.geglu(x, w, b, recompute=recompute)
    grads = torch.autograd.grad(y.square().sum(), (x, w, b))
    ref = fusedmlp.geglu_reference(x, w, b)
    ref_grads = torch.autograd.grad(ref.square().sum(), (x, w, b))
    assert torch.allclose(y, ref, rtol=1e-12, atol=1e-12)
    for a, r in zip(grads, ref_grads):
        assert torch.allclose(a, r, rtol=1e-10, atol=1e-10)
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_dot_precision_follows_torch_setting():
    from fusedmlp.ops._common import dot_precision

    with fp32_matmul_precision("highest"):
        assert dot_precision(torch.float32) == "ieee"
    with fp32_matmul_precision("high"):
        assert dot_precision(torch.float32) == "tf32"
        assert dot_precision(torch.float64) == "ieee"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_tma_kernels(device, monkeypatch, dtype, recompute, bias):
    """The persistent tensor-descriptor kernels: partial row, column and K tiles.

    On a Hopper GPU aligned 16-bit inputs take this path by themselves (asserted): the
    forward in both modes, the backward-dh kernel in recompute mode. On CPU the interpreter
    runs the same kernels when the path is forced.
    """
    import fusedmlp.ops.glu as glu_ops

    if device == "cuda":
        if dtype == torch.float32 or torch.cuda.get_device_capability()[0] < 9:
            pytest.skip("the TMA path is for 16-bit inputs on Hopper")
        monkeypatch.setattr(fusedmlp.ops._common, "PINGPONG", False)  # the Triton forward, not the ping-pong one
    else:
        monkeypatch.setattr(glu_ops, "tma_eligible", lambda *tensors: True)
        monkeypatch.setattr(glu_ops, "num_sms", lambda t: 3)  # fewer programs than tiles
    n, k, out = 77, 72, 40  # 16-byte aligned rows; none a multiple of the tile sizes
    x64, w64, b64, g64 = make_inputs((n,), k, out, dtype, device, bias)
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    if device == "cuda":
        assert glu_ops.tma_eligible(cast(x64), cast(w64)[:out], cast(w64)[out:], cast(g64))
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute, "tma")


def test_pingpong_kernel_compiles_for_hopper():
    """The Gluon ping-pong GLU forward compiles for sm_90a with the installed Triton (GEGLU's
    and SwiGLU's activations, h stored and not; its cooperative forms too), and so do the backward's dh kernels: h
    recomputed on the tile (with a bias and without), and h kept with g formed on the tile (z stored and not), on
    128 x 64 tiles with three consumers taking turns and on 128 x 128 with the epilogue in halves (with silu,
    SwiGLU's, no stack at all: the halves' row halves keep a thread's live values under its registers; gelu_tanh
    without z has 64 bytes on Triton 3.9).

    The recompute dh kernel's epilogue order keeps ptxas's stack small with GEGLU's activation
    (benchmarks/NOTES.md, "Spills in the epilogues": at most 24 bytes with Triton 3.6 and 0 with 3.9, where the
    order before had 72 with a bias and 200 without. With a bias on 3.6 silu has 24 and gelu_tanh 16, but one
    full run of this file on the H200 measured 24 for gelu_tanh too: the bound is 24). The recompute dh
    kernel compiles with every activation a GLU takes: with identity's derivative written as
    ``tl.full`` (no layout in Gluon) it did not compile at all (found by tests/test_fuzz.py). The
    stack bound holds for GEGLU's and SwiGLU's activations; with a bias relu has 48 bytes on
    Triton 3.6 (24 on 3.9) and exact gelu's CDF and density 1048 (576 without a bias, 3.9)."""
    compile_pingpong_for_hopper("glu", "glu_fwd_pingpong_kernel", "GLU_PINGPONG_CONFIG", ["gelu_tanh", "silu"])
    compile_pingpong_for_hopper("glu", "glu_fwd_pingpong_kernel", "GLU_COOPERATIVE_CONFIG", ["gelu_tanh", "silu"])
    compile_pingpong_for_hopper("glu", "glu_fwd_pingpong_kernel", "GLU_WIDE_COOPERATIVE_CONFIG", ["gelu_tanh", "silu"])
    compile_pingpong_for_hopper("glu", "glu_bwd_dh_recompute_pingpong_kernel", "GLU_DH_RECOMPUTE_PINGPONG_CONFIG",
                                ["gelu_tanh", "silu"], max_stack=24)
    compile_pingpong_for_hopper("glu", "glu_bwd_dh_recompute_pingpong_kernel", "GLU_DH_RECOMPUTE_PINGPONG_CONFIG",
                                [a for a in ACTIVATIONS if a not in ("gelu_tanh", "silu")])
    # silu without z, gelu_tanh with it
    compile_pingpong_for_hopper("glu", "glu_bwd_dh_rotating_kernel", "GLU_DH_ROTATING_CONFIG", ["silu", "gelu_tanh"])
    for activations in (["silu", "gelu_tanh"], ["gelu_tanh", "silu"]):  # each with z stored and not
        facts = compile_pingpong_for_hopper("glu", "glu_bwd_dh_wide_pingpong_kernel", "GLU_DH_WIDE_PINGPONG_CONFIG",
                                            activations)
        assert facts["silu/bias"]["stack"] in (None, 0), facts  # SwiGLU's (the kernel takes no bias)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_pingpong_forward_on_gpu(monkeypatch, dtype, recompute):
    """The ping-pong GLU forward (compute capability 9.0), and in the recompute mode the
    ping-pong dh kernel: they run, and output and gradients (db from the dh kernel's
    partials) match float64 in both memory modes (the store mode's h comes from the forward),
    with and without bias; on 3 SMs each program walks several tiles, with partial row,
    column and K tiles."""
    import fusedmlp.ops.glu as glu_ops

    kernels = recording_pingpong_launches(monkeypatch)
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    for shape, bias in [((1000,), True), ((3, 111), False)]:
        x64, w64, b64, g64 = make_inputs(shape, 200, 392, dtype, "cuda", bias)
        check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute,
                                f"ping-pong {shape} bias={bias}")
    assert glu_ops.glu_fwd_pingpong_kernel in kernels, "the forward did not take the ping-pong kernel"
    expected = 2 if recompute else 0
    assert kernels.count(glu_ops.glu_bwd_dh_recompute_pingpong_kernel) == expected, kernels


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_recompute_pingpong_every_activation_on_gpu(monkeypatch, activation):
    """Every gate activation through the recompute mode's ping-pong dh kernel (compute
    capability 9.0, bf16): it compiles and matches float64. Identity did not compile there
    (its derivative was a layout-less ``tl.full``), which only a GEGLU with another gate than
    gelu_tanh reaches on a Hopper GPU."""
    import fusedmlp.ops.glu as glu_ops

    kernels = recording_pingpong_launches(monkeypatch)
    cast = lambda t: None if t is None else t.to(torch.bfloat16)  # noqa: E731
    x64, w64, b64, g64 = make_inputs((300,), 200, 392, torch.bfloat16, "cuda", True)
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), True, f"ping-pong {activation}", activation)
    assert glu_ops.glu_bwd_dh_recompute_pingpong_kernel in kernels, kernels


def test_fastest_form_times_once_per_key(monkeypatch):
    """FastestForm (ops/_common.py), with a stand-in timer: the first call of a key times every
    form and launches the fastest, later calls of the key launch it untimed, a new key is
    timed anew; with autotuning off, a forced form, or a timer that times nothing (no memory
    for its flush), nothing is filed."""
    import fusedmlp.kernels.configs as configs
    from fusedmlp.ops._common import FastestForm

    timings = []
    speeds = {"a": 3.0, "b": 1.0, "c": 2.0}

    def timer(forms):
        timings.append(sorted(forms))
        return {name: speeds[name] for name in forms if name in speeds}

    chooser, launched = FastestForm(timer), []
    launch = lambda name: launched.append(name) or name  # noqa: E731
    monkeypatch.setattr(configs, "AUTOTUNE", False)
    assert chooser.run("k1", ("a", "b", "c"), "a", launch) == "a"
    assert timings == [] and chooser.chosen == {}
    monkeypatch.setattr(configs, "AUTOTUNE", True)
    assert [chooser.run("k1", ("a", "b", "c"), "a", launch) for _ in range(3)] == ["b"] * 3
    assert timings == [["a", "b", "c"]] and chooser.chosen == {"k1": "b"} and chooser.times["k1"] == speeds
    speeds["c"] = 0.5
    assert chooser.run("k2", ("a", "b", "c"), "a", launch) == "c" and len(timings) == 2
    assert chooser.run("k3", ("a",), "a", launch) == "a" and len(timings) == 2  # one form: nothing to time
    with chooser.forcing("a"):
        assert chooser.run("k1", ("a", "b", "c"), "b", launch) == "a"
        assert chooser.run("k4", ("a", "b", "c"), "b", launch) == "a"
    assert "k4" not in chooser.chosen and len(timings) == 2
    speeds.clear()  # a timer that times nothing (no memory for its flush): the rule, unfiled
    assert chooser.run("k5", ("a", "b", "c"), "c", launch) == "c" and "k5" not in chooser.chosen
    assert launched == ["a", "b", "b", "b", "c", "a", "a", "a", "c"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_every_forward_form_on_gpu(monkeypatch, dtype):
    """Each form of the GLU forward on compute capability 9.0 (alternating, cooperative and
    wide cooperative ping-pong, the Triton TMA kernel), forced, in both memory modes (the store mode's h
    comes from the forward): output and gradients match float64; row counts leave the last
    cooperative tile's second half partly or wholly past M (1000 = 3 x 256 + 232 rows; 333);
    on 3 SMs each program walks several tiles. Untimed (autotuning off, as in the suite),
    the rule picks the cooperative form for y alone from K = GLU_COOPERATIVE_MIN_K and the
    alternating one otherwise."""
    import fusedmlp.ops.glu as glu_ops

    recording_pingpong_launches(monkeypatch)
    forms = []
    real_pingpong, real_tma = glu_ops.launch_pingpong, glu_ops._fwd_tma_launcher.launch
    form_of = {id(config): name for name, config in glu_ops.GLU_FORWARD_PINGPONG_FORMS.items()}
    monkeypatch.setattr(glu_ops, "launch_pingpong", lambda kernel, config, *args, **kwargs: (
        forms.append(form_of[id(config)]) if kernel is glu_ops.glu_fwd_pingpong_kernel else None)
        or real_pingpong(kernel, config, *args, **kwargs))
    monkeypatch.setattr(glu_ops._fwd_tma_launcher, "launch",
                        lambda *args, **kwargs: forms.append("tma") or real_tma(*args, **kwargs))
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    for shape, k, bias in [((333,), glu_ops.GLU_COOPERATIVE_MIN_K, True), ((1000,), 200, True), ((3, 111), 200, False)]:
        x64, w64, b64, g64 = make_inputs(shape, k, 392, dtype, "cuda", bias)
        for recompute in (True, False):
            for form in glu_ops.GLU_FORWARD_FORMS:
                forms.clear()
                with glu_ops.glu_forward_form.forcing(form):
                    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute,
                                            f"{form} {shape} K={k} bias={bias}")
                assert forms == [form], (form, forms)
            forms.clear()
            check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute,
                                    f"rule {shape} K={k} bias={bias}")
            long_k = k >= glu_ops.GLU_COOPERATIVE_MIN_K
            assert forms == ["cooperative" if recompute and long_k else "alternating"], forms


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_repeated_steps_replay_call_plans_on_gpu(monkeypatch, recompute):
    """A training loop's steps on the same tensors, new values written into them each step:
    the later steps replay the forward's launch and the dh kernel's (the recompute mode's
    ping-pong kernel, the store mode's stream) from call plans (ops/_common.py ``CallPlans``:
    those kernels are not launched through ``launch_pingpong``, nor the stream through its
    launcher) wherever their tensors lie where an earlier step's did, and every step's output
    and gradients match float64 on that step's values. An input at another address takes the
    usual path again."""
    import fusedmlp.ops.glu as glu_ops

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the call plans hold the ping-pong forward's launch (compute capability 9.0)")
    launched = []
    real_pingpong = glu_ops.launch_pingpong
    names = {glu_ops.glu_fwd_pingpong_kernel: "forward", glu_ops.glu_bwd_dh_recompute_pingpong_kernel: "dh"}
    monkeypatch.setattr(glu_ops, "launch_pingpong", lambda kernel, *args, **kwargs: (
        launched.append(names[kernel]) if kernel in names else None) or real_pingpong(kernel, *args, **kwargs))
    for launcher in glu_ops._stream_launchers.values():
        monkeypatch.setattr(launcher, "launch", lambda *args, real=launcher.launch, **kwargs: (
            launched.append("stream") or real(*args, **kwargs)))
    dtype = torch.bfloat16
    steps = [make_inputs((300,), 256, 192, dtype, "cuda") for _ in range(5)]  # allocated before the steps (9 of them)
    leaves = [t.to(dtype).requires_grad_() for t in steps[0][:3]]
    g = steps[0][3].to(dtype)
    per_step = []
    for step, masters in enumerate(steps + steps[1:]):
        with torch.no_grad():
            for leaf, master in zip(leaves + [g], masters):
                leaf.copy_(master)
                leaf.grad = None
        launched.clear()
        y = fusedmlp.geglu(*leaves, recompute=recompute)
        y.backward(g)
        per_step.append(list(launched))
        # the reference on the CPU: no GPU allocation between the steps but their own
        ref_y, ref_grads = reference_grads(*(t.detach().cpu().double() for t in leaves + [g]))
        assert_close(y.cpu(), ref_y, dtype, f"step {step} y")
        for name, leaf, ref in zip(("dx", "dW", "db"), leaves, ref_grads):
            assert_close(leaf.grad.cpu(), ref, dtype, f"step {step} {name}")
        del y
    assert per_step[0] == ["forward", "dh" if recompute else "stream"], per_step
    # replayed from the second step on wherever the caching allocator handed out the addresses
    # of a step before (it may take a few steps to settle, and alternate between two)
    for kernel in ("forward", "dh" if recompute else "stream"):
        assert sum(kernel not in launches for launches in per_step[1:]) >= 4, (kernel, per_step)
    launched.clear()
    other = leaves[0].detach().clone().requires_grad_()
    fusedmlp.geglu(other, *leaves[1:], recompute=recompute).backward(g)
    assert launched[0] == "forward", launched


@pytest.mark.gpu
def test_forward_form_timed_on_first_call_on_gpu(monkeypatch):
    """Autotuning on: the first GLU forward of a shape key times every form on the
    caller's tensors and files the fastest; its output (and the next call's, one launch)
    match float64; inside a CUDA graph capture a new key takes the rule, untimed, and files
    nothing, and the replayed graph's output matches too."""
    import fusedmlp.kernels.configs as configs
    import fusedmlp.ops.glu as glu_ops
    from fusedmlp.ops._common import FastestForm

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ping-pong forms are for compute capability 9.0")
    monkeypatch.setattr(configs, "AUTOTUNE", True)
    chooser = FastestForm()
    monkeypatch.setattr(glu_ops, "glu_forward_form", chooser)
    x64, w64, b64, _ = make_inputs((1000,), 256, 392, torch.bfloat16, "cuda", True)
    x, w, b = (t.to(torch.bfloat16) for t in (x64, w64, b64))
    ref = geglu_reference(x64, w64, b64)
    for _ in range(2):
        y = fusedmlp.geglu(x, w, b)
        assert_close(y, ref, torch.bfloat16, "timed forward")
    assert len(chooser.chosen) == 1 and len(chooser.times) == 1
    (key, times), = chooser.times.items()
    assert set(times) == set(glu_ops.GLU_FORWARD_FORMS) and all(t > 0 for t in times.values())
    assert chooser.chosen[key] == min(times, key=times.get)

    x64, w64, b64, _ = make_inputs((300,), 128, 200, torch.bfloat16, "cuda", True)
    x, w, b = (t.to(torch.bfloat16) for t in (x64, w64, b64))
    with glu_ops.glu_forward_form.forcing("alternating"):  # compile that form outside the capture
        fusedmlp.geglu(x, w, b)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fusedmlp.geglu(x, w, b)
    graph.replay()
    torch.cuda.synchronize()
    assert len(chooser.chosen) == 1, chooser.chosen
    assert_close(y, geglu_reference(x64, w64, b64), torch.bfloat16, "captured forward")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_backward_in_row_chunks(device, monkeypatch, dtype, recompute):
    """The backward's row chunks (dh one chunk at a time): dx, dW and db against float64."""
    import fusedmlp.ops._common as common

    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)  # chunk however small
    n = 700  # chunks of 256, 256 and 188 rows
    assert len(common.backward_row_chunks(n, 128, 1)) == 3
    x64, w64, b64, g64 = make_inputs((n,), 40, 24, dtype, device)
    cast = lambda t: t.to(dtype)  # noqa: E731
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute, "chunked")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_backward_in_column_chunks(device, monkeypatch, dtype, bias):
    """The recompute backward over column ranges of the output (rows too few to split): each
    chunk's [dh1 | dh2], its dW rows, its share of dx and db, against float64."""
    import fusedmlp.ops._common as common
    import fusedmlp.ops.glu as glu_ops

    n, out = 150, 320
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)
    monkeypatch.setattr(common, "BWD_COLUMN_CHUNK_BYTES", n * 2 * 128 * 2)  # 128-column chunks in bf16
    row_bytes = 2 * out * torch.empty((), dtype=dtype).element_size()
    by_columns, chunks = glu_ops._dh_chunks(n, out, row_bytes, True)
    assert by_columns and chunks[0] == (0, 128) and chunks[-1][1] == out, chunks
    assert not glu_ops._dh_chunks(n, out, row_bytes, False)[0]  # the store mode keeps rows
    x64, w64, b64, g64 = make_inputs((n,), 40, out, dtype, device, bias=bias)
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), True,
                            f"column chunks {chunks}")


def test_recompute_chunk_rules():
    """The recompute mode's two chunks for a dh of 64-256 MiB and its row chunks of at most 512 MiB
    (bf16 rows of 2 * out values), at the sizes the rules were measured for; the store mode and
    the other sizes keep the shared rule."""
    import fusedmlp.ops.glu as glu_ops

    def chunks(d, n, recompute=True):
        return glu_ops._dh_chunks(n, 4 * d, 2 * 4 * d * 2, recompute)

    assert chunks(1024, 8192) == (False, [(0, 4096), (4096, 8192)])  # 128 MiB: rows
    assert chunks(2048, 4096) == (True, [(0, 4096), (4096, 8192)])  # 128 MiB, too few rows: columns
    assert chunks(1024, 8192 + 200) == (False, [(0, 4224), (4224, 8392)])  # whole 128-row blocks
    assert chunks(1024, 16384) == (False, [(0, 8192), (8192, 16384)])  # 256 MiB, the upper end
    assert chunks(2048, 8192) == (False, [(0, 4096), (4096, 8192)])
    assert chunks(1024, 4096) == (False, [(0, 4096)])  # 64 MiB: whole
    assert chunks(1024, 8192, recompute=False) == (False, [(0, 8192)])
    assert len(chunks(1024, 32768)[1]) == 4  # above 256 MiB: the shared rule's four row chunks
    assert chunks(2048, 16384)[0] is False and len(chunks(2048, 16384)[1]) == 4
    # row chunks of at most 512 MiB where 4096-row chunks allow it: 8 x 512 MiB at 8192 x 32768
    assert chunks(8192, 32768) == (False, [(start, start + 4096) for start in range(0, 32768, 4096)])
    assert len(chunks(8192, 65536)[1]) == 16 and len(chunks(4096, 65536)[1]) == 8
    assert len(chunks(8192, 16384)[1]) == 4  # 512 MiB chunks of 4096 rows already
    assert len(chunks(8192, 32768, recompute=False)[1]) == 4  # the store mode: the shared rule


def test_backward_in_more_than_four_row_chunks(device, monkeypatch):
    """The recompute mode's row chunks beyond the shared rule's four (``GLU_RECOMPUTE_MAX_CHUNK_BYTES``):
    dW and db accumulated over six chunks, dx row by row, against float64."""
    import fusedmlp.ops._common as common
    import fusedmlp.ops.glu as glu_ops

    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)
    monkeypatch.setattr(common, "GLU_RECOMPUTE_MAX_CHUNK_BYTES", 1)  # chunks of the least rows
    n, out = 700, 24  # chunks of 128 rows, the last of 60
    by_columns, chunks = glu_ops._dh_chunks(n, out, 2 * out * 2, True)
    assert not by_columns and len(chunks) == 6 and chunks[-1] == (640, 700), chunks
    assert len(glu_ops._dh_chunks(n, out, 2 * out * 2, False)[1]) == 3  # the store mode: the shared rule
    x64, w64, b64, g64 = make_inputs((n,), 40, out, torch.bfloat16, device)
    cast = lambda t: t.to(torch.bfloat16)  # noqa: E731
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), True, f"row chunks {chunks}")


@pytest.mark.parametrize("by", ["rows", "columns"])
def test_backward_in_recompute_halves(device, monkeypatch, by):
    """The recompute mode's halves of dh (rows, or columns where the rows are too few):
    dx, dW and db against float64."""
    import fusedmlp.ops._common as common
    import fusedmlp.ops.glu as glu_ops

    n, out = (300, 40) if by == "rows" else (200, 320)
    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "GLU_RECOMPUTE_HALVES_BYTES", 0)  # halve however small
    row_bytes = 2 * out * 2
    by_columns, chunks = glu_ops._dh_chunks(n, out, row_bytes, True)
    assert by_columns == (by == "columns") and len(chunks) == 2, chunks
    x64, w64, b64, g64 = make_inputs((n,), 40, out, torch.bfloat16, device)
    cast = lambda t: t.to(torch.bfloat16)  # noqa: E731
    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), True, f"halves {chunks}")


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(GLU_TMA_CONFIGS)))
def test_every_tma_config_on_gpu(monkeypatch, index):
    """Every tile config of the persistent forward, not only the one the tuner picks (they
    differ in tile shape, pipeline depth and tile order): several tiles per program, partial
    row and column tiles, both memory modes."""
    import fusedmlp.ops.glu as glu_ops

    with forcing_tma_config(monkeypatch, glu_ops, glu_ops._fwd_tma_launcher, index):
        for recompute in (True, False):
            x64, w64, b64, g64 = make_inputs((1000,), 200, 600, torch.bfloat16, "cuda")
            cast = lambda t: t.to(torch.bfloat16)  # noqa: E731
            check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute,
                                    f"config {index}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_ieee_gemms_run_on_cublas(dtype, monkeypatch):
    """fp32 at "highest" and fp64 (IEEE products, which Triton runs on CUDA cores) take the
    GLU's products from cuBLAS, forward and both memory modes' backward (h recomputed there
    too), no Triton GEMM kernel launched: activations, with and without a bias, against float64."""
    import fusedmlp.ops.glu as glu_ops

    launched = recording_launches(monkeypatch, (glu_ops._fwd_launcher, glu_ops._fwd_tma_launcher,
                                                glu_ops._bwd_launcher, glu_ops._bwd_tma_launcher))
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    with fp32_matmul_precision("highest"):
        for activation in ("gelu_tanh", "silu", "identity"):
            for bias in (True, False):
                for recompute in (True, False):
                    x64, w64, b64, g64 = make_inputs((300,), 200, 96, dtype, "cuda", bias)
                    check_against_reference(cast(x64), cast(w64), cast(b64), cast(g64), recompute,
                                            f"bias={bias}", activation)
    assert not launched


def test_joined_halves():
    """The cuBLAS path's one product over GEGLU's two weight halves: a view over both only where
    both are views of one tensor and the second's rows follow the first's in memory with the
    same strides; never over two tensors that merely lie back to back."""
    from fusedmlp.ops.glu import _joined

    for packed in (torch.randn(10, 7), torch.randn(7, 10).t(), torch.randn(10, 16)[:, :7], torch.randn(10)):
        joined = _joined(packed[:4], packed[4:])
        assert joined is not None and torch.equal(joined, packed)
    w = torch.randn(10, 7)
    assert _joined(w[:4], w[5:]) is None  # a row between
    assert _joined(w[4:], w[:4]) is None  # the wrong order
    assert _joined(torch.randn(4, 7), torch.randn(6, 7)) is None  # two tensors
    assert _joined(w[:4, :6], w[4:, 1:]) is None  # the second does not start where the first ends
    rows = w.numpy()  # two tensors of their own, back to back in memory
    first, second = torch.from_numpy(rows[:4]), torch.from_numpy(rows[4:])
    assert second.data_ptr() == first.data_ptr() + first.nbytes
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()
    assert _joined(first, second) is None


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(max(len(GLU_FP32_CONFIGS), len(GLU_BWD_FP32_CONFIGS))))
def test_every_tf32_config_on_gpu(index):
    """fp32 at "high" keeps the Triton kernels, on TF32 tensor cores, with the fp32 tables (the
    16-bit tiles half as deep in K: the first 16-bit ones overflow shared memory in fp32, and
    the first runs untuned): each forward and recompute-dh config forced, both memory modes,
    against float64 within 5e-3 (10 mantissa bits a product), partial tiles."""
    import fusedmlp.ops.glu as glu_ops

    fwd, bwd = glu_ops._fwd_launcher, glu_ops._bwd_launcher
    with fp32_matmul_precision("high"), fwd.forcing(fwd.fp32_configs[min(index, len(fwd.fp32_configs) - 1)]), \
            bwd.forcing(bwd.fp32_configs[min(index, len(bwd.fp32_configs) - 1)]):
        for recompute in (True, False):
            x64, w64, b64, g64 = make_inputs((1000,), 200, 600, torch.float32, "cuda")
            leaves = [t.float().requires_grad_() for t in (x64, w64, b64)]
            y = fusedmlp.geglu(*leaves, recompute=recompute)
            y.backward(g64.float())
            ref_y, ref_grads = reference_grads(x64, w64, b64, g64)
            for name, out, ref in zip(("y", "dx", "dW", "db"), (y, *(t.grad for t in leaves)), (ref_y, *ref_grads)):
                assert rel_err(out, ref) < 5e-3, (index, recompute, name, rel_err(out, ref))


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_backward_twice(device, recompute):
    """retain_graph=True: the recompute mode differentiates again to the same gradients; the
    store mode, whose backward wrote its gradients over the saved h, refuses clearly."""
    x64, w64, b64, g64 = make_inputs((33,), 40, 24, torch.float32, device)
    leaves = [t.float().requires_grad_() for t in (x64, w64, b64)]
    check_backward_twice(fusedmlp.geglu(*leaves, recompute=recompute), leaves, g64.float(), refuses=not recompute)


@pytest.mark.gpu
def test_store_backward_allocates_no_dh():
    """The store mode's backward writes dh over the saved h: its peak is the gradients, no dh."""
    n, k, out = 8192, 1024, 2048
    x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(2 * out, k, device="cuda") / k**0.5).to(torch.bfloat16).requires_grad_()
    g = torch.randn(n, out, device="cuda", dtype=torch.bfloat16)
    peak, (dx, dw) = backward_peak_bytes(lambda: fusedmlp.geglu(x, w, recompute=False), (x, w), g)
    grads, dh = (dx.numel() + dw.numel()) * 2, n * 2 * out * 2
    assert peak < grads + dh // 4, (peak, grads, dh)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_store_stream_config_follows_in_place(device, monkeypatch, bias):
    """The store mode's stream takes the launcher (one config) of its case, (bias, dh written
    over h): in place for the eager store backward, out of place where dh is a new tensor (as
    in the traced backward's op). configs.py: on GPUs the fastest config out of place ran up to
    1.7x slower in place. Both results against float64."""
    from fusedmlp.ops import glu as glu_ops

    launched = []

    class Spy:
        def __init__(self, case, launcher):
            self.case, self.launcher = case, launcher

        def launch(self, *args, **kwargs):
            launched.append(self.case)
            return self.launcher.launch(*args, **kwargs)

    for case, launcher in list(glu_ops._stream_launchers.items()):
        monkeypatch.setitem(glu_ops._stream_launchers, case, Spy(case, launcher))
    x64, w64, b64, g64 = make_inputs((40,), 32, 24, torch.float32, device, bias=bias)
    x, w, b, g = (t.float() if t is not None else None for t in (x64, w64, b64, g64))
    check_against_reference(x, w, b, g, recompute=False)
    assert launched == [(bias, True)]
    out = w.shape[0] // 2
    h = torch.nn.functional.linear(x, w, b)  # [x1 | x2]
    dh, _, _ = glu_ops.glu_backward_dh_impl(g, x, w[:out], w[out:], *((b[:out], b[out:]) if bias else (None, None)),
                                            h, "gelu_tanh")
    assert launched == [(bias, True), (bias, False)] and dh.data_ptr() != h.data_ptr()
    h64 = h.double().requires_grad_()
    (h64[:, :out] * torch.nn.functional.gelu(h64[:, out:], approximate="tanh")).backward(g.double())
    assert_close(dh, h64.grad, torch.float32, "dh out of place")


@pytest.mark.parametrize("mode", ["recompute", "recompute_g_gemm", "store", "store_g_gemm", "in_place",
                                  "in_place_g_gemm"])
def test_backward_dh_x2_first_swaps_the_halves(device, mode):
    """``glu_backward_dh_impl(..., x2_first=True)`` writes dh's halves swapped, [dh2 | dh1] (the
    packed SwiGLU weight's [gate | up] order): the same bits as the default order's halves, in
    every path (on a Hopper GPU in bf16: the ping-pong and tensor-descriptor kernels; on CPU the
    pointer kernels), with db ([db1 | db2]) and z unchanged; in place, over h."""
    from fusedmlp.ops import glu as glu_ops

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g_gemm, store, in_place = mode.endswith("g_gemm"), not mode.startswith("recompute"), mode.startswith("in_place")
    n, k, kg, out = 200, 48, 64, 96
    x = torch.randn(n, k, device=device, dtype=dtype)
    w1, w2 = ((torch.randn(out, k, device=device) / k**0.5).to(dtype) for _ in range(2))
    b1, b2 = (None, None) if g_gemm else (torch.randn(out, device=device, dtype=dtype) for _ in range(2))
    wd = (torch.randn(kg, out, device=device) / kg**0.5).to(dtype) if g_gemm else None
    g = torch.randn(n, kg if g_gemm else out, device=device, dtype=dtype)
    h = torch.cat([torch.nn.functional.linear(x, w, b) for w, b in ((w1, b1), (w2, b2))], dim=1) if store else None

    def run(x2_first):
        h_in = h.clone() if store else None  # in place, dh is written over it
        extra = dict(in_place=True, z_out=torch.empty(n, out, device=device, dtype=dtype) if g_gemm else None,
                     ) if in_place else {}
        dh, db, z = glu_ops.glu_backward_dh_impl(g.clone(), x, w1, w2, b1, b2, h_in, "silu", wd, store_z=g_gemm,
                                                 x2_first=x2_first, **extra)
        if in_place:
            assert dh.data_ptr() == h_in.data_ptr()
        return dh, db, z

    dh, db, z = run(False)
    dh_swapped, db_swapped, z_swapped = run(True)
    assert torch.equal(dh_swapped, torch.cat([dh[:, out:], dh[:, :out]], dim=1))
    assert torch.equal(db_swapped, db) and torch.equal(z_swapped, z)
    assert dh.abs().sum() > 0 and (not g_gemm or z.abs().sum() > 0)


@pytest.mark.gpu
def test_first_store_backward_with_autotuning():
    """With autotuning on, the first store-mode backward of a shape is right: the stream that
    writes dh over h is not timed on the caller's tensors before it runs (it gave NaNs when it was)."""
    errors = first_store_backward_errors(
        "fusedmlp.geglu(a['x'], a['w'], a['b'], recompute=False)", "geglu_reference(a['x'], a['w'], a['b'])",
        {"x": (1000, 256), "w": (1024, 256), "b": (1024,), "g": (1000, 512)},
    )
    for name, err in errors.items():
        assert err < TOLERANCE[torch.bfloat16], (name, err)


@pytest.mark.parametrize("by", ["rows", "columns"])
def test_torch_compile_with_chunks(device, monkeypatch, by):
    import fusedmlp.ops._common as common

    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)  # chunk however small
    monkeypatch.setattr(common, "BWD_COLUMN_CHUNK_BYTES", 1)  # 128-column chunks
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    # 300 rows > 2 x 128 split by rows; 200 rows < 4 x 128 with 288 outputs split by columns
    x = torch.randn(300 if by == "rows" else 200, 32, device=device, requires_grad=True)
    w = torch.randn(48 if by == "rows" else 576, 32, device=device, requires_grad=True)
    import fusedmlp.ops.glu as glu_ops

    out = w.shape[0] // 2
    assert glu_ops._dh_chunks(x.shape[0], out, 2 * out * 4, True)[0] == (by == "columns")

    def step(x, w):
        return fusedmlp.geglu(x, w).square().sum()

    loss = torch.compile(step, fullgraph=True, backend=backend)(x, w)
    grads = torch.autograd.grad(loss, (x, w))
    eager = torch.autograd.grad(step(x, w), (x, w))
    for got, want in zip(grads, eager):
        assert rel_err(got, want) < 1e-5
