"""Fused Linear + bias + activation: output and every gradient against a float64 reference."""

import pytest
import torch
import triton
from helpers import (
    TOLERANCE, assert_close, backward_peak_bytes, check_against_float64, check_backward_twice, check_inference_forward,
    check_repeated_steps, check_replayed_step, compile_pingpong_for_hopper, every_other, first_store_backward_errors,
    forcing_tma_config, fp32_matmul_precision, rel_err,
    recording_launches, recording_pingpong_launches,
)
from torch import nn

import fusedmlp
from fusedmlp.kernels.configs import (
    LINEAR_DPRE_CONFIGS, LINEAR_FP32_CONFIGS, LINEAR_RESIDENT_ACTIVATIONS, LINEAR_RESIDENT_BIAS_FIRST,
    LINEAR_TMA_CONFIGS,
)
from fusedmlp.ops.activations import ACTIVATIONS
from fusedmlp.ops.linear_act import linear_act_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def make_inputs(lead_shape, in_features, out_features, device, bias=True, grads=(True, True, True)):
    """float64 masters; the weight scale keeps the pre-activation in each activation's curved range."""
    x = torch.randn(*lead_shape, in_features, dtype=torch.float64, device=device)
    w = torch.randn(out_features, in_features, dtype=torch.float64, device=device) / in_features**0.5
    b = torch.randn(out_features, dtype=torch.float64, device=device) if bias else None
    g = torch.randn(*lead_shape, out_features, dtype=torch.float64, device=device)
    for t, needs in zip((x, w, b), grads):
        if t is not None:
            t.requires_grad_(needs)
    return [x, w, b], g


def run_check(tensors64, g64, dtype, activation, save_preact, what="", transform=lambda ts: ts):
    # the reference runs on the very values the op gets (rounded to dtype), in float64
    tensors64 = [None if t is None else t.detach().to(dtype).double().requires_grad_(t.requires_grad) for t in tensors64]
    tensors = transform([None if t is None else t.detach().to(dtype) for t in tensors64])
    check_against_float64(
        lambda x, w, b: fusedmlp.linear_act(x, w, b, activation, save_preact),
        lambda x, w, b: linear_act_reference(x, w, b, activation),
        tensors, tensors64, g64.to(dtype), g64, f"{what} {activation} save_preact={save_preact}",
    )


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("save_preact", [False, True], ids=["saves-less", "save_preact"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_activation(device, activation, save_preact, dtype):
    tensors, g = make_inputs((37,), 45, 29, device)
    run_check(tensors, g, dtype, activation, save_preact)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize(
    "lead_shape,in_features,out_features", [((1,), 16, 8), ((3, 7), 33, 20), ((2, 5, 3), 24, 40)],
    ids=["N=1", "3d", "4d"],
)
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_dtypes_and_shapes(device, dtype, bias, lead_shape, in_features, out_features, activation):
    tensors, g = make_inputs(lead_shape, in_features, out_features, device, bias)
    run_check(tensors, g, dtype, activation, False)


@pytest.mark.parametrize(
    "grads", [(False, True, True), (True, False, False), (False, False, True), (True, True, False)],
    ids=["no-dx", "dx-only", "db-only", "no-db"],
)
@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
def test_partial_gradients(device, grads, activation):
    """Only the wanted gradients are computed (no-dx runs the dpre-only stream kernel)."""
    tensors, g = make_inputs((50,), 40, 36, device, grads=grads)
    run_check(tensors, g, torch.float32, activation, False, "partial")


def test_strided_inputs(device):
    """Transposed views of x and W, and a non-contiguous g, straight into the kernels; a bias
    with stride 2 (the kernels read a bias with unit stride: it is copied)."""
    x = torch.randn(40, 57, dtype=torch.float64, device=device).t().requires_grad_()  # [57, 40], strides (1, 57)
    w = (torch.randn(40, 30, dtype=torch.float64, device=device) / 40**0.5).t().requires_grad_()  # [30, 40]
    b = torch.randn(30, dtype=torch.float64, device=device, requires_grad=True)
    g = torch.randn(30, 57, dtype=torch.float64, device=device).t()
    for activation in ("gelu_tanh", "squared_relu"):
        run_check([x, w, b], g, torch.float32, activation, False, "strided",
                  transform=lambda ts: [ts[0], ts[1], every_other(ts[2])])


def test_strided_views_reach_the_kernel_uncopied(device, monkeypatch):
    import fusedmlp.ops.linear_act as ops

    seen = {}
    real = ops._launch_fwd

    def spy(x, weight, *args):
        seen["x"], seen["w"] = x, weight
        return real(x, weight, *args)

    monkeypatch.setattr(ops, "_launch_fwd", spy)
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    x = torch.randn(64, 48, device=device).t()
    w = torch.randn(64, 30, device=device).t()
    fusedmlp.linear_act(x, w, None, "relu")
    for name, original in (("x", x), ("w", w)):
        assert seen[name].data_ptr() == original.data_ptr() and seen[name].stride() == original.stride(), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu", "identity"])
@pytest.mark.parametrize("save_preact", [False, True], ids=["saves-less", "save_preact"])
def test_tma_kernels(device, monkeypatch, dtype, activation, save_preact):
    """The persistent tensor-descriptor kernels (forced on CPU): partial row, column and K tiles."""
    import fusedmlp.ops.linear_act as ops

    if device == "cuda":
        if dtype == torch.float32 or torch.cuda.get_device_capability()[0] < 9:
            pytest.skip("the TMA path is for 16-bit inputs on Hopper")
        monkeypatch.setattr(fusedmlp.ops._common, "PINGPONG", False)  # the Triton kernel, not the ping-pong one
    else:
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: True)
        monkeypatch.setattr(ops, "num_sms", lambda t: 3)  # fewer programs than tiles
    tensors, g = make_inputs((77,), 72, 40, device)  # 16-byte aligned rows; no multiple of the tiles
    if device == "cuda":
        assert ops.tma_eligible(*(t.to(dtype) for t in (tensors[0], tensors[1], g)))
    run_check(tensors, g, dtype, activation, save_preact, "tma")


@pytest.mark.gpu
@pytest.mark.parametrize("save_preact", [False, True], ids=["recompute", "save_preact"])
def test_step_replayed_from_a_cuda_graph(save_preact):
    """The bench's graphed impls and a user's captured training step: forward+backward captured
    once and replayed on new inputs, output and every gradient against float64."""
    check_replayed_step(lambda x, w, b: fusedmlp.linear_act(x, w, b, "gelu_tanh", save_preact),
                        lambda x, w, b: linear_act_reference(x, w, b, "gelu_tanh"),
                        lambda: make_inputs((2, 3000), 512, 1792, "cuda"), what=f"save_preact={save_preact}")


@pytest.mark.gpu
@pytest.mark.parametrize("activation,save_preact,kernels", [
    ("gelu_tanh", False, ("_fwd_plans", "_dpre_recompute_plans")),  # dpre with pre recomputed on the tile
    ("gelu_tanh", True, ("_fwd_plans", "_stream_plans")),  # the stream written over the saved pre
    ("relu", False, ("_fwd_plans", "_stream_plans")),  # the stream from the saved output
], ids=["recompute", "pre-saved", "from-output"])
def test_repeated_steps_replay_call_plans_on_gpu(activation, save_preact, kernels):
    """A training loop's plain steps on the same tensors: every step against float64, and the
    later steps replay the forward's launch and the dpre kernel's from call plans
    (ops/_common.py ``CallPlans``)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the forward's plan holds a Hopper form's launch (compute capability 9.0)")
    replayed = check_repeated_steps(lambda x, w, b: fusedmlp.linear_act(x, w, b, activation, save_preact),
                                    lambda x, w, b: linear_act_reference(x, w, b, activation),
                                    lambda: make_inputs((300,), 256, 192, "cuda"), what=activation)
    assert {f"fusedmlp.ops.linear_act.{name}" for name in kernels} <= set(replayed), replayed


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(LINEAR_TMA_CONFIGS)))
def test_every_tma_config_on_gpu(monkeypatch, index):
    """Every tile config of the persistent forward, not only the one the tuner picks (they differ
    in FLATTEN's tile x K loop and in programs per SM): several tiles per program, partial row,
    column and K tiles."""
    import triton

    import fusedmlp.ops.linear_act as ops

    with forcing_tma_config(monkeypatch, ops, ops._fwd_tma_launcher, index):
        for save_preact in (False, True):
            tensors, g = make_inputs((1000,), 200, 600, "cuda")
            try:
                run_check(tensors, g, torch.bfloat16, "gelu_tanh", save_preact, f"config {index}")
            except triton.runtime.errors.OutOfResources:
                assert save_preact, "every config fits without the pre-activation tile"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_ieee_gemms_run_on_cublas(dtype, monkeypatch):
    """fp32 at "highest" and fp64 (IEEE products, on CUDA cores in Triton) run the forward's
    GEMM on cuBLAS, no Triton forward kernel launched: every activation, with and without the
    bias and the pre-activation (relu with a bias and nothing kept: cuBLAS's relu epilogue),
    against float64."""
    import fusedmlp.ops.linear_act as ops

    launches = recording_launches(monkeypatch, (ops._fwd_launcher,))
    with fp32_matmul_precision("highest"):
        for activation in ACTIVATIONS:
            for bias in (True, False):
                for save_preact in (False, True):
                    tensors, g = make_inputs((300,), 200, 96, "cuda", bias=bias)
                    run_check(tensors, g, dtype, activation, save_preact, f"bias={bias}")
    assert not launches


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(LINEAR_FP32_CONFIGS)))
def test_every_tf32_config_on_gpu(index):
    """fp32 at "high" runs the Triton forward on TF32 tensor cores with LINEAR_FP32_CONFIGS
    (each fits shared memory with and without the pre-activation tile; the first runs untuned):
    against float64 within 5e-3 (10 mantissa bits a product), partial row, column and K tiles."""
    import fusedmlp.ops.linear_act as ops

    launcher = ops._fwd_launcher
    with fp32_matmul_precision("high"), launcher.forcing(launcher.fp32_configs[index]):
        for save_preact in (False, True):
            (x, w, b), _ = make_inputs((1000,), 200, 600, "cuda")
            x, w, b = (t.detach().float() for t in (x, w, b))
            y = fusedmlp.linear_act(x, w.requires_grad_(), b, "gelu_tanh", save_preact)  # (a pre tile when kept)
            err = rel_err(y, linear_act_reference(x.double(), w.double(), b.double(), "gelu_tanh"))
            assert err < 5e-3, (index, save_preact, err)


def test_inference_forward_keeps_no_preact(device, monkeypatch):
    """save_preact=True writes no pre-activation where autograd records nothing
    (helpers.check_inference_forward)."""
    import fusedmlp.ops.linear_act as linear_ops

    (x, w, b), _ = make_inputs((5, 3), 40, 24, device)
    check_inference_forward(
        monkeypatch, linear_ops, "linear_act_forward_impl", lambda args: args[4],
        lambda grad: fusedmlp.linear_act(x.detach().float(), w.detach().float().requires_grad_(grad),
                                         b.detach().float(), "gelu_tanh", save_preact=True),
        linear_act_reference(x.detach(), w.detach(), b.detach()), torch.float32, "linear_act")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PyTorch's forward-AD setup scripts functions
def test_forward_mode_ad_is_refused(device):
    """The ops have no forward-mode derivative: a dual input gets autograd.Function's error,
    not an output silently without its tangent (the inference path stays out of the way)."""
    import torch.autograd.forward_ad as forward_ad

    (x, w, b), _ = make_inputs((6,), 16, 8, device, grads=(False, False, False))
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(x.float(), torch.randn_like(x.float()))
        with pytest.raises(NotImplementedError, match="jvp"):
            fusedmlp.linear_act(dual, w.float(), b.float(), "relu")


def _forward_stack_bound(variant):
    """At most 16 bytes of stack per thread in the forward's epilogue; but Triton 3.8 compiles
    gelu with a bias at 208-256 (3.6, 3.7 and 3.9: 0-24), which measured no slower on an H100
    (benchmarks/NOTES.md, "Triton 3.7 and 3.8 on the GPU"), so that one variant may have 256 there."""
    return 256 if triton.__version__.startswith("3.8.") and variant == "gelu/bias" else 16


def test_pingpong_kernel_compiles_for_hopper():
    """The Gluon ping-pong forward compiles for sm_90a with the installed Triton, for every
    activation, with a bias and without (tests/helpers.py ``compile_pingpong_for_hopper``), with
    at most 16 bytes of stack: gelu's normal CDF in libdevice's erf form had 304 with a bias
    (benchmarks/NOTES.md, "Spills in the epilogues"); ``_forward_stack_bound``."""
    compile_pingpong_for_hopper("linear_act", "linear_act_fwd_pingpong_kernel", "LINEAR_PINGPONG_CONFIG", ACTIVATIONS,
                                max_stack=_forward_stack_bound)


def test_resident_kernel_compiles_for_hopper():
    """The resident-x forward (x's rows kept in shared memory, three consumers of 160 registers)
    compiles for sm_90a at K = 512 (8 chunks of x beside the 5-stage ring and the output
    buffer: within the shared memory) for every activation it is offered for, with a bias and
    without, the accumulator starting from the bias where the library starts it so. ptxas
    spills there, mostly the tile loop's addresses and counters, outside the main loop: up to
    208 bytes a thread with Triton 3.9 (silu with a bias; gelu_tanh 216 and sigmoid 192 with the
    bias after the main loop, 128 and 96 from it), 288 with 3.6 (sigmoid with the bias after the
    main loop); at most 320."""
    facts = {}
    for bias_first in (False, True):
        acts = [act for act in LINEAR_RESIDENT_ACTIVATIONS if (act in LINEAR_RESIDENT_BIAS_FIRST) == bias_first]
        facts.update(compile_pingpong_for_hopper(
            "linear_act", "linear_act_fwd_resident_kernel",
            f'LINEAR_RESIDENT_CONFIG:{{"K_TILES": 8, "BIAS_FIRST": {str(bias_first).lower()}}}', acts, max_stack=320))
    assert len(facts) == 2 * len(LINEAR_RESIDENT_ACTIVATIONS), facts
    assert all(fact["shared"] > 200 * 1024 for fact in facts.values()), facts  # x's 128 KiB is in there


def test_cooperative_kernel_compiles_for_hopper():
    """The ping-pong forward's cooperative forms (both consumers on each tile of 2 x 128 rows
    by 128 columns, or 2 x 64 by 256; 3 stages) compile for sm_90a within the shared memory,
    with at most 16 bytes of stack (``_forward_stack_bound``)."""
    for config in ("LINEAR_COOPERATIVE_CONFIG", "LINEAR_WIDE_COOPERATIVE_CONFIG"):
        compile_pingpong_for_hopper("linear_act", "linear_act_fwd_pingpong_kernel", config,
                                    ["gelu_tanh", "gelu", "relu"], max_stack=_forward_stack_bound)


def test_dpre_recompute_kernel_compiles_for_hopper():
    """The backward's dpre with pre recomputed on the tile (a ping-pong kernel, save_preact=False
    with gelu_tanh, gelu or silu) compiles for sm_90a within the shared memory, with and without
    bias and db: at 64 columns (K <= 512) with at most 16 bytes of stack (0 measured), at 128
    with at most 640 (up to 584 measured, with gelu; configs.py)."""
    for config, max_stack in (("LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG", 16), ("LINEAR_DPRE_RECOMPUTE_CONFIG", 640)):
        for activations in (["gelu_tanh", "silu"], ["silu", "gelu"]):  # db sums alternate: each with and without
            compile_pingpong_for_hopper("linear_act", "linear_act_dpre_recompute_pingpong_kernel", config,
                                        activations, max_stack=max_stack)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu", "silu"])
def test_dpre_recompute_pingpong_on_gpu(monkeypatch, dtype, activation):
    """save_preact=False with an activation whose derivative needs pre, on compute capability
    9.0: the backward's dpre comes from the ping-pong kernel that recomputes pre on the tile
    (never written), and every gradient matches float64: with and without bias, a bias that
    needs no gradient (added, no db), partial row and column tiles, a K not a multiple of the
    block, and on 3 SMs several tiles per program (odd and even counts per consumer); at both
    tile widths (K = 200 takes the 64 columns, K = 600 the 128)."""
    import fusedmlp.ops.linear_act as ops

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ping-pong kernels are for compute capability 9.0")
    monkeypatch.setattr(ops, "num_sms", lambda t: 3)
    fused = []
    real = ops.recompute_dpre
    monkeypatch.setattr(ops, "recompute_dpre", lambda *args: fused.append(real(*args)) or fused[-1])
    for shape, k, bias, grads in [((1000,), 200, True, (True, True, True)), ((3, 333), 200, False, (True, True, True)),
                                  ((129,), 200, True, (True, True, False)), ((257,), 200, True, (False, True, True)),
                                  ((1000,), 600, True, (True, True, True)), ((129,), 600, False, (True, True, True))]:
        fused.clear()
        tensors, g = make_inputs(shape, k, 392, "cuda", bias, grads)
        run_check(tensors, g, dtype, activation, False, f"dpre recompute {shape} K={k} bias={bias} grads={grads}")
        assert fused and all(result is not None for result in fused), "the backward did not take the kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu", "identity"])
def test_every_forward_form_on_gpu(monkeypatch, dtype, activation):
    """Each form of the linear forward on compute capability 9.0 (the Triton TMA kernel, the
    ping-pong kernel alternating, cooperative or cooperative on wide tiles, the resident-x
    kernel), forced: output and gradients match float64 with and without bias and
    pre-activation; row counts leave the last cooperative tile's second half partly or wholly
    past M (1000 = 3 x 256 + 232 rows; 999; 129); on 3 SMs each program walks several tiles.
    The resident form is not offered where pre is stored: forcing it there gets the rule.
    Untimed (autotuning off, as in the suite) the rule picks the resident form where it is
    offered (K <= 512), else the alternating form."""
    import fusedmlp.ops.linear_act as ops

    recording_pingpong_launches(monkeypatch, ops)
    forms = []
    real_pingpong, real_tma, real_resident = ops._launch_fwd_pingpong, ops._fwd_tma_launcher.launch, \
        ops._launch_fwd_resident
    monkeypatch.setattr(ops, "_launch_fwd_pingpong", lambda *args: forms.append(args[-1]) or real_pingpong(*args))
    monkeypatch.setattr(ops._fwd_tma_launcher, "launch",
                        lambda *args, **kwargs: forms.append("tma") or real_tma(*args, **kwargs))
    monkeypatch.setattr(ops, "_launch_fwd_resident", lambda *args: forms.append("resident") or real_resident(*args))
    for shape, bias, save_preact in [((1000,), True, False), ((3, 333), False, True), ((129,), True, True)]:
        tensors, g = make_inputs(shape, 200, 392, "cuda", bias)
        rule = "alternating" if save_preact else "resident"
        for form in ops.LINEAR_FORWARD_FORMS:
            forms.clear()
            with ops.linear_forward_form.forcing(form):
                run_check(tensors, g, dtype, activation, save_preact, f"{form} {shape} bias={bias}")
            expected = rule if form == "resident" and save_preact else form
            assert forms and set(forms) == {expected}, (form, forms)  # the backward may recompute pre
        forms.clear()
        run_check(tensors, g, dtype, activation, save_preact, f"rule {shape} bias={bias}")
        assert forms and set(forms) == {rule}, forms


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("activation", LINEAR_RESIDENT_ACTIVATIONS)
def test_resident_forward_on_gpu(monkeypatch, dtype, activation):
    """The resident-x forward (x's rows kept in shared memory, three consumers), forced on
    compute capability 9.0 for every activation it is offered for (the accumulator from the
    bias where the library starts it so): output and gradients match float64, with and without bias, on
    shapes that walk its units every way: several row blocks per program (3 SMs), a row block
    split in 2 shares and in 3 with a shorter last one (``resident_row_shares``), partial row,
    column and K tiles, one x chunk (K = 64) and eight (K = 512), three column tiles (one per
    consumer) and eleven."""
    import fusedmlp.ops.linear_act as ops

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the resident kernel is for compute capability 9.0")
    shares = []
    real = ops._launch_fwd_resident
    monkeypatch.setattr(ops, "_launch_fwd_resident", lambda x, w, b, y, common: shares.append(
        ops.resident_row_shares(common["M"], common["N"], ops.num_sms(x))) or real(x, w, b, y, common))
    cases = [((1000,), 200, 392, 3, True),  # 8 row blocks on 3 SMs, 4 tiles each
             ((300,), 512, 1000, 8, False),  # 3 row blocks in 2 shares of 4 tiles (the last tile partial)
             ((2, 70), 64, 384, 3, True),  # one x chunk, 3 tiles
             ((129,), 328, 1304, 20, True)]  # 2 row blocks in shares of 4, 4 and 3 tiles; K = 5 x 64 + 8
    with ops.linear_forward_form.forcing("resident"):
        for shape, k, n, sms, bias in cases:
            monkeypatch.setattr(ops, "num_sms", lambda t, sms=sms: sms)
            tensors, g = make_inputs(shape, k, n, "cuda", bias)
            run_check(tensors, g, dtype, activation, False, f"resident {shape} {k} -> {n} on {sms} SMs")
    assert shares == [1, 2, 1, 3], shares


def test_forward_forms_offer_the_resident_form_where_it_fits(monkeypatch):
    """The linear forward's forms on a (pretended) compute capability 9.0 device: the resident-x
    form only up to K = LINEAR_RESIDENT_MAX_K, for every activation but gelu (whose epilogue it
    runs slower than the alternating form), without pre stored, with at least a column tile of
    128 per consumer; off that device the TMA kernel alone."""
    import fusedmlp.ops.linear_act as ops
    from fusedmlp.kernels.configs import LINEAR_RESIDENT_MAX_K

    x = torch.empty(4, 8)
    assert ops._forward_forms(x, 1792, 512, "gelu_tanh", False) == ("tma",)
    monkeypatch.setattr(ops, "pingpong_device", lambda t: True)
    for act in ACTIVATIONS:
        forms = ops._forward_forms(x, 1792, 512, act, False)
        assert forms == (tuple(f for f in ops.LINEAR_FORWARD_FORMS if f != "resident") if act == "gelu"
                         else ops.LINEAR_FORWARD_FORMS), (act, forms)
    assert "resident" in ops._forward_forms(x, 257, 8, "relu", False)  # three column tiles, one K step
    for n, k, store_pre in [(1792, LINEAR_RESIDENT_MAX_K + 8, False), (1792, 512, True), (256, 512, False)]:
        forms = ops._forward_forms(x, n, k, "gelu_tanh", store_pre)
        assert "resident" not in forms and "alternating" in forms, (n, k, store_pre, forms)


def test_resident_row_shares():
    """The resident forward's programs per row block: about one per SM where row blocks are
    fewer than SMs, one where they are not, and never a share with fewer column tiles than the
    kernel has consumers (a unit's x is freed by one arrival per consumer: a short share would
    hang the kernel)."""
    from fusedmlp.kernels.configs import LINEAR_RESIDENT_CONSUMERS
    from fusedmlp.ops.linear_act import resident_row_shares

    assert resident_row_shares(16384, 1792, 132) == 1  # 128 row blocks
    assert resident_row_shares(8192, 1792, 132) == 2  # 64 row blocks, 14 tiles: 7 + 7
    assert resident_row_shares(128, 1792, 132) == 3  # 14 tiles: 5 + 5 + 4 (four shares would leave 2)
    assert resident_row_shares(4096, 1024, 132, block_m=64) == 2  # 64 row blocks of 64 rows, 8 tiles: 4 + 4
    for m in (1, 128, 129, 1000, 8192, 65536):
        for n in range(384, 40 * 128, 104):
            for sms in (3, 8, 20, 78, 114, 132):
                shares = resident_row_shares(m, n, sms)
                tiles = -(-n // 128)
                per = -(-tiles // shares)
                sizes = [min(per, tiles - i * per) for i in range(shares)]
                assert shares >= 1 and min(sizes) >= LINEAR_RESIDENT_CONSUMERS, (m, n, sms, sizes)


@pytest.mark.gpu
def test_forward_form_timed_on_first_call_on_gpu(monkeypatch):
    """Autotuning on: the first linear forward of a shape key times every form and files
    the fastest (ops/_common.py FastestForm, shared with the GLU forward); output correct."""
    import fusedmlp.kernels.configs as configs
    import fusedmlp.ops.linear_act as ops
    from fusedmlp.ops._common import FastestForm

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ping-pong forms are for compute capability 9.0")
    monkeypatch.setattr(configs, "AUTOTUNE", True)
    chooser = FastestForm()
    monkeypatch.setattr(ops, "linear_forward_form", chooser)
    tensors, _ = make_inputs((1000,), 256, 392, "cuda", True)
    x64, w64, b64 = tensors
    y = fusedmlp.linear_act(x64.to(torch.bfloat16), w64.to(torch.bfloat16), b64.to(torch.bfloat16), "gelu_tanh")
    assert_close(y, linear_act_reference(x64, w64, b64, "gelu_tanh"), torch.bfloat16, "timed forward")
    (key, times), = chooser.times.items()
    assert set(times) == set(ops.LINEAR_FORWARD_FORMS) and chooser.chosen[key] == min(times, key=times.get)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_pingpong_forward_on_gpu(monkeypatch, dtype, activation):
    """The ping-pong forward (compute capability 9.0): it runs, and output and gradients match
    float64 with and without bias and pre-activation; on 3 SMs each program walks several
    tiles (odd and even counts per consumer), with partial row, column and K tiles."""
    import fusedmlp.ops.linear_act as ops

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ping-pong kernel is for compute capability 9.0")
    monkeypatch.setattr(ops, "num_sms", lambda t: 3)
    calls = []
    real = ops._launch_fwd_pingpong
    monkeypatch.setattr(ops, "_launch_fwd_pingpong", lambda *args: calls.append(1) or real(*args))
    for shape, bias, save_preact in [((1000,), True, False), ((3, 333), False, True), ((129,), True, True)]:
        tensors, g = make_inputs(shape, 200, 392, "cuda", bias)
        run_check(tensors, g, dtype, activation, save_preact, f"ping-pong {shape} bias={bias}")
    assert calls, "the forward did not take the ping-pong kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(LINEAR_DPRE_CONFIGS)))
def test_every_dpre_config_on_gpu(index):
    """Every config of the dpre stream (rows per step, columns, warps), not only the tuner's:
    row blocks with a partial last step, a partial column block, with and without bias."""
    import fusedmlp.ops.linear_act as ops

    launcher = ops._dpre_launcher
    with launcher.forcing(launcher.configs[index]):
        for bias, activation in ((True, "gelu_tanh"), (False, "silu")):
            tensors, g = make_inputs((301,), 64, 200, "cuda", bias)
            run_check(tensors, g, torch.bfloat16, activation, True, f"dpre config {index}")


@pytest.mark.parametrize("save_preact", [False, True], ids=["saves-less", "save_preact"])
def test_backward_twice(device, save_preact):
    """retain_graph=True: without save_preact the backward runs again to the same gradients;
    with it, the first backward wrote dpre over the saved pre-activation: a clear error."""
    tensors, g = make_inputs((33,), 40, 24, device)
    leaves = [t.detach().float().requires_grad_() for t in tensors]
    y = fusedmlp.linear_act(*leaves, "gelu_tanh", save_preact)
    check_backward_twice(y, leaves, g.float(), refuses=save_preact)


@pytest.mark.gpu
def test_save_preact_backward_allocates_no_dpre():
    """With save_preact the backward writes dpre over the saved pre-activation: its peak is the
    gradients and their cuBLAS workspace, no [N, out] dpre (nor chunks of it)."""
    n, k, out = 8192, 1024, 4096
    x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(out, k, device="cuda") / k**0.5).to(torch.bfloat16).requires_grad_()
    b = torch.randn(out, device="cuda", dtype=torch.bfloat16).requires_grad_()
    g = torch.randn(n, out, device="cuda", dtype=torch.bfloat16)
    peak, grads = backward_peak_bytes(lambda: fusedmlp.linear_act(x, w, b, "gelu_tanh", True), (x, w, b), g)
    dpre = n * out * 2
    assert peak < sum(t.numel() for t in grads) * 2 + dpre // 4, (peak, dpre)


@pytest.mark.gpu
def test_first_save_preact_backward_with_autotuning():
    """With autotuning on, the first save_preact backward of a shape is right: the dpre stream
    that writes over the saved pre-activation is not timed on the caller's tensors first."""
    errors = first_store_backward_errors(
        "fusedmlp.linear_act(a['x'], a['w'], a['b'], 'gelu_tanh', True)",
        "linear_act_reference(a['x'], a['w'], a['b'], 'gelu_tanh')",
        {"x": (1000, 256), "w": (512, 256), "b": (512,), "g": (1000, 512)},
    )
    for name, err in errors.items():
        assert err < TOLERANCE[torch.bfloat16], (name, err)


@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("activation,save_preact", [("gelu_tanh", False), ("sigmoid", False), ("silu", True),
                                                    ("identity", False)])
def test_fused_dgrad_kernel(device, monkeypatch, tma, dtype, activation, save_preact):
    """The opt-in dgrad kernel with act' applied inside its main loop (FUSEDMLP_FUSED_DGRAD=1)."""
    import fusedmlp.ops.linear_act as ops

    monkeypatch.setattr(ops, "FUSED_DGRAD", True)
    if tma and device == "cuda" and (dtype == torch.float32 or torch.cuda.get_device_capability()[0] < 9):
        pytest.skip("the TMA path is for 16-bit inputs on Hopper")
    if tma and device == "cpu":
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: True)
        monkeypatch.setattr(ops, "num_sms", lambda t: 3)
    if not tma:
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: False)
    tensors, g = make_inputs((77,), 72, 40, device)
    run_check(tensors, g, dtype, activation, save_preact, "fused dgrad")


@pytest.mark.parametrize("save_preact", [False, True], ids=["saves-less", "save_preact"])
def test_identity_backward_streams_nothing(device, monkeypatch, save_preact):
    """act' = 1: dpre is g itself, so the backward launches no dpre stream (db is g's column
    sum); the gradients still match float64."""
    import fusedmlp.ops.linear_act as ops

    def refuse(*args, **kwargs):
        raise AssertionError("the identity's backward launched a dpre stream")

    monkeypatch.setattr(ops._dpre_launcher, "launch", refuse)
    monkeypatch.setattr(ops._dpre_in_place_launcher, "launch", refuse)
    tensors, g = make_inputs((5, 41), 24, 40, device)
    run_check(tensors, g, torch.float32, "identity", save_preact, "streamless")


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_backward_in_row_chunks(device, monkeypatch, activation):
    import fusedmlp.ops._common as common

    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)  # chunk however small
    assert len(common.backward_row_chunks(300, 128, 1)) == 3
    tensors, g = make_inputs((300,), 24, 40, device)
    run_check(tensors, g, torch.float32, activation, False, "chunked")


@pytest.mark.parametrize(
    "activation,save_preact,expected",
    [("gelu", False, "x"), ("relu", False, "x,y"), ("identity", False, "x"), ("silu", True, "pre,x")],
)
def test_saved_tensors(device, activation, save_preact, expected):
    """What the backward keeps: x alone (recompute), x and the output, or x and pre."""
    x = torch.randn(64, 32, device=device, requires_grad=True)
    layer = fusedmlp.FusedLinear(32, 48, activation=activation, save_preact=save_preact).to(device)
    params = {p.data_ptr() for p in layer.parameters()}
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    activations = [t for t in saved if t.data_ptr() not in params]
    names = []
    for t in activations:
        if t.data_ptr() == x.data_ptr():
            names.append("x")
        elif t.data_ptr() == y.data_ptr():
            names.append("y")
        else:
            assert t.shape == y.shape, t.shape
            names.append("pre")
    assert ",".join(sorted(names)) == expected


def test_empty_batch(device):
    x = torch.randn(0, 24, device=device, requires_grad=True)
    w = torch.randn(18, 24, device=device, requires_grad=True)
    b = torch.randn(18, device=device, requires_grad=True)
    y = fusedmlp.linear_act(x, w, b, "silu")
    assert y.shape == (0, 18)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))


def test_db_is_bitwise_deterministic(device):
    n = 2000 if device == "cuda" else 300
    x = torch.randn(n, 40, device=device)
    w = torch.randn(50, 40, device=device, requires_grad=True)
    b = torch.randn(50, device=device, requires_grad=True)
    g = torch.randn(n, 50, device=device)
    dbs = [torch.autograd.grad(fusedmlp.linear_act(x, w, b, "gelu"), b, g)[0] for _ in range(3)]
    assert all(torch.equal(dbs[0], db) for db in dbs[1:])


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("activation", ValueError, "activation must be one of"),
        ("in_features", ValueError, "features in its last dimension"),
        ("bias_length", ValueError, "bias must have 20 elements"),
        ("dtype", TypeError, "weight has dtype"),
        ("int", TypeError, "x must be float16"),
        ("weight_rank", ValueError, "weight must be 2-D"),
        ("save_preact", TypeError, "save_preact must be a bool"),
        ("no_features", ValueError, "weight has no input features"),
    ],
)
def test_bad_inputs(device, case, exc, match):
    x = torch.randn(5, 12, device=device)
    w = torch.randn(20, 12, device=device)
    b = torch.randn(20, device=device)
    kwargs = {"activation": "relu"}
    if case == "activation":
        kwargs["activation"] = "tanh"
    elif case == "in_features":
        x = torch.randn(5, 13, device=device)
    elif case == "bias_length":
        b = torch.randn(21, device=device)
    elif case == "dtype":
        w = w.double()
    elif case == "int":
        x = x.to(torch.int32)
    elif case == "weight_rank":
        w = w[None]
    elif case == "no_features":
        x, w = x[:, :0], w[:, :0]
    elif case == "save_preact":
        kwargs["save_preact"] = "yes"
    with pytest.raises(exc, match=match):
        fusedmlp.linear_act(x, w, b, **kwargs)


@pytest.mark.parametrize("activation,save_preact", [("gelu_tanh", False), ("relu", False), ("silu", True)])
def test_torch_compile_fullgraph(device, activation, save_preact):
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    x = torch.randn(2, 33, 40, device=device, requires_grad=True)
    w = torch.randn(24, 40, device=device, requires_grad=True)
    b = torch.randn(24, device=device, requires_grad=True)

    def step(x, w, b):
        return fusedmlp.linear_act(x, w, b, activation, save_preact).square().sum()

    loss = torch.compile(step, fullgraph=True, backend=backend)(x, w, b)
    grads = torch.autograd.grad(loss, (x, w, b))
    eager_loss = step(x, w, b)
    eager = torch.autograd.grad(eager_loss, (x, w, b))
    assert rel_err(loss, eager_loss) < 1e-5
    for got, want in zip(grads, eager):
        assert rel_err(got, want) < 1e-5


def test_fused_linear_is_a_drop_in(device):
    """Same parameters and state-dict keys as nn.Linear; loads a Linear checkpoint; same result as Linear+act."""
    linear = nn.Linear(24, 36).to(device, torch.float64)
    layer = fusedmlp.FusedLinear(24, 36, activation="gelu").to(device, torch.float64)
    assert isinstance(layer, nn.Linear)
    assert layer.state_dict().keys() == linear.state_dict().keys()
    layer.load_state_dict(linear.state_dict())
    x = torch.randn(7, 24, device=device, dtype=torch.float64)
    assert_close(layer(x), torch.nn.functional.gelu(linear(x)), torch.float64, "FusedLinear")
    shared = fusedmlp.FusedLinear.from_linear(linear, activation="relu")
    assert shared.weight is linear.weight and shared.bias is linear.bias
    assert_close(shared(x), torch.relu(linear(x)), torch.float64, "from_linear")
    with pytest.raises(ValueError, match="activation must be one of"):
        fusedmlp.FusedLinear(4, 4, activation="swish")


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu"])
@pytest.mark.parametrize("save_preact", [False, True], ids=["saves-less", "save_preact"])
@pytest.mark.parametrize("tokens,d_in,d_out", [(16384, 512, 1792), (4096, 2048, 5632)])
def test_bf16_at_scale(activation, save_preact, tokens, d_in, d_out):
    """bf16 at FFN widths (the tensor-descriptor kernels on Hopper), against float64 on the GPU."""
    tensors, g = make_inputs((tokens,), d_in, d_out, "cuda")
    run_check(tensors, g, torch.bfloat16, activation, save_preact, "at scale")


@pytest.mark.parametrize("activation", ["gelu", "identity"])
def test_second_derivative_is_refused(device, activation):
    """The backward builds no graph: differentiating it again raises (a gradient penalty would
    otherwise get part of its second derivative without a word)."""
    (x, w, b), _ = make_inputs((5,), 24, 20, device)
    y = fusedmlp.linear_act(x.float(), w.float(), b.float(), activation)
    (gw,) = torch.autograd.grad(y.square().sum(), w, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gw.square().sum().backward()
