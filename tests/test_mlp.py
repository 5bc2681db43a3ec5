"""Whole-MLP kernel: output, dx and every layer's dW and db against a float64 reference."""

import pytest
import torch
from helpers import (
    TOLERANCE, assert_close, check_inference_forward, eager_bound, fp32_matmul_precision, kink_free_rows,
    recording_launches, rel_err,
)
from torch import nn

import fusedmlp
import fusedmlp.ops.mlp as mlp_ops
from fusedmlp.ops.activations import ACTIVATIONS

DLRM_BOTTOM = [13, 512, 256, 64, 16]
DLRM_TOP = [367, 512, 256, 1]


def make_stack(sizes, device, bias=True, batch=(37,)):
    """float64 masters: x, weights, biases (None entries where ``bias`` is False) and g."""
    bias = [bias] * (len(sizes) - 1) if isinstance(bias, bool) else bias
    x = torch.randn(*batch, sizes[0], dtype=torch.float64, device=device)
    weights = [torch.randn(o, i, dtype=torch.float64, device=device) / i**0.5 for i, o in zip(sizes, sizes[1:])]
    biases = [torch.randn(o, dtype=torch.float64, device=device) * 0.5 if has else None
              for o, has in zip(sizes[1:], bias)]
    g = torch.randn(*batch, sizes[-1], dtype=torch.float64, device=device)
    return x, weights, biases, g


def forward_and_grads(fn, x, weights, biases, g, dtype, wants):
    """fn's output and the gradients of the tensors flagged in ``wants`` (x, then each layer's W, b)."""
    leaves = [x] + [t for pair in zip(weights, biases) for t in pair]
    leaves = [None if t is None else t.detach().to(dtype).requires_grad_(want) for t, want in zip(leaves, wants)]
    y = fn(leaves[0], leaves[1::2], leaves[2::2])
    wrt = [t for t in leaves if t is not None and t.requires_grad]
    grads = torch.autograd.grad(y, wrt, g.to(dtype)) if wrt else []
    return y, list(grads)


def check_stack(sizes, device, dtype, activation="relu", last_activation=None, bias=True, recompute=False,
                batch=(37,), wants=None, x_transform=None, g_offset=0.0, fp32_bound=None, tf32=False):
    """The fused stack against float64 on the same (rounded) inputs. 16-bit stacks round every
    layer's activation, and the error grows with depth: the bound is the larger of the dtype's
    tolerance and twice eager PyTorch's own error in that dtype. ``fp32_bound`` (GPU fp32) also
    leaves the rows with a ReLU pre-activation at the kink (``kink_free_rows``) out of the batch.
    ``tf32`` (GPU fp32 under ``set_float32_matmul_precision("high")``, which the caller sets):
    the products keep 10 mantissa bits of each operand, fp16's, so the bound is fp16's
    tolerance or five times eager's own error, the larger, and no row is left out: TF32 moves
    the kink a thousand times farther than fp32, and the relu derivatives it flips put dx
    2-4e-2 off float64 on the DLRM stacks, in eager's products too.
    Triton's dot truncates those operands where cuBLAS rounds them to nearest: on an H100 one
    GEMM's error was 2.6x cuBLAS's (7.7e-4 against 2.9e-4 at K = 64-4096, each the error of
    exact products of the truncated or the rounded operands), and the stacks tested here were
    1.0e-3 to 2.5e-3 off float64 but for dx. Eager's own error alone is no yardstick: on some
    of these tensors it was 2e-4 or less, below one TF32 GEMM's.
    """
    x, weights, biases, g = make_stack(sizes, device, bias, batch)
    g = g + g_offset
    if dtype == torch.float32 and fp32_bound is not None and not tf32:
        kept = kink_free_rows(x.to(dtype).double(), [w.to(dtype).double() for w in weights],
                              [None if b is None else b.to(dtype).double() for b in biases], activation,
                              last_activation, x_transform)
        x, g = x[kept], g[kept]
    n_leaves = 1 + 2 * len(weights)
    wants = wants or [True] * n_leaves
    wants = [w and t is not None for w, t in zip(wants, [x] + [t for p in zip(weights, biases) for t in p])]
    rounded = lambda ts: [None if t is None else t.to(dtype).double() for t in ts]  # noqa: E731

    def fused(x, ws, bs):
        x = x_transform(x) if x_transform else x
        return fusedmlp.mlp(x, ws, bs, activation, last_activation, recompute=recompute)

    def reference(x, ws, bs):
        x = x_transform(x) if x_transform else x
        return fusedmlp.mlp_reference(x, ws, bs, activation, last_activation)

    y, grads = forward_and_grads(fused, x, weights, biases, g, dtype, wants)
    y64, grads64 = forward_and_grads(reference, rounded([x])[0], rounded(weights), rounded(biases), g, torch.float64,
                                     wants)
    eager, eager_grads = forward_and_grads(reference, x, weights, biases, g, dtype, wants)
    assert y.dtype == dtype and y.shape == y64.shape
    names = ["y"] + [n for n, w in zip(["x"] + [f"{k}{i}" for i in range(len(weights)) for k in "Wb"], wants) if w]
    for name, got, want, base in zip(names, [y] + grads, [y64] + grads64, [eager] + eager_grads):
        assert got.dtype == dtype and got.shape == want.shape, name
        bound = eager_bound(dtype, base, want)
        if dtype == torch.float32 and fp32_bound is not None:
            bound = max(TOLERANCE[torch.float16], 5 * rel_err(base, want)) if tf32 else fp32_bound
        err = rel_err(got, want)
        assert err < bound, f"{sizes} {activation}/{last_activation} {dtype} {name}: {err:.3e} >= {bound:.2e}"


@pytest.fixture(autouse=True)
def whole_stack_kernel(monkeypatch):
    """This file checks the whole-stack kernel. On a GPU, fp32 at PyTorch's default "highest"
    precision and fp64 would run layer by layer with cuBLAS GEMMs (``gemms_on_cublas``), so
    the kernel is kept there, with its IEEE products: its paths do not depend on the products'
    precision, and fp32's tight bound is what shows a wrong index. test_dlrm_mlps_on_gpu checks
    the routing itself, and the kernel on TF32 tensor cores."""
    monkeypatch.setattr(mlp_ops, "gemms_on_cublas", lambda t: False)


@pytest.fixture
def small_on_chip(monkeypatch):
    """Layers wider than 32 are streamed: every role at interpreter-friendly widths."""
    monkeypatch.setattr(mlp_ops, "FULL_MAX", 32)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation(device, activation, small_on_chip):
    check_stack([13, 80, 24, 16], device, torch.float32, activation, last_activation=activation)


@pytest.mark.parametrize("ahead", [True, False], ids=["ahead", "in_turn"])
@pytest.mark.parametrize("sizes", [[13, 80, 24, 16], [20, 16, 80, 24, 1]], ids=["from_x", "from_h"])
def test_streamed_loads_ahead_or_in_turn(device, sizes, ahead, small_on_chip, monkeypatch):
    """A streamed layer whose input is one narrow tile (x in one K step, or h) loads its next
    chunk's weight tile and bias ahead (when training, or up to LOADS_AHEAD_MAX_ROWS rows), in
    turn otherwise: both forms, whatever the batch and mode here."""
    monkeypatch.setattr(mlp_ops, "_loads_ahead", lambda m, modes: ahead)
    assert "streamed" in mlp_ops.mlp_plan(tuple(sizes), ("relu",) * (len(sizes) - 1), (True,) * (len(sizes) - 1),
                                          32).roles
    check_stack(sizes, device, torch.bfloat16, "relu", "sigmoid", g_offset=1.0)
    # g with a mean, as elsewhere in this file: with [20, 16, 80, 24, 1] the last db is one sum
    # over 70 rows, and with a zero-mean g its cancellation once put it 2.007e-05 off float64 in
    # CI (bound 2e-05; over 300 draws on the interpreter its worst was 4.0e-06 without the
    # offset and 1.8e-07 with it)
    check_stack(sizes, device, torch.float32, "gelu", "relu", bias=[True, False] + [True] * (len(sizes) - 3),
                batch=(70,), g_offset=1.0)
    x, weights, biases, _ = make_stack(sizes, device, True, (50,))
    with torch.no_grad():  # the inference forward: nothing saved
        y = fusedmlp.mlp(x.float(), [w.float() for w in weights], [b.float() for b in biases], "relu", "sigmoid")
    want = fusedmlp.mlp_reference(x, weights, biases, "relu", "sigmoid")
    assert rel_err(y, want) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "sizes,roles",
    [
        ([13, 20, 10, 5, 3, 1], ("full",) * 5),                                     # depth 5, odd widths
        ([13, 80, 24, 40, 16], ("streamed", "consumer", "streamed", "consumer")),    # bottom-MLP pattern
        ([70, 80, 24, 1], ("streamed", "consumer", "full")),                         # top-MLP: wide input
        ([70, 20, 50], ("full", "streamed_out")),                                    # wide last layer
        ([33, 50], ("streamed_out",)),                                               # depth 1
    ],
    ids=["depth5", "bottom-like", "top-like", "wide-last", "depth1"],
)
def test_roles_and_dtypes(device, dtype, sizes, roles, small_on_chip):
    """(g has a mean: with a zero-mean g the last layers' dW and db are sums over 37 rows that
    cancel, and their relative error in 16 bits is rounding noise magnified by the cancellation.
    Measured on the interpreter, depth 5: 11 of 600 fp16/bf16 draws then exceeded the bound,
    against none of 600 with the offset.)"""
    plan = mlp_ops.mlp_plan(tuple(sizes), ("relu",) * (len(sizes) - 2) + ("sigmoid",), (True,) * (len(sizes) - 1), 32)
    assert plan.roles == roles
    check_stack(sizes, device, dtype, "gelu" if dtype == torch.float64 else "relu", "sigmoid", g_offset=1.0)


@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
def test_weight_tiles_past_shared_memory_are_streamed(device, recompute):
    """A layer whose whole weight tile would not fit in shared memory (256 x 256 in fp32:
    256 KiB, Hopper has 227 KiB a block) is streamed into the next one (FULL_TILE_BYTES); in
    16 bits the same widths stay whole. Found by tests/test_fuzz.py on an H100: this stack in
    fp32 did not launch (OutOfResources, 328704 bytes of shared memory asked)."""
    sizes = (113, 217, 168, 8, 16)
    plan = lambda widths, itemsize: mlp_ops.mlp_plan(widths, ("sigmoid",) * (len(widths) - 1),  # noqa: E731
                                                     (True,) * (len(widths) - 1), mlp_ops.FULL_MAX, itemsize)
    assert plan(sizes, 2).roles == ("full",) * 4
    assert plan(sizes, 4).roles == ("full", "streamed", "consumer", "full")
    # layer 0's tile counts where the dgrad walk forms dx from it whole (an input of at most FULL_MAX)
    assert plan((256, 256, 16), 4).roles == ("streamed", "consumer")
    assert plan((300, 256, 16), 4).roles == ("full", "full")
    check_stack(list(sizes), device, torch.float32, "sigmoid", "sigmoid", recompute=recompute, batch=(7,))


@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
@pytest.mark.parametrize("activation", ["relu", "silu"])
def test_recompute_and_saved_tensors(device, recompute, activation, small_on_chip):
    check_stack([13, 80, 24, 16], device, torch.float32, activation, "gelu_tanh", recompute=recompute)
    x, weights, biases, _ = make_stack([13, 80, 24, 16], device)
    x.requires_grad_(True)
    y = fusedmlp.mlp(x, weights, biases, activation, "gelu_tanh", recompute=recompute)
    inputs_and_output = {x.data_ptr(), y.data_ptr()}
    saved = [t for t in y.grad_fn.saved_tensors if t is not None and t.dim() == 2 and t.shape[0] == x.shape[0]]
    widths = sorted(t.shape[1] for t in saved if t.data_ptr() not in inputs_and_output)
    # relu: hidden outputs only (the last layer's gelu_tanh needs its pre-activation);
    # silu: pre-activations; recompute: nothing but x (and y, the output itself)
    assert widths == ([] if recompute else [16, 24, 80])


@pytest.mark.parametrize("bias", [False, [True, False, True]], ids=["nobias", "mixed"])
def test_biases(device, bias, small_on_chip):
    check_stack([21, 40, 18, 9], device, torch.float32, "silu", None, bias=bias)


@pytest.mark.parametrize(
    "wants", [[False, True, True, True, True], [True, False, False, True, True], [True, True, False, False, True]],
    ids=["no-dx", "frozen-first", "mixed"],
)
def test_partial_gradients(device, wants, small_on_chip):
    check_stack([13, 80, 16], device, torch.float32, "relu", None, wants=wants)


def test_parameter_lists_are_taken(device):
    """Weights and biases as nn.ParameterList (a module's own lists): the same as plain lists."""
    torch.manual_seed(5)
    weights = nn.ParameterList([nn.Parameter(torch.randn(16, 6, device=device, dtype=torch.float64) / 3),
                                nn.Parameter(torch.randn(3, 16, device=device, dtype=torch.float64) / 4)])
    biases = nn.ParameterList([nn.Parameter(torch.randn(16, device=device, dtype=torch.float64)),
                               nn.Parameter(torch.randn(3, device=device, dtype=torch.float64))])
    x = torch.randn(5, 6, device=device, dtype=torch.float64)
    y = fusedmlp.mlp(x, weights, biases, "relu")
    assert_close(y, fusedmlp.mlp_reference(x, list(weights), list(biases), "relu", None), torch.float64, "y")
    y.sum().backward()
    assert all(p.grad is not None for p in (*weights, *biases))


def test_3d_strided_and_tiny_batches(device, small_on_chip):
    check_stack([24, 40, 10], device, torch.float32, "gelu", None, batch=(3, 7))
    check_stack([24, 40, 10], device, torch.float32, "gelu", None, batch=(1,))
    check_stack([24, 40, 10], device, torch.float32, "gelu", None, batch=(30,),  # a [30, 24] view, strides (48, 2)
                x_transform=lambda x: torch.cat([x, x.flip(1)], 1)[:, ::2])


def test_wgrad_row_slices(device, monkeypatch, small_on_chip):
    """Large batches sum the weight gradients over row slices, reduced in a fixed order."""
    monkeypatch.setattr(mlp_ops, "WGRAD_MIN_SLICE_ROWS", 32)
    check_stack([13, 80, 24, 16], device, torch.float32, "relu", None, batch=(150,))
    x, weights, biases, g = make_stack([13, 80, 24, 16], device, batch=(150,))
    for t in weights + biases:
        t.requires_grad_(True)
    runs = [torch.autograd.grad(fusedmlp.mlp(x.float(), [w.float() for w in weights], [b.float() for b in biases]),
                                weights + biases, g.float()) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs)), "weight gradients differ between runs"


def _nan_padded_rows(x):
    """x copied into rows with aligned padding that holds NaN (DLRM's interaction output)."""
    from fusedmlp.ops._common import aligned_rows_empty

    rows = aligned_rows_empty(x, x.shape[0], x.shape[1])
    rows._base.fill_(float("nan"))
    return rows.copy_(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_misaligned_products_use_padded_rows_in_place(device, dtype):
    """The cuBLAS products of a 367-wide input (DLRM's top MLP): b and out are used in place
    when their rows have aligned padding (whatever it holds: NaN here), and copied otherwise."""
    from fusedmlp.ops._common import aligned_rows_empty, widened

    a = torch.randn(40, 24, dtype=torch.float64, device=device)
    b64 = torch.randn(24, 367, dtype=torch.float64, device=device)
    tol = TOLERANCE[dtype] * 4
    padded_b = _nan_padded_rows(b64.to(dtype))
    assert padded_b.stride(0) % (16 // padded_b.element_size()) == 0 and padded_b.stride(0) > 367
    for b in (b64.to(dtype), padded_b):
        for out in (torch.full((40, 367), float("nan"), dtype=dtype, device=device),
                    aligned_rows_empty(padded_b, 40, 367)):
            before = out.data_ptr()
            mlp_ops._mm_into(a.to(dtype), b, out)
            assert out.data_ptr() == before
            assert rel_err(out, a.to(dtype).double() @ b.double()) < tol
    assert widened(padded_b, padded_b.stride(0)).data_ptr() == padded_b.data_ptr()
    assert widened(b64, 368) is None, "contiguous rows have no padding"
    assert widened(padded_b[:, 1:], padded_b.stride(0)) is None, "the last row's padding would pass the storage"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_unaligned_wide_input_aligned_rows(device, dtype, small_on_chip, monkeypatch):
    """A 70-wide input reaches the forward kernel copied into zero-padded 72-wide rows (16
    bytes), W_0 with zero columns to match, whatever x's layout (contiguous, padded rows
    holding NaN, column-major). Inputs narrower than ALIGN_MIN_WIDTH are left as they are.
    The weight-gradient kernel reads those rows 72 wide (its loads of x whole vectors; the
    padding, NaN included, reaches only columns of dW_0 that are not stored), and an input
    whose rows have no room 70 wide."""
    wgrad_x_cols = []
    real_launch = mlp_ops.launch
    monkeypatch.setattr(mlp_ops, "launch", lambda kernel, *a, **k: (
        wgrad_x_cols.append(k["X_COLS"]) if kernel is mlp_ops.mlp_wgrad_kernel else None) or real_launch(kernel, *a, **k))
    w0 = torch.randn(80, 70, device=device).to(dtype)
    x = torch.randn(37, 70, device=device).to(dtype)
    for layout in (x, _nan_padded_rows(x), x.t().contiguous().t()):
        x_wide, w_wide = mlp_ops._aligned_first_layer(layout, w0)
        assert x_wide.shape == (37, 72) and x_wide.is_contiguous() and w_wide.shape == (80, 72)
        assert torch.equal(x_wide[:, :70], x) and torch.count_nonzero(x_wide[:, 70:]) == 0
        assert torch.equal(w_wide[:, :70], w0) and torch.count_nonzero(w_wide[:, 70:]) == 0
    narrow, x_narrow = w0[:, :13], x[:, :13]
    assert mlp_ops._aligned_first_layer(x_narrow, narrow) == (x_narrow, narrow)
    width = 72  # whole 16-byte units: 9 of 8 bf16 elements, 18 of 4 fp32 ones
    for x_transform in (_nan_padded_rows, None, lambda t: t.t().contiguous().t()):
        wgrad_x_cols.clear()
        check_stack([70, 80, 24, 1], device, dtype, "relu", "sigmoid", g_offset=1.0, x_transform=x_transform)
        assert wgrad_x_cols and set(wgrad_x_cols) == {width}, wgrad_x_cols
    wgrad_x_cols.clear()
    check_stack([70, 80, 24, 1], device, dtype, "relu", "sigmoid", g_offset=1.0, recompute=True)
    assert wgrad_x_cols and set(wgrad_x_cols) == {width}, wgrad_x_cols
    wgrad_x_cols.clear()
    check_stack([13, 40, 8], device, dtype, "relu", None)  # a narrow input is not copied: no room
    assert wgrad_x_cols and set(wgrad_x_cols) == {13}, wgrad_x_cols


def record_padding_launches(monkeypatch) -> list:
    """Each launch that copies into zero-padded rows, recorded as the shapes it copies."""
    calls = []
    original = mlp_ops._zero_padded_rows

    def recording(width, *tensors):
        calls.append(tuple(tuple(t.shape) for t in tensors))
        return original(width, *tensors)

    monkeypatch.setattr(mlp_ops, "_zero_padded_rows", recording)
    return calls


@pytest.mark.parametrize("recompute", [False, True])
def test_backward_reuses_the_forwards_padded_copies(device, small_on_chip, monkeypatch, recompute):
    """A training forward keeps its zero-padded copies of x and W_0 for the backward, which
    pads nothing again (its products read the copies in place) and keeps no reference to x
    itself: a caller that drops x frees it. recompute=True keeps x alone and pads again."""
    import weakref

    x64, weights64, biases64, g64 = make_stack([70, 80, 24, 1], device)
    # a positive upstream gradient: the 1-wide last layer's bias gradient is a sum over the 37
    # rows, which a signed g can cancel far below its terms (a CI run saw 5.5e-5 in fp32: no bug)
    g64 = g64.abs()
    dtype = torch.float32
    leaves64 = [t.to(dtype).double().requires_grad_() for t in weights64 + biases64]
    ref = mlp_ops.mlp_reference(x64.to(dtype).double(), leaves64[:3], leaves64[3:], "relu", "sigmoid")
    ref_grads = torch.autograd.grad(ref, leaves64, g64)
    params = [t.detach().to(dtype).requires_grad_() for t in leaves64]
    calls = record_padding_launches(monkeypatch)
    x = x64.to(dtype)
    y = fusedmlp.mlp(x, params[:3], params[3:], "relu", "sigmoid", recompute=recompute)
    assert calls == [((37, 70), (80, 70))]  # one launch for both
    x_alive = weakref.ref(x)
    del x
    assert (x_alive() is None) == (not recompute)
    calls.clear()
    grads = torch.autograd.grad(y, params, g64.to(dtype))
    assert calls == ([((37, 70), (80, 70))] if recompute else [])
    assert rel_err(y, ref) < TOLERANCE[dtype]
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        assert rel_err(got, want) < TOLERANCE[dtype], i


def record_first_layer_gemms(monkeypatch, what) -> list:
    """``what(x)`` of each x that layer 0 runs on as a GEMM of its own (linear_act's forward)."""
    calls = []
    original = mlp_ops.linear_act_forward_impl
    monkeypatch.setattr(mlp_ops, "linear_act_forward_impl", lambda x, *rest: calls.append(what(x)) or
                        original(x, *rest))
    return calls


@pytest.fixture
def first_layer_gemm(monkeypatch):
    """Layer 0 as a GEMM of its own wherever the plan allows it (on a GPU: Hopper, 16 bits,
    FIRST_LAYER_GEMM_MIN_ROWS rows), so that the interpreter runs that path's plumbing too
    (linear_act's kernels for layer 0, the rest of the stack as one kernel). Counts the
    launches that copy into zero-padded rows by the shapes each copies."""
    monkeypatch.setattr(mlp_ops, "pingpong_device", lambda t: True)
    monkeypatch.setattr(mlp_ops, "FIRST_LAYER_GEMM_MIN_ROWS", 1)
    return record_padding_launches(monkeypatch)


@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
@pytest.mark.parametrize("acts", [("relu", "sigmoid"), ("silu", None)], ids=["relu", "silu"])
def test_first_layer_as_gemm(device, small_on_chip, first_layer_gemm, acts, recompute):
    """A wide first layer streamed into a narrow one runs as linear_act's forward plus the rest
    as one kernel: the same outputs and gradients whatever x's layout, its saved tensor a_1
    (relu) or z_0 (silu), and x copied into padded rows only when its rows are not 16-byte
    aligned in place (the interaction's NaN-padded rows are read as they are)."""
    assert mlp_ops._first_layer_as_gemm(torch.empty(5, 70), mlp_ops.mlp_plan((70, 80, 24, 1), ("relu",) * 3,
                                                                            (True,) * 3, mlp_ops.FULL_MAX))
    for transform, copies in ((None, [((37, 70), (80, 70))]), (_nan_padded_rows, [((80, 70),)]),
                              (lambda t: t.t().contiguous().t(), [((37, 70), (80, 70))])):
        first_layer_gemm.clear()
        check_stack([70, 80, 24, 1], device, torch.float32, *acts, recompute=recompute, x_transform=transform,
                    g_offset=1.0)
        # one forward (and the recomputing backward's second one): the copies for the fused
        # forward, then none for the float64 reference and the eager run
        assert first_layer_gemm == copies * (2 if recompute else 1)


def check_compiled_stack(device, x, params, activation, last_activation, recompute=False):
    """A loss over ``fusedmlp.mlp`` (3 layers: params = 3 weights, then 3 biases) under
    torch.compile(fullgraph=True) against the same step run eagerly: loss and the gradients
    of x and every parameter."""
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"

    def step(x, *params):
        return fusedmlp.mlp(x, params[:3], params[3:], activation, last_activation,
                            recompute=recompute).square().sum()

    # nothing from inductor's on-disk caches: the tests patch module constants
    # (FIRST_LAYER_GEMM_MIN_ROWS, ...) that change what the op's fake returns, which their keys
    # do not see (on an H200 a cached graph asserted another test's output shapes, with such a
    # constant patched, 2026-11-29)
    with torch._inductor.config.patch(force_disable_caches=True):
        loss = torch.compile(step, fullgraph=True, backend=backend)(x, *params)
        grads = torch.autograd.grad(loss, [x] + params)
    eager_loss = step(x, *params)
    eager = torch.autograd.grad(eager_loss, [x] + params)
    assert rel_err(loss, eager_loss) < 1e-5
    for got, want in zip(grads, eager):
        assert rel_err(got, want) < 1e-5


def test_first_layer_as_gemm_under_compile(device, small_on_chip, first_layer_gemm):
    """The fake forward returns the padded copies the real one makes (x's only where its rows
    are not aligned in place): torch.compile(fullgraph=True) runs the path end to end."""
    x64, weights, biases, _ = make_stack([70, 80, 24, 1], device)
    params = [t.float().requires_grad_() for t in weights + biases]
    for x in (x64.float(), _nan_padded_rows(x64.float())):
        check_compiled_stack(device, x.requires_grad_(), params, "relu", "sigmoid")


@pytest.fixture
def split_when_graphed(monkeypatch):
    """Layer 0 as a GEMM of its own only in graph_capture_mode (FIRST_LAYER_GEMM_MIN_ROWS out
    of reach, the graphed threshold 1); records the rows of each linear_act forward of layer 0."""
    monkeypatch.setattr(mlp_ops, "pingpong_device", lambda t: True)
    monkeypatch.setattr(mlp_ops, "FIRST_LAYER_GEMM_MIN_ROWS", 2**62)
    monkeypatch.setattr(mlp_ops, "FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED", 1)
    return record_first_layer_gemms(monkeypatch, lambda x: x.shape[0])


@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
def test_graph_capture_mode_splits_the_first_layer(device, small_on_chip, split_when_graphed, recompute):
    """Inside fusedmlp.graph_capture_mode the eager path takes the first-layer split from
    FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED rows (the recomputing backward too), with the same
    outputs and gradients; outside it the stack stays one kernel."""
    check_stack([70, 80, 24, 1], device, torch.float32, "relu", "sigmoid", recompute=recompute, g_offset=1.0)
    assert split_when_graphed == []
    with fusedmlp.graph_capture_mode():
        check_stack([70, 80, 24, 1], device, torch.float32, "relu", "sigmoid", recompute=recompute, g_offset=1.0,
                    x_transform=_nan_padded_rows)
    assert split_when_graphed == [37] * (2 if recompute else 1)
    assert not fusedmlp._cuda_graph.in_graph_capture_mode()


def test_graph_capture_mode_leaves_the_compiled_op_alone(device, small_on_chip, split_when_graphed):
    """The custom op under torch.compile decides from metadata alone (its fake must agree with
    it), so the mode does not reach it: the compiled step matches the eager one, which splits."""
    x64, weights, biases, _ = make_stack([70, 80, 24, 1], device)
    params = [t.float().requires_grad_() for t in weights + biases]
    with fusedmlp.graph_capture_mode():
        check_compiled_stack(device, x64.float().requires_grad_(), params, "relu", "sigmoid")
    assert split_when_graphed == [37]  # the eager run's forward only


def test_empty_batch(device):
    x, weights, biases, _ = make_stack([13, 40, 16], device, batch=(0,))
    for t in [x] + weights + biases:
        t.requires_grad_(True)
    y = fusedmlp.mlp(x, weights, biases)
    assert y.shape == (0, 16)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert all(torch.equal(t.grad, torch.zeros_like(t)) for t in weights + biases)


def test_inference_forward_keeps_nothing(device, monkeypatch):
    """The forward saves no layer's tensor where autograd records nothing
    (helpers.check_inference_forward)."""
    x, weights, biases, _ = make_stack([13, 40, 24, 9], device)
    check_inference_forward(
        monkeypatch, mlp_ops, "mlp_forward_impl", lambda args: args[4],
        lambda grad: fusedmlp.mlp(x.float(), [w.float().requires_grad_(grad) for w in weights],
                                  [b.float() for b in biases], "gelu"),
        mlp_ops.mlp_reference(x, weights, biases, "gelu"), torch.float32, "mlp")


def test_too_wide_stacks_run_layer_by_layer(device, monkeypatch):
    """Two adjacent layers wider than FULL_MAX have no narrow consumer: per-layer linear_act."""
    monkeypatch.setattr(mlp_ops, "FULL_MAX", 16)
    assert mlp_ops.mlp_plan((13, 40, 24, 9), ("relu", "relu", "identity"), (True,) * 3, 16) is None
    calls = []
    original = mlp_ops.linear_act
    monkeypatch.setattr(mlp_ops, "linear_act", lambda *a, **k: calls.append(1) or original(*a, **k))
    check_stack([13, 40, 24, 9], device, torch.float32, "relu", None)
    assert len(calls) == 3  # one call per layer (the reference runs check_stack's other stacks)


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("empty", TypeError, "weights must be a non-empty list"),
        ("tensor", TypeError, "weights must be a non-empty list"),
        ("chain", ValueError, r"weights\[1\] has shape \(8, 7\): it takes 7 inputs but weights\[0\] \(out=9\)"),
        ("input", ValueError, r"it takes 12 inputs but x's last dimension gives 11"),
        ("bias_count", ValueError, "biases has 1 entries but there are 2 weights"),
        ("bias_length", ValueError, r"biases\[1\] must have 8 elements"),
        ("dtype", TypeError, r"weights\[1\] has dtype torch.float64"),
        ("activation", ValueError, "activation must be one of"),
        ("recompute", TypeError, "recompute must be a bool"),
        ("rank", ValueError, r"weights\[0\] must be 2-D"),
        ("no_outputs", ValueError, r"weights\[1\] has no output features"),
        ("not_tensor", TypeError, r"weights\[1\] must be a torch.Tensor, got list"),
        ("bias_rank", ValueError, r"biases\[0\] must be 1-D"),
        ("bias_dtype", TypeError, r"biases\[1\] has dtype torch.float16"),
    ],
)
def test_bad_inputs(device, case, exc, match):
    x = torch.randn(5, 12, device=device)
    weights = [torch.randn(9, 12, device=device), torch.randn(8, 9, device=device)]
    biases = [torch.randn(9, device=device), torch.randn(8, device=device)]
    kwargs = {}
    if case == "empty":
        weights = []
    elif case == "tensor":
        weights = weights[0]
    elif case == "chain":
        weights[1] = torch.randn(8, 7, device=device)
    elif case == "input":
        x = torch.randn(5, 11, device=device)
    elif case == "bias_count":
        biases = biases[:1]
    elif case == "bias_length":
        biases[1] = torch.randn(7, device=device)
    elif case == "dtype":
        weights[1] = weights[1].double()
    elif case == "activation":
        kwargs["activation"] = "tanh"
    elif case == "recompute":
        kwargs["recompute"] = 1
    elif case == "rank":
        weights[0] = weights[0][None]
    elif case == "no_outputs":
        weights[1] = torch.randn(0, 9, device=device)
    elif case == "not_tensor":
        weights[1] = weights[1].tolist()
    elif case == "bias_rank":
        biases[0] = biases[0][:, None]
    elif case == "bias_dtype":
        biases[1] = biases[1].half()
    with pytest.raises(exc, match=match):
        fusedmlp.mlp(x, weights, biases, **kwargs)


@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
def test_torch_compile_fullgraph(device, recompute, small_on_chip):
    x, weights, biases, _ = make_stack([13, 80, 24, 16], device)
    params = [t.float().requires_grad_() for t in weights + biases]
    check_compiled_stack(device, x.float().requires_grad_(), params, "silu", "sigmoid", recompute)


def test_fused_mlp_is_a_drop_in(device):
    """Same children, keys and initialisation as the Sequential it replaces; loads its checkpoint."""
    seq = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
    seq = seq.to(device, torch.float64)
    fused = fusedmlp.FusedMLP([13, 64, 32, 1], "relu", "sigmoid").to(device, torch.float64)
    assert isinstance(fused, nn.Sequential)
    assert fused.state_dict().keys() == seq.state_dict().keys()
    fused.load_state_dict(seq.state_dict())
    x = torch.randn(9, 13, device=device, dtype=torch.float64)
    assert rel_err(fused(x), seq(x)) < 1e-12
    assert rel_err(fused.unfuse()(x), seq(x)) < 1e-12
    assert [type(m) for m in fused] == [type(m) for m in seq]
    with pytest.raises(ValueError, match="sizes must list"):
        fusedmlp.FusedMLP([13])
    with pytest.raises(ValueError, match="activation must be one of"):
        fusedmlp.FusedMLP([4, 4, 4], activation="swish")


def test_patch_fuses_whole_sequentials(device):
    """Rule 5: a Sequential MLP inside a model becomes one FusedMLP (same modules, same keys);
    a Sequential that is not a whole MLP keeps the Linear+activation rule."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = nn.Sequential(nn.Linear(13, 40), nn.ReLU(), nn.Linear(40, 24), nn.ReLU(),
                                        nn.Linear(24, 16), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(16, 8), nn.GELU(), nn.Dropout(0.0), nn.Linear(8, 1))

        def forward(self, x):
            return self.top(self.bottom(x))

    model = Model().to(device, torch.float64)
    x = torch.randn(11, 13, device=device, dtype=torch.float64, requires_grad=True)
    before = model(x)
    grads_before = torch.autograd.grad(before.sum(), [x] + list(model.parameters()))
    keys = model.state_dict().keys()
    records = fusedmlp.patch(model)
    assert [(r.name, r.new_type) for r in records] == [("bottom", "FusedMLP"), ("top.0", "FusedLinear"),
                                                       ("top.1", "PairedActivation")]
    assert model.state_dict().keys() == keys
    assert model.bottom.activation == "relu" and model.bottom.last_activation == "relu"
    after = model(x)
    grads_after = torch.autograd.grad(after.sum(), [x] + list(model.parameters()))
    assert rel_err(after, before) < 1e-12
    for got, want in zip(grads_after, grads_before):
        assert rel_err(got, want) < 1e-12
    assert len(fusedmlp.patch(model)) == 0
    fusedmlp.unpatch(model)
    assert type(model.bottom) is nn.Sequential


@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
@pytest.mark.parametrize("activation,last", [("relu", "sigmoid"), ("gelu", None), ("silu", "relu")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_cublas_stack(device, monkeypatch, dtype, activation, last, recompute):
    """fp32 at "highest" and fp64 on a GPU run the stack layer by layer with cuBLAS products under
    one autograd Function (``_CublasStackFunction``); its routing is forced here on every device
    (its pieces run on CPU tensors too): relu and sigmoid through aten's derivatives, the others
    through linear_act's backward (their pre-activations kept or recomputed), the identity last,
    with and without biases, partial gradients; no whole-stack kernel launched."""
    monkeypatch.setattr(mlp_ops, "gemms_on_cublas", lambda t: True)
    launched = recording_launches(monkeypatch, (mlp_ops._fwd_launcher, mlp_ops._dgrad_launcher))
    sizes = [13, 40, 24, 8]
    check_stack(sizes, device, dtype, activation, last, recompute=recompute)
    check_stack(sizes, device, dtype, activation, last, bias=[True, False, True], recompute=recompute,
                wants=[False, True, True, False, False, True, True])
    x = torch.randn(5, 13, dtype=dtype, device=device, requires_grad=True)
    weights = [torch.randn(o, i, dtype=dtype, device=device) for i, o in zip(sizes, sizes[1:])]
    y = fusedmlp.mlp(x, weights, None, activation, last, recompute=recompute)
    assert type(y.grad_fn).__name__ == "_CublasStackFunctionBackward"
    with torch.no_grad():  # inference: the same products, no Function
        assert torch.equal(fusedmlp.mlp(x, weights, None, activation, last), y.detach())
    assert not launched


@pytest.mark.gpu
@pytest.mark.parametrize("sizes", [DLRM_BOTTOM, DLRM_TOP], ids=["bottom", "top"])
@pytest.mark.parametrize("dtype,precision", [(torch.bfloat16, "highest"), (torch.float32, "highest"),
                                             (torch.float32, "high")], ids=["bfloat16", "float32", "float32-tf32"])
@pytest.mark.parametrize("batch", [2048, 8191, 20000])
def test_dlrm_mlps_on_gpu(sizes, dtype, precision, batch, monkeypatch):
    """The DLRM MLPs at the real widths (one kernel each way: plain calls keep the wgrad kernel
    at every batch, ``test_top_mlp_weight_grads_on_cublas_when_graphed``), against float64 on the GPU.
    fp32 at "highest" runs layer by layer with its GEMMs on cuBLAS (``gemms_on_cublas``: the
    whole-stack kernel is not launched), at "high" as the whole-stack kernel on TF32 tensor cores.
    (g has a mean: the top MLP's last bias gradient is ONE sum over the batch, which a
    zero-mean g cancels down to rounding noise. fp32: the bound is DESIGN.md's GPU fp32 1e-3,
    and the batch leaves out the rows with a ReLU pre-activation at the kink, see
    ``kink_free_rows``: without that, 3 of 6 runs failed on dx with 1.4e-3 to 3.9e-3, and once
    on the top MLP's dW_0 at 8191 rows with 2.7e-3, when only dx left those rows out.)"""
    from fusedmlp.ops._common import gemms_on_cublas

    monkeypatch.setattr(mlp_ops, "gemms_on_cublas", gemms_on_cublas)  # the routing this file's fixture holds off
    launches = []
    real = mlp_ops._fwd_launcher.launch
    monkeypatch.setattr(mlp_ops._fwd_launcher, "launch", lambda *a, **k: launches.append(1) or real(*a, **k))
    last = "sigmoid" if sizes[-1] == 1 else "relu"
    tf32 = precision == "high"
    with fp32_matmul_precision(precision):
        check_stack(sizes, "cuda", dtype, "relu", last, batch=(batch,), g_offset=0.5, fp32_bound=1e-3, tf32=tf32)
        check_stack(sizes, "cuda", dtype, "relu", last, batch=(batch,), recompute=True, g_offset=0.5,
                    fp32_bound=1e-3, tf32=tf32)
    assert bool(launches) == (dtype != torch.float32 or tf32)


@pytest.mark.gpu
def test_top_mlp_weight_grads_on_cublas_when_graphed(monkeypatch):
    """The top MLP's weight gradients from CUBLAS_WGRAD_MIN_ROWS_GRAPHED rows: the wgrad kernel
    in plain calls, cuBLAS products in graph_capture_mode and in plain calls past
    CUBLAS_WGRAD_MIN_ROWS; each against float64 (recomputing backward too)."""
    calls = []
    real = mlp_ops._weight_grads_cublas
    monkeypatch.setattr(mlp_ops, "_weight_grads_cublas", lambda *args: calls.append(1) or real(*args))
    batch = (mlp_ops.CUBLAS_WGRAD_MIN_ROWS_GRAPHED + 37,)
    for recompute in (False, True):
        calls.clear()
        check_stack(DLRM_TOP, "cuda", torch.bfloat16, "relu", "sigmoid", batch=batch, recompute=recompute,
                    g_offset=0.5)
        assert not calls, "plain calls take the wgrad kernel"
        with fusedmlp.graph_capture_mode():
            check_stack(DLRM_TOP, "cuda", torch.bfloat16, "relu", "sigmoid", batch=batch, recompute=recompute,
                        g_offset=0.5)
        assert calls == [1], calls
    monkeypatch.setattr(mlp_ops, "CUBLAS_WGRAD_MIN_ROWS", batch[0])
    calls.clear()
    check_stack(DLRM_TOP, "cuda", torch.bfloat16, "relu", "sigmoid", batch=batch, g_offset=0.5)
    assert calls == [1], calls


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
def test_top_mlp_first_layer_gemm_on_gpu(monkeypatch, recompute):
    """From FIRST_LAYER_GEMM_MIN_ROWS rows on Hopper in bf16, the top MLP's layer 0 runs as
    linear_act's ping-pong forward and the rest as one kernel: against float64, x in
    contiguous 367-wide rows and in the interaction's NaN-padded 368-wide rows (read in place),
    with and without a tail row block; and a SiLU stack, whose layer 0 saves z_0."""
    if not mlp_ops.pingpong_device(torch.empty(0, device="cuda", dtype=torch.bfloat16)):
        pytest.skip("the ping-pong kernels need compute capability 9.0")
    calls = record_first_layer_gemms(monkeypatch, lambda x: x.stride())
    for batch in (mlp_ops.FIRST_LAYER_GEMM_MIN_ROWS, 3 * mlp_ops.FIRST_LAYER_GEMM_MIN_ROWS + 77):
        for transform in (None, _nan_padded_rows):
            calls.clear()
            check_stack(DLRM_TOP, "cuda", torch.bfloat16, "relu", None, batch=(batch,), recompute=recompute,
                        x_transform=transform, g_offset=0.5)
            # the fused forward (and the recomputing backward's) ran layer 0 on 368-wide rows
            assert calls == [(368, 1)] * (2 if recompute else 1)
    calls.clear()
    check_stack([100, 384, 128, 48], "cuda", torch.bfloat16, "silu", "silu",
                batch=(mlp_ops.FIRST_LAYER_GEMM_MIN_ROWS + 5,), recompute=recompute)
    assert calls == [(104, 1)] * (2 if recompute else 1)


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["saves", "recompute"])
def test_top_mlp_step_replayed_from_a_cuda_graph(monkeypatch, recompute):
    """A training step of the top MLP captured by fusedmlp.capture_cuda_graph, whose
    graph_capture_mode runs layer 0 as a GEMM of its own from FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED
    rows (the plain call at that size keeps one kernel), replayed on new values copied into the
    captured inputs: the output and every gradient against float64, x in contiguous rows and
    copied into the interaction's NaN-padded rows inside the step."""
    if not mlp_ops.pingpong_device(torch.empty(0, device="cuda", dtype=torch.bfloat16)):
        pytest.skip("the ping-pong kernels need compute capability 9.0")
    calls = record_first_layer_gemms(monkeypatch, lambda x: x.shape)
    m, bf16 = mlp_ops.FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED, torch.bfloat16
    for transform in (None, _nan_padded_rows):
        x64, weights, biases, g64 = make_stack(DLRM_TOP, "cuda", True, (m,))
        leaves = [t.to(bf16).requires_grad_() for t in [x64] + weights + biases]
        gy = g64.to(bf16)

        def step():
            x = transform(leaves[0]) if transform else leaves[0]
            y = fusedmlp.mlp(x, leaves[1:4], leaves[4:], "relu", None, recompute=recompute)
            return (y, *torch.autograd.grad(y, leaves, gy))

        calls.clear()
        graph, outputs = fusedmlp.capture_cuda_graph(step, warmup=2)
        assert calls == [(m, 367)] * (3 * (2 if recompute else 1))  # 2 warm-ups and the capture, all split
        fresh = make_stack(DLRM_TOP, "cuda", True, (m,))
        with torch.no_grad():
            for leaf, value in zip(leaves, [fresh[0]] + fresh[1] + fresh[2]):
                leaf.copy_(value)
            gy.copy_(fresh[3] + 0.5)  # as check_stack's g_offset: sums over rows that do not cancel
        graph.replay()

        def reference_step(dtype):
            inputs = [t.detach().to(dtype).requires_grad_() for t in leaves]
            y = fusedmlp.mlp_reference(inputs[0], inputs[1:4], inputs[4:], "relu", None)
            return [y, *torch.autograd.grad(y, inputs, gy.to(dtype))]

        # the bound as check_stack's: bf16's tolerance, or twice eager PyTorch's own error in bf16
        want, eager = reference_step(torch.float64), reference_step(bf16)
        for name, got, ref, base in zip(["y", "x", "W0", "W1", "W2", "b0", "b1", "b2"], outputs, want, eager):
            bound = eager_bound(bf16, base, ref)
            assert rel_err(got, ref) < bound, (name, rel_err(got, ref), bound)
    calls.clear()
    fusedmlp.mlp(leaves[0], leaves[1:4], leaves[4:], "relu", None)
    assert calls == []  # outside the mode, that many rows stay on the whole-stack kernel


# Stacks on which Triton 3.6 compiled the chained dots wrong with wgmma tiles on an H200
# (kernels/configs.py), and the DLRM stacks.
CONFIG_STACKS = [[13, 40, 24, 8], [16, 128, 31], [300, 8, 200, 256], [13, 64, 32, 24, 8], [16, 200, 256, 13, 100],
                 [24, 64, 512, 40, 64, 16], [40, 64, 13, 24, 13], DLRM_BOTTOM, DLRM_TOP]


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(max(len(mlp_ops._fwd_launcher.configs), len(mlp_ops._dgrad_launcher.configs))))
def test_every_config_on_gpu(index):
    """Every tile config of the forward and of the dgrad kernel (the i-th of each, or its last),
    not only the one the tuner picks, on stacks of every role, in fp16 with a tail row block."""
    fwd = mlp_ops._fwd_launcher.configs
    dgrad = mlp_ops._dgrad_launcher.configs
    with mlp_ops._fwd_launcher.forcing(fwd[min(index, len(fwd) - 1)]), \
            mlp_ops._dgrad_launcher.forcing(dgrad[min(index, len(dgrad) - 1)]):
        for sizes in CONFIG_STACKS:
            check_stack(sizes, "cuda", torch.float16, "relu", "sigmoid", batch=(300,), g_offset=1.0)


def test_launcher_timing_is_checked():
    from fusedmlp.kernels.configs import MLP_FWD_CONFIGS, Launcher
    from fusedmlp.kernels.mlp import mlp_fwd_kernel

    with pytest.raises(ValueError, match="timing"):
        Launcher(mlp_fwd_kernel, MLP_FWD_CONFIGS, key=["M_KEY"], timing="cudagraph")
    assert mlp_ops._fwd_launcher.timing == mlp_ops._dgrad_launcher.timing == mlp_ops.MLP_TUNER_TIMING == "graph"


@pytest.mark.gpu
def test_graph_timed_tuning_on_gpu(monkeypatch):
    """Autotuning on, each config timed from a CUDA graph (configs.graph_timing, the MLP
    launchers' way): the first call of a key times every config of the forward's and the
    dgrad's tables, the tuner keeps the fastest, and output and gradients match float64; a
    step captured in a CUDA graph afterwards (the tuned configs, no timing) replays the same."""
    import fusedmlp.kernels.configs as configs
    from fusedmlp.kernels.mlp import mlp_dgrad_kernel, mlp_fwd_kernel

    monkeypatch.setattr(configs, "AUTOTUNE", True)
    timed = []

    def recorded(kernel_call, quantiles):
        at = real(kernel_call, quantiles)
        timed.append(at)
        return at

    real = configs.graph_timing
    monkeypatch.setattr(configs, "graph_timing", recorded)
    fwd = configs.Launcher(mlp_fwd_kernel, configs.MLP_FWD_CONFIGS[:3], key=mlp_ops._fwd_launcher.key, timing="graph")
    dgrad = configs.Launcher(mlp_dgrad_kernel, configs.MLP_DGRAD_CONFIGS[:3], key=mlp_ops._dgrad_launcher.key,
                             timing="graph")
    monkeypatch.setattr(mlp_ops, "_fwd_launcher", fwd)
    monkeypatch.setattr(mlp_ops, "_dgrad_launcher", dgrad)
    check_stack(DLRM_BOTTOM, "cuda", torch.bfloat16, "relu", "relu", batch=(3000,))
    # one forward key (training) and one dgrad key, three configs each
    assert len(timed) == 6 and all(len(at) == 3 and 0 < at[1] <= at[0] <= at[2] < 1e3 for at in timed)
    for launcher in (fwd, dgrad):
        timings = launcher.tuned.configs_timings
        assert len(timings) == 3 and launcher.tuned.best_config == min(timings, key=timings.get)

    x, weights, biases, g = make_stack(DLRM_BOTTOM, "cuda", True, (3000,))
    leaves = [t.to(torch.bfloat16).requires_grad_() for t in [x] + weights + biases]

    def step():
        for leaf in leaves:
            leaf.grad = None
        y = fusedmlp.mlp(leaves[0], leaves[1:5], leaves[5:], "relu", "relu")
        y.backward(g.to(torch.bfloat16))
        return [y.detach()] + [leaf.grad for leaf in leaves]

    eager = [t.clone() for t in step()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    graph.replay()
    torch.cuda.synchronize()
    assert len(timed) == 6  # nothing timed again, nothing timed inside the capture
    for got, want in zip(static, eager):  # the same kernels on the same inputs
        assert rel_err(got, want) < 1e-3
    # (a first call inside a capture: test_launch.py, test_first_call_inside_a_capture_is_a_clear_error)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_other_activations_on_gpu(activation):
    check_stack([100, 384, 128, 48], "cuda", torch.bfloat16, activation, activation, batch=(5000,))
    check_stack([100, 384, 128, 48], "cuda", torch.bfloat16, activation, activation, batch=(17000,))

