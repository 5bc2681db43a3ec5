"""Fused SwiGLU feed-forward: output and every gradient against a float64 reference."""

import pytest
import torch
from helpers import (
    TOLERANCE, assert_close, backward_peak_bytes, check_against_float64, check_backward_twice,
    check_inference_forward, check_repeated_steps, check_replayed_step, first_store_backward_errors,
    fp32_matmul_precision,
    recording_launches, recording_pingpong_launches, rel_err,
)

import fusedmlp
from fusedmlp.ops.swiglu import swiglu_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def make_inputs(lead_shape, dim, hidden, device, out_dim=None, grads=(True, True, True, True)):
    """float64 masters with nn.Linear-like scales (hidden products of order one)."""
    x = torch.randn(*lead_shape, dim, dtype=torch.float64, device=device)
    w_gate = torch.randn(hidden, dim, dtype=torch.float64, device=device) / dim**0.5
    w_up = torch.randn(hidden, dim, dtype=torch.float64, device=device) / dim**0.5
    w_down = torch.randn(out_dim or dim, hidden, dtype=torch.float64, device=device) / hidden**0.5
    g = torch.randn(*lead_shape, out_dim or dim, dtype=torch.float64, device=device)
    tensors = [x, w_gate, w_up, w_down]
    for t, needs in zip(tensors, grads):
        t.requires_grad_(needs)
    return tensors, g


def run_check(tensors64, g64, dtype, recompute, what="", transform=lambda ts: ts, activation="silu"):
    # the reference runs on the very values the op gets (rounded to dtype), in float64
    tensors64 = [t.detach().to(dtype).double().requires_grad_(t.requires_grad) for t in tensors64]
    tensors = transform([t.detach().to(dtype) for t in tensors64])
    check_against_float64(
        lambda *ts: fusedmlp.swiglu(*ts, recompute=recompute, activation=activation),
        lambda *ts: swiglu_reference(*ts, activation),
        tensors, tensors64, g64.to(dtype), g64, f"{what} recompute={recompute} activation={activation}",
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
@pytest.mark.parametrize(
    "lead_shape,dim,hidden,out_dim",
    [((37,), 45, 29, None), ((1,), 16, 40, None), ((2, 9), 24, 56, 20)],
    ids=["odd", "N=1", "3d-out"],
)
def test_matches_float64(device, dtype, recompute, lead_shape, dim, hidden, out_dim):
    tensors, g = make_inputs(lead_shape, dim, hidden, device, out_dim)
    run_check(tensors, g, dtype, recompute)


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu", "relu", "squared_relu", "sigmoid", "identity"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_other_gate_activations(device, activation, dtype, recompute):
    """``activation`` other than silu (gelu_tanh: Gemma's GeGLU feed-forward): the same kernels
    with that epilogue, output and every gradient against float64, 3-D input and odd widths."""
    tensors, g = make_inputs((3, 13), 40, 56, device, out_dim=24)
    run_check(tensors, g, dtype, recompute, activation=activation)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_packed_gate_up_weight(device, activation, dtype, recompute):
    """``swiglu_packed``: the gate and up weights as one ``[2*hidden, dim]`` tensor ``[gate; up]``
    (Phi-3's gate_up_proj), its gradient formed in that layout: output and every gradient
    against float64, 3-D input, odd widths."""
    (x, w_gate, w_up, w_down), g = make_inputs((3, 13), 40, 56, device, out_dim=24)
    packed64 = torch.cat([w_gate, w_up]).detach().requires_grad_()
    hidden = w_gate.shape[0]
    check_against_float64(
        lambda x_, w_, wd_: fusedmlp.swiglu_packed(x_, w_, wd_, recompute=recompute, activation=activation),
        lambda x_, w_, wd_: swiglu_reference(x_, w_[:hidden], w_[hidden:], wd_, activation),
        [t.detach().to(dtype).requires_grad_() for t in (x, packed64, w_down)],
        [t.detach().to(dtype).double().requires_grad_() for t in (x, packed64, w_down)],
        g.to(dtype), g, f"packed recompute={recompute} activation={activation}",
    )


@pytest.mark.parametrize(
    "grads",
    [(False, True, True, True), (True, False, False, False), (False, True, False, False),
     (False, False, True, False), (False, False, False, True)],
    ids=["no-dx", "dx-only", "gate-only", "up-only", "down-only"],
)
def test_partial_gradients(device, grads):
    tensors, g = make_inputs((40,), 32, 48, device, grads=grads)
    run_check(tensors, g, torch.float32, False, "partial")


@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_strided_inputs(device, recompute):
    """x, w_gate and w_down as transposed views (w_down.T is the layout of a [hidden, out] matrix)."""
    x = torch.randn(40, 33, dtype=torch.float64, device=device).t().requires_grad_()
    w_gate = (torch.randn(40, 24, dtype=torch.float64, device=device) / 40**0.5).t().requires_grad_()
    w_up = (torch.randn(24, 40, dtype=torch.float64, device=device) / 40**0.5).requires_grad_()
    w_down = (torch.randn(24, 40, dtype=torch.float64, device=device) / 24**0.5).t().requires_grad_()
    g = torch.randn(33, 40, dtype=torch.float64, device=device)
    run_check([x, w_gate, w_up, w_down], g, torch.float32, recompute, "strided")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_tma_kernels(device, monkeypatch, dtype, recompute):
    """The persistent tensor-descriptor kernels, including the backward's g = gy @ W_down on the tile."""
    import fusedmlp.ops.glu as glu_ops

    if device == "cuda":
        if dtype == torch.float32 or torch.cuda.get_device_capability()[0] < 9:
            pytest.skip("the TMA path is for 16-bit inputs on Hopper")
    else:
        monkeypatch.setattr(glu_ops, "tma_eligible", lambda *tensors: True)
        monkeypatch.setattr(glu_ops, "num_sms", lambda t: 3)  # fewer programs than tiles
    tensors, g = make_inputs((77,), 72, 40, device)  # 16-byte aligned rows; no multiple of the tiles
    run_check(tensors, g, dtype, recompute, "tma")


@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
@pytest.mark.parametrize("dim", [24, 64], ids=["g_apart", "g_in_grad_pair"])
def test_backward_in_row_chunks(device, monkeypatch, recompute, dim):
    """Chunked backward against float64. In the store mode each chunk's g lies in dead memory:
    every chunk's in grad_pair when it fits ([2*40, 64] holds [128, 40]; the pair and dx are
    then formed over all rows after the loop); where it does not ([2*40, 24]), each later
    chunk's in the previous chunk's h rows."""
    import fusedmlp.ops._common as common
    import fusedmlp.ops.swiglu as swiglu_ops

    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)  # chunk however small
    reused = []
    scratch = swiglu_ops._g_scratch

    def recording(dead, rows, hidden, like):
        g = scratch(dead, rows, hidden, like)
        reused.append((dead is not None and g.data_ptr() == dead.data_ptr(), tuple(dead.shape)))
        return g

    monkeypatch.setattr(swiglu_ops, "_g_scratch", recording)
    tensors, g = make_inputs((3, 100), dim, 40, device)  # 300 rows: chunks of 128, 128 and 44
    run_check(tensors, g, torch.float32, recompute, "chunked")
    pair, h_rows = (80, dim), (128, 80)
    expected = [(True, pair)] * 3 if dim == 64 else [(False, pair), (True, h_rows), (True, h_rows)]
    assert reused == ([] if recompute else expected)


@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_backward_twice(device, recompute):
    """retain_graph=True: the recompute mode differentiates again to the same gradients; the
    store mode, whose backward wrote dh over the saved h, refuses clearly."""
    tensors, g = make_inputs((50,), 24, 40, device)
    leaves = [t.detach().float().requires_grad_() for t in tensors]
    check_backward_twice(fusedmlp.swiglu(*leaves, recompute=recompute), leaves, g.float(), refuses=not recompute)


@pytest.mark.gpu
def test_first_store_backward_with_autotuning():
    """With autotuning on, the first store-mode backward of a shape is right (the stream that
    writes dh over h and z over g is never timed on the caller's tensors; it gave NaNs when it was)."""
    errors = first_store_backward_errors(
        "fusedmlp.swiglu(a['x'], a['w_gate'], a['w_up'], a['w_down'], recompute=False)",
        "swiglu_reference(a['x'], a['w_gate'], a['w_up'], a['w_down'])",
        {"x": (2, 500, 256), "w_gate": (640, 256), "w_up": (640, 256), "w_down": (256, 640), "g": (2, 500, 256)},
    )
    for name, err in errors.items():
        assert err < TOLERANCE[torch.bfloat16], (name, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_ieee_gemms_run_on_cublas(dtype, monkeypatch):
    """fp32 at "highest" and fp64 take the gate and up products from cuBLAS (h recomputed there
    in recompute mode), no Triton GEMM kernel launched; both modes against float64."""
    import fusedmlp.ops.glu as glu_ops

    launched = recording_launches(monkeypatch, (glu_ops._fwd_launcher, glu_ops._fwd_tma_launcher,
                                                glu_ops._bwd_launcher, glu_ops._bwd_tma_launcher))
    with fp32_matmul_precision("highest"):
        for recompute in (False, True):
            tensors, g = make_inputs((300,), 200, 96, "cuda")
            run_check(tensors, g, dtype, recompute, "cuBLAS")
    assert not launched


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_tf32_on_gpu(recompute):
    """fp32 at "high" keeps the Triton kernels, on TF32 tensor cores, untuned (the tests' default):
    against float64 within 5e-3 (10 mantissa bits a product), partial tiles; the recompute mode
    forms g = gy @ W_down on the dh kernel's tile (every fp32 config: tests/test_glu.py)."""
    tensors, g = make_inputs((1000,), 200, 600, "cuda")
    leaves = [t.detach().float().requires_grad_() for t in tensors]
    with fp32_matmul_precision("high"):
        y = fusedmlp.swiglu(*leaves, recompute=recompute)
        y.backward(g.float())
    ref = swiglu_reference(*tensors)
    ref.backward(g)
    for name, out, expected in zip(("y", "dx", "dW_gate", "dW_up", "dW_down"), (y, *(t.grad for t in leaves)),
                                   (ref, *(t.grad for t in tensors))):
        assert rel_err(out, expected) < 5e-3, (name, rel_err(out, expected))


@pytest.mark.gpu
def test_store_backward_allocates_no_dh():
    """The store mode's backward writes dh over the saved h and z over g: its peak is the
    gradients and one g ([rows, hidden]), no dh ([rows, 2*hidden])."""
    tokens, dim, hidden = 8192, 1024, 2816
    tensors, g = make_inputs((tokens,), dim, hidden, "cuda")
    leaves = [t.detach().to(torch.bfloat16).requires_grad_() for t in tensors]
    peak, grads = backward_peak_bytes(lambda: fusedmlp.swiglu(*leaves), leaves, g.to(torch.bfloat16))
    grad_bytes, g_bytes, dh_bytes = sum(t.numel() for t in grads) * 2, tokens * hidden * 2, tokens * 2 * hidden * 2
    assert peak < grad_bytes + g_bytes + dh_bytes // 4, (peak, grad_bytes, g_bytes, dh_bytes)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "gelu"])
@pytest.mark.parametrize("wide", [False, True], ids=["128x64", "128x128"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_pingpong_backward_on_gpu(monkeypatch, dtype, wide, activation):
    """The store mode's dh with g = gy @ W_down formed on the ping-pong kernel's tile (compute
    capability 9.0), on 3 SMs (several tiles per program; partial row, column and K tiles):
    dh and z against float64 into new tensors and in place (dh over h, z over a scratch),
    with z and without; then swiglu's gradients end to end, with and without W_down's. Both
    kernels: 128 x 64 tiles of g with three consumers taking turns (the short K's), and 128 x 128
    with the epilogue in column halves (the long K's; forced here by a limit of 0 for the narrow
    one). hidden = 392 ends
    the last 128-column tile in its first half (its second half's columns are all past OUT).
    A gelu (erf) gate takes cuBLAS's g and the stream instead of the 128 x 128 kernel
    (``GLU_DH_WIDE_STREAM_ACTIVATIONS``): that kernel must not run, and the results hold."""
    import fusedmlp.ops.glu as glu_ops

    kernels = recording_pingpong_launches(monkeypatch)
    if wide:
        monkeypatch.setattr(glu_ops, "GLU_DH_PINGPONG_MAX_K", 0)
    dh_kernel = glu_ops.glu_bwd_dh_wide_pingpong_kernel if wide else glu_ops.glu_bwd_dh_rotating_kernel
    on_tile = not wide or activation not in glu_ops.GLU_DH_WIDE_STREAM_ACTIVATIONS
    rows, dim, hidden = 1000, 200, 392
    gy, x, w_gate, w_up = (torch.randn(*shape, dtype=torch.float64) for shape in
                           [(rows, dim), (rows, dim), (hidden, dim), (hidden, dim)])
    h = torch.randn(rows, 2 * hidden, dtype=torch.float64)
    w_down = torch.randn(dim, hidden, dtype=torch.float64) / hidden**0.5
    exact = [t.to(dtype).double() for t in (gy, x, w_up, w_gate, h, w_down)]
    dh_ref, _, z_ref = glu_ops.glu_backward_dh_impl(*exact[:4], None, None, exact[4], activation, exact[5], True)
    for in_place in (False, True):
        for store_z in (True, False):
            gy_, x_, w_up_, w_gate_, h_, w_down_ = (t.to(dtype).cuda() for t in exact)
            z_out = torch.empty(rows, hidden, dtype=dtype, device="cuda") if in_place else None
            dh, _, z = glu_ops.glu_backward_dh_impl(gy_, x_, w_up_, w_gate_, None, None, h_, activation, w_down_,
                                                    store_z, in_place=in_place, z_out=z_out)
            what = f"in_place={in_place} store_z={store_z}"
            assert rel_err(dh, dh_ref) < TOLERANCE[dtype], what
            if in_place:
                assert dh.data_ptr() == h_.data_ptr(), what
            if store_z:
                assert rel_err(z, z_ref) < TOLERANCE[dtype], what
                if in_place:
                    assert z.data_ptr() == z_out.data_ptr(), what
    assert kernels.count(dh_kernel) == (4 if on_tile else 0), "the dh kernel ran where it should not, or did not"
    for lead_shape, grads in [((1000,), (True,) * 4), ((3, 111), (True, True, True, False))]:
        tensors, g = make_inputs(lead_shape, dim, hidden, "cuda", grads=grads)
        run_check(tensors, g, dtype, False, f"ping-pong dh {lead_shape}", activation=activation)
    assert kernels.count(dh_kernel) == (6 if on_tile else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_input_grad_on_the_dgrad_kernel_on_gpu(monkeypatch, dtype):
    """On compute capability 9.0, dx = d_up @ W_up + d_gate @ W_gate as one dgrad ping-pong
    kernel (the gate product as its tail K steps), on 3 SMs: hidden = 392 ends both products in
    a partial K step and dim = 200 in a partial column tile. Store mode per row chunk (1000
    rows) and over all rows after the loop (300 rows and a 3-D batch of 333: dh kept in h's
    memory), recompute mode, x without a gradient (no dx, no launch), and hidden = 100, whose
    gate half starts 200 bytes into each row (not TMA-readable: cuBLAS): every gradient
    against float64."""
    import fusedmlp.ops.swiglu as ops

    kernels = recording_pingpong_launches(monkeypatch, ops)
    for lead_shape, hidden, recompute, grads, launches in [
        ((1000,), 392, False, (True,) * 4, 1), ((300,), 392, False, (True,) * 4, 1),
        ((3, 111), 392, False, (True,) * 4, 1), ((1000,), 392, True, (True,) * 4, 1),
        ((300,), 392, False, (False, True, True, True), 0), ((300,), 100, False, (True,) * 4, 0),
    ]:
        what = f"dgrad kernel {lead_shape} hidden={hidden} grads={grads}"
        kernels.clear()
        tensors, g = make_inputs(lead_shape, 200, hidden, "cuda", grads=grads)
        run_check(tensors, g, dtype, recompute, what)
        assert kernels.count(ops.dgrad_pingpong_kernel) == launches, (what, kernels)


@pytest.mark.parametrize("recompute,expected", [(True, "x"), (False, "h,x")])
def test_saved_tensors(device, recompute, expected):
    """recompute keeps x alone; store keeps x and h = [up | gate] ([rows, 2*hidden])."""
    layer = fusedmlp.SwiGLU(32, 48, recompute=recompute).to(device)
    x = torch.randn(64, 32, device=device, requires_grad=True)
    params = {p.data_ptr() for p in layer.parameters()}
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        layer(x)
    names = []
    for t in saved:
        if t.data_ptr() in params:
            continue
        if t.data_ptr() == x.data_ptr():
            names.append("x")
        else:
            assert t.shape == (64, 96), t.shape
            names.append("h")
    assert ",".join(sorted(names)) == expected


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("dim", ValueError, "features in its last dimension"),
        ("gate_up_shapes", ValueError, "must have the same"),
        ("down_hidden", ValueError, "w_down must be"),
        ("dtype", TypeError, "w_down has dtype"),
        ("down_rank", ValueError, "w_down must be 2-D"),
        ("recompute", TypeError, "recompute must be a bool"),
        ("activation", ValueError, "activation must be one of"),
    ],
)
def test_bad_inputs(device, case, exc, match):
    x = torch.randn(5, 12, device=device)
    w_gate, w_up = torch.randn(20, 12, device=device), torch.randn(20, 12, device=device)
    w_down = torch.randn(12, 20, device=device)
    kwargs = {}
    if case == "dim":
        x = torch.randn(5, 13, device=device)
    elif case == "gate_up_shapes":
        w_up = torch.randn(21, 12, device=device)
    elif case == "down_hidden":
        w_down = torch.randn(12, 21, device=device)
    elif case == "dtype":
        w_down = w_down.double()
    elif case == "down_rank":
        w_down = w_down[None]
    elif case == "recompute":
        kwargs["recompute"] = 1
    elif case == "activation":
        kwargs["activation"] = "tanh"
    with pytest.raises(exc, match=match):
        fusedmlp.swiglu(x, w_gate, w_up, w_down, **kwargs)
    if case == "activation":
        with pytest.raises(exc, match=match):
            fusedmlp.SwiGLU(12, 20, activation="tanh")


@pytest.mark.parametrize("case,exc,match", [
    ("odd_rows", ValueError, "an even number of rows"),
    ("dim", ValueError, "w_gate_up"),
    ("down_hidden", ValueError, "w_down must be"),
    ("rank", ValueError, "w_gate_up must be 2-D"),
])
def test_packed_bad_inputs(device, case, exc, match):
    x, w_gate_up, w_down = (torch.randn(5, 12, device=device), torch.randn(40, 12, device=device),
                            torch.randn(12, 20, device=device))
    if case == "odd_rows":
        w_gate_up = torch.randn(41, 12, device=device)
    elif case == "dim":
        x = torch.randn(5, 13, device=device)
    elif case == "down_hidden":
        w_down = torch.randn(12, 21, device=device)
    elif case == "rank":
        w_gate_up = w_gate_up[None]
    with pytest.raises(exc, match=match):
        fusedmlp.swiglu_packed(x, w_gate_up, w_down)


@pytest.mark.parametrize("recompute, activation, packed", [
    (False, "silu", False), (True, "silu", False), (False, "gelu_tanh", False), (False, "silu", True)],
    ids=["store", "recompute", "gelu_tanh", "packed"])
def test_torch_compile_fullgraph(device, recompute, activation, packed):
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    module = fusedmlp.PackedSwiGLU if packed else fusedmlp.SwiGLU
    layer = module(40, 56, recompute=recompute, activation=activation).to(device)
    x = torch.randn(2, 33, 40, device=device, requires_grad=True)

    def step(x):
        return layer(x).square().sum()

    loss = torch.compile(step, fullgraph=True, backend=backend)(x)
    leaves = (x, *layer.parameters())
    grads = torch.autograd.grad(loss, leaves)
    eager_loss = step(x)
    eager = torch.autograd.grad(eager_loss, leaves)
    assert rel_err(loss, eager_loss) < 1e-5
    for got, want in zip(grads, eager):
        assert rel_err(got, want) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_step_replayed_from_a_cuda_graph(recompute):
    """The bench's graphed impls and a user's captured training step: forward+backward (the
    store mode's backward writing dh over h) captured once and replayed on new inputs,
    output and every gradient against float64."""
    check_replayed_step(lambda *ts: fusedmlp.swiglu(*ts, recompute=recompute), swiglu_reference,
                        lambda: make_inputs((2, 300), 512, 1792, "cuda"), what=f"recompute={recompute}")


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_repeated_steps_replay_call_plans_on_gpu(recompute):
    """A training loop's plain steps on the same tensors: every step against float64, and the
    later steps replay the forward's launch, the dh kernel's (g formed on the tile) and the
    input gradient's from call plans (ops/_common.py ``CallPlans``)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the plans hold ping-pong launches (compute capability 9.0)")
    replayed = check_repeated_steps(lambda *ts: fusedmlp.swiglu(*ts, recompute=recompute), swiglu_reference,
                                    lambda: make_inputs((300,), 256, 192, "cuda"), what=f"recompute={recompute}")
    want = {"fusedmlp.ops.glu._fwd_plans", "fusedmlp.ops.glu._dh_tile_plans", "fusedmlp.ops.swiglu._dx_plans"}
    assert want <= set(replayed), replayed


def test_inference_forward_keeps_no_h(device, monkeypatch):
    """The default store mode writes no hidden products where autograd records nothing
    (helpers.check_inference_forward)."""
    import fusedmlp.ops.swiglu as swiglu_ops

    (x, wg, wu, wd), _ = make_inputs((2, 9), 24, 40, device)
    x, wg, wu, wd = (t.detach() for t in (x, wg, wu, wd))
    check_inference_forward(
        monkeypatch, swiglu_ops, "_forward_impl", lambda args: args[5],
        lambda grad: fusedmlp.swiglu(x.float(), wg.float().requires_grad_(grad), wu.float(), wd.float()),
        swiglu_reference(x, wg, wu, wd), torch.float32, "swiglu")


def test_module_matches_llama_mlp_layout(device):
    """gate_proj / up_proj / down_proj, bias-free, as in Hugging Face LlamaMLP; same function."""
    layer = fusedmlp.SwiGLU(24, 40).to(device, torch.float64)
    assert sorted(layer.state_dict()) == ["down_proj.weight", "gate_proj.weight", "up_proj.weight"]
    assert layer.gate_proj.weight.shape == (40, 24) and layer.down_proj.weight.shape == (24, 40)
    x = torch.randn(2, 5, 24, device=device, dtype=torch.float64)
    want = layer.down_proj(torch.nn.functional.silu(layer.gate_proj(x)) * layer.up_proj(x))
    assert_close(layer(x), want, torch.float64, "SwiGLU module")
    shared = fusedmlp.SwiGLU.from_projections(layer.gate_proj, layer.up_proj, layer.down_proj)
    assert shared.gate_proj is layer.gate_proj
    with pytest.raises(ValueError, match="bias-free"):
        fusedmlp.SwiGLU.from_projections(torch.nn.Linear(4, 8), layer.up_proj, layer.down_proj)
    gemma = fusedmlp.SwiGLU.from_projections(layer.gate_proj, layer.up_proj, layer.down_proj, activation="gelu_tanh")
    want = layer.down_proj(torch.nn.functional.gelu(layer.gate_proj(x), approximate="tanh") * layer.up_proj(x))
    assert_close(gemma(x), want, torch.float64, "SwiGLU module, gelu_tanh gate")
    assert "activation='gelu_tanh'" in repr(gemma) and "activation" not in repr(layer)


def test_packed_module_matches_phi3_mlp_layout(device):
    """gate_up_proj ([gate; up], bias-free) and down_proj, as in Hugging Face Phi3MLP; same function."""
    layer = fusedmlp.PackedSwiGLU(24, 40).to(device, torch.float64)
    assert sorted(layer.state_dict()) == ["down_proj.weight", "gate_up_proj.weight"]
    assert layer.gate_up_proj.weight.shape == (80, 24) and layer.down_proj.weight.shape == (24, 40)
    x = torch.randn(2, 5, 24, device=device, dtype=torch.float64, requires_grad=True)
    gate, up = layer.gate_up_proj(x).chunk(2, dim=-1)
    want = layer.down_proj(up * torch.nn.functional.silu(gate))
    assert_close(layer(x), want, torch.float64, "PackedSwiGLU module")
    shared = fusedmlp.PackedSwiGLU.from_projections(layer.gate_up_proj, layer.down_proj, activation="gelu_tanh")
    assert shared.gate_up_proj is layer.gate_up_proj and "activation='gelu_tanh'" in repr(shared)
    with pytest.raises(ValueError, match="bias-free"):
        fusedmlp.PackedSwiGLU.from_projections(torch.nn.Linear(24, 80), layer.down_proj)
    with pytest.raises(ValueError, match="2 \\* down_proj.in_features"):
        fusedmlp.PackedSwiGLU.from_projections(torch.nn.Linear(24, 78, bias=False), layer.down_proj)


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
@pytest.mark.parametrize("tokens,dim,hidden,activation", [
    (16384, 512, 1792, "silu"), (4096, 2048, 5632, "silu"), (4096, 2048, 16384, "gelu_tanh")],
    ids=["512", "2048", "gemma-2b"])
def test_bf16_at_scale(recompute, tokens, dim, hidden, activation):
    """bf16 at FFN widths (the tensor-descriptor kernels on Hopper), against float64 on the GPU;
    the last at Gemma 2B's widths with its tanh-GELU gate."""
    tensors, g = make_inputs((tokens,), dim, hidden, "cuda")
    run_check(tensors, g, torch.bfloat16, recompute, "at scale", activation=activation)


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", [False, True], ids=["store", "recompute"])
def test_packed_bf16_at_scale(recompute):
    """``swiglu_packed`` in bf16 at Phi-3 mini's widths (3072 -> 2 x 8192), against float64 on
    the GPU: the packed weight's halves through the tensor-descriptor kernels."""
    (x, w_gate, w_up, w_down), g = make_inputs((2048,), 3072, 8192, "cuda")
    packed64 = torch.cat([w_gate, w_up]).detach().requires_grad_()
    check_against_float64(
        lambda x_, w_, wd_: fusedmlp.swiglu_packed(x_, w_, wd_, recompute=recompute),
        lambda x_, w_, wd_: swiglu_reference(x_, w_[:8192], w_[8192:], wd_),
        [t.detach().to(torch.bfloat16).requires_grad_() for t in (x, packed64, w_down)],
        [t.detach().to(torch.bfloat16).double().requires_grad_() for t in (x, packed64, w_down)],
        g.to(torch.bfloat16), g, f"packed at scale recompute={recompute}",
    )
