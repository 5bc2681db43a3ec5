"""Fused LoRA linear: output and dx, dW, db, dA, dB against a float64 reference; LoRALinear; PEFT patching."""

import contextlib
import copy

import pytest
import torch
from helpers import (
    assert_close, check_against_float64, check_backward_twice, check_inference_forward, check_repeated_steps,
    check_replayed_step,
    compile_pingpong_for_hopper, eager_bound, every_other, fp32_matmul_precision, recording_launches,
    recording_module_launches, recording_pingpong_launches, rel_err,
)
from torch import nn

import fusedmlp
from fusedmlp.kernels.configs import LORA_CONFIGS, LORA_FP32_CONFIGS
from fusedmlp.ops.activations import activation_reference, check_activation
from fusedmlp.ops.lora import lora_linear_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.fixture(autouse=True)
def _one_kernel_forward(monkeypatch):
    """This file's tests are of the one-kernel forward forms, unless they ask for the merged
    one (``ops.MERGED_FORWARD``), which would otherwise take their identity calls on Hopper."""
    import fusedmlp.ops.lora as ops

    monkeypatch.setattr(ops, "MERGED_FORWARD", False)


def make_inputs(lead_shape, d_in, d_out, r, device, bias=True, grads=(True, False, True, True, True)):
    """float64 masters of (x, W, b, A, B) and g. W frozen by default, as in LoRA training.

    B is random, not PEFT's zero init, so that the low-rank path shows in every output and gradient.
    """
    x = torch.randn(*lead_shape, d_in, dtype=torch.float64, device=device)
    w = torch.randn(d_out, d_in, dtype=torch.float64, device=device) / d_in**0.5
    b = torch.randn(d_out, dtype=torch.float64, device=device) if bias else None
    a = torch.randn(r, d_in, dtype=torch.float64, device=device) / d_in**0.5
    lb = torch.randn(d_out, r, dtype=torch.float64, device=device) / r**0.5
    g = torch.randn(*lead_shape, d_out, dtype=torch.float64, device=device)
    for t, needs in zip((x, w, b, a, lb), grads):
        if t is not None:
            t.requires_grad_(needs)
    return [x, w, b, a, lb], g


def rounded_reference(dtype):
    """The float64 reference with the rank-r product ``scale * x @ A.T`` rounded to ``dtype``, as
    the op (and PyTorch) holds it in memory: without that rounding, bf16 moves pre across relu's
    kink often enough to dominate the comparison. Gradients pass through the rounding unchanged."""
    linear = torch.nn.functional.linear

    def reference(x, w, b, a, lb, scale, activation, x_lora=None):
        xs = (scale * linear(x if x_lora is None else x_lora, a)).to(dtype).double()
        return activation_reference(linear(x, w, b) + linear(xs, lb), check_activation(activation))

    return reference


def run_check(tensors64, g64, dtype, activation, scale=0.75, save_preact=False, what="", transform=lambda ts: ts):
    tensors64 = [None if t is None else t.detach().to(dtype).double().requires_grad_(t.requires_grad)
                 for t in tensors64]
    tensors = transform([None if t is None else t.detach().to(dtype) for t in tensors64])
    if activation == "relu":
        # g is zeroed where the float64 pre-activation lies within 1e-5 RMS of relu's kink: the
        # derivative jumps there and fp32 rounding may land on either side (one such element
        # in 12000 moved an fp32 dx by 1.6e-3, a discontinuity of the function, not a kernel error)
        with torch.no_grad():
            pre = rounded_reference(dtype)(*tensors64, scale, "identity")
            g64 = torch.where(pre.abs() > 1e-5 * pre.pow(2).mean().sqrt(), g64, 0.0)
    check_against_float64(
        lambda x, w, b, a, lb: fusedmlp.lora_linear(x, w, b, a, lb, scale, activation, save_preact=save_preact),
        lambda x, w, b, a, lb: rounded_reference(dtype)(x, w, b, a, lb, scale, activation),
        tensors, tensors64, g64.to(dtype), g64, f"{what} {activation} save_preact={save_preact}",
    )


@pytest.mark.parametrize("activation", fusedmlp.ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_activation(device, activation, dtype):
    tensors, g = make_inputs((37,), 45, 29, 3, device)
    run_check(tensors, g, dtype, activation)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("r", [1, 3, 24, 40], ids=lambda r: f"r={r}")
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_dtypes_and_ranks(device, dtype, r, bias):
    tensors, g = make_inputs((3, 7), 33, 20, r, device, bias)
    run_check(tensors, g, dtype, "gelu", scale=16 / r)


@pytest.mark.parametrize(
    "grads", [(True, True, True, True, True), (False, False, False, True, True), (True, False, False, False, False),
              (False, False, True, False, True)],
    ids=["all-incl-W", "adapter-only", "dx-only", "db-dB"],
)
@pytest.mark.parametrize("activation,save_preact", [("silu", False), ("relu", False), ("gelu_tanh", True)])
def test_partial_gradients(device, grads, activation, save_preact):
    tensors, g = make_inputs((50,), 40, 36, 5, device, grads=grads)
    run_check(tensors, g, torch.float32, activation, save_preact=save_preact, what="partial")


def test_strided_inputs(device):
    """Transposed views of x, W, A and B go to the kernel as they are; a bias with stride 2 is
    copied (the kernels read it with unit stride)."""
    x = torch.randn(40, 57, dtype=torch.float64, device=device).t().requires_grad_()
    w = (torch.randn(40, 30, dtype=torch.float64, device=device) / 40**0.5).t()
    b = torch.randn(30, dtype=torch.float64, device=device, requires_grad=True)
    a = (torch.randn(40, 6, dtype=torch.float64, device=device) / 40**0.5).t().requires_grad_()
    lb = (torch.randn(6, 30, dtype=torch.float64, device=device) / 6**0.5).t().requires_grad_()
    g = torch.randn(30, 57, dtype=torch.float64, device=device).t()
    run_check([x, w, b, a, lb], g, torch.float32, "squared_relu", what="strided",
              transform=lambda ts: [ts[0], ts[1], every_other(ts[2]), ts[3], ts[4]])


@pytest.mark.parametrize("r", [3, 24, 40], ids=lambda r: f"r={r}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("activation,save_preact", [("gelu_tanh", False), ("relu", False), ("identity", True)])
def test_tma_kernel(device, monkeypatch, r, dtype, activation, save_preact):
    """The persistent tensor-descriptor kernel (forced on CPU): partial row, column, K and rank tiles."""
    import fusedmlp.ops.lora as ops

    if device == "cuda":
        if dtype == torch.float32 or torch.cuda.get_device_capability()[0] < 9:
            pytest.skip("the TMA path is for 16-bit inputs on Hopper")
    else:
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: True)
        monkeypatch.setattr(ops, "num_sms", lambda t: 3)  # fewer programs than tiles
    monkeypatch.setattr(ops, "ONCHIP_FORWARD", False)  # not the ping-pong kernels with xs on chip
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", False)
    tensors, g = make_inputs((77,), 72, 40, r, device)
    if device == "cuda":
        assert ops.tma_eligible(*(t.to(dtype) for t in (tensors[0], tensors[1], tensors[3], g)))
    run_check(tensors, g, dtype, activation, save_preact=save_preact, what="tma")


@pytest.mark.parametrize("limits", [(0, 64), (10**9, 0), (10**9, 64)],
                         ids=["cublas-by-size", "cublas-by-rank", "in-loop"])
@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
def test_both_forward_paths(device, monkeypatch, limits, tma):
    """xs from the main loop or from cuBLAS (chosen by input size and rank), both kernel forms."""
    import fusedmlp.ops.lora as ops

    if tma and device == "cpu":
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: True)
        monkeypatch.setattr(ops, "num_sms", lambda t: 3)
    elif not tma:
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: False)
    monkeypatch.setattr(ops, "IN_LOOP_MAX_MACS", limits[0])
    monkeypatch.setattr(ops, "IN_LOOP_MAX_RANK", limits[1])
    monkeypatch.setattr(ops, "ONCHIP_FORWARD", False)
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", False)
    tensors, g = make_inputs((45,), 72, 40, 8, device)  # 16-byte aligned rows for the descriptors
    run_check(tensors, g, torch.bfloat16 if tma else torch.float32, "sigmoid", what=f"limits {limits}")


def test_pingpong_kernel_compiles_for_hopper():
    """The Gluon ping-pong LoRA forward (xs @ B.T as its main loop's tail steps) compiles for
    sm_90a with the installed Triton, pre stored and not, alternating tiles and on wide
    cooperative tiles (its form beyond LORA_PINGPONG_MAX_K); so does the backward's dx kernel
    (d_xa @ A as its tail steps, W read as [K, N] tiles), without spills, and its form that also
    forms dB at ranks padded to 16 and 32."""
    compile_pingpong_for_hopper("lora", "lora_fwd_pingpong_kernel", "LINEAR_PINGPONG_CONFIG", ["gelu_tanh", "relu"])
    compile_pingpong_for_hopper("lora", "lora_fwd_pingpong_kernel", "LINEAR_WIDE_COOPERATIVE_CONFIG",
                                ["gelu_tanh", "relu"])
    compile_pingpong_for_hopper("linear_act", "dgrad_pingpong_kernel", "DGRAD_PINGPONG_CONFIG", ["identity"],
                                max_stack=0)
    for rank_block in (16, 32):  # and the one that also forms dB (xs tiles of the padded rank)
        compile_pingpong_for_hopper("lora", "lora_dgrad_db_kernel", f'DGRAD_PINGPONG_CONFIG:{{"RANK_BLOCK": {rank_block}}}',
                                    ["identity"], max_stack=0)


def test_onchip_kernel_compiles_for_hopper():
    """The forward with xs formed on chip (``lora_fwd_onchip_kernel``) compiles for sm_90a at its
    rank block and stage count (configs.py's LORA_ONCHIP_STAGES), within the shared memory,
    pre stored and not, with and without a bias."""
    from fusedmlp.kernels.configs import LORA_ONCHIP_STAGES

    for rank_block, stages in LORA_ONCHIP_STAGES.items():
        compile_pingpong_for_hopper("lora", "lora_fwd_onchip_kernel",
                                    f'LORA_ONCHIP_CONFIG:{{"RANK_BLOCK": {rank_block}, "STAGES": {stages}}}',
                                    ["identity", "gelu_tanh"])


def test_handoff_kernel_compiles_for_hopper():
    """The forward with xs handed over through memory (``lora_fwd_handoff_kernel``) compiles for
    sm_90a on its wide cooperative tiles at each rank block of LORA_HANDOFF_RANK_BLOCKS, within
    the shared memory, pre stored and not, with and without a bias."""
    from fusedmlp.kernels.configs import LORA_HANDOFF_RANK_BLOCKS

    for rank_block in LORA_HANDOFF_RANK_BLOCKS:
        compile_pingpong_for_hopper("lora", "lora_fwd_handoff_kernel",
                                    f'LORA_HANDOFF_CONFIG:{{"RANK_BLOCK": {rank_block}}}', ["identity", "gelu_tanh"])


def test_onchip_units():
    """``_onchip_segments``: no run of a row block's column tiles is empty, and over a range of
    shapes and SM counts the choice is the valid count that minimises (x bytes read at once,
    bounded below by ONCHIP_X_BYTES; the busiest program's tiles plus the rank product's cost).
    On 132 SMs at K = 1024 in bf16: 32768 x 1024 -> 1024 in runs of 2 tiles (4 per row block:
    8.6 MB of x at once; 2 would read 17 MB), 8192 rows in runs of 4 (2 per row block)."""
    from fusedmlp.ops._common import cdiv
    from fusedmlp.ops.lora import ONCHIP_RANK_TILE_COST, ONCHIP_X_BYTES, _onchip_segments

    def key(m, n, k, sms, segments):
        units = cdiv(m, 128) * segments
        x_bytes = cdiv(min(units, sms), segments) * 128 * k * 2
        return max(x_bytes, ONCHIP_X_BYTES), cdiv(units, sms) * (cdiv(cdiv(n, 128), segments) + ONCHIP_RANK_TILE_COST)

    for m in (1, 127, 300, 8192, 20000, 32768):
        for n in (8, 392, 520, 1024, 4096, 14336):
            for k, sms in ((64, 3), (1024, 114), (1024, 132), (512, 132)):
                segments = _onchip_segments(m, n, k, 2, sms, 128, 128)
                tiles = cdiv(n, 128)
                valid = [s for s in range(1, tiles + 1) if (s - 1) * cdiv(tiles, s) < tiles]
                assert segments in valid, (m, n, k, sms, segments)
                assert key(m, n, k, sms, segments) == min(key(m, n, k, sms, s) for s in valid), (m, n, k, sms)
                assert segments == min(s for s in valid if key(m, n, k, sms, s) == key(m, n, k, sms, segments))
    assert _onchip_segments(32768, 1024, 1024, 2, 132, 128, 128) == 4
    assert _onchip_segments(8192, 1024, 1024, 2, 132, 128, 128) == 2


def test_handoff_grid():
    """``_handoff_grid`` on 132 SMs, 128 x 256 tiles (tiles, row blocks): the shapes where the
    handoff kernel beat the forms before it on an H100 take it, on every SM (8192 x 4096 ->
    4096: 100 programs of 8 tiles, 32 of 7 tiles and 2 items; 32768 x 4096 -> 4096; 16384 x
    4096 -> 14336; 2048 x 4096 -> 4096; 16384 x 1024 -> 4096), and those where the items do not
    fit in the slack of the last round of tiles do not (16384 x 2048 -> 2048 and 32768 x 1024
    -> 1024, where it tied or lost; 1024 x 4096 -> 4096: one tile each, no slack)."""
    from fusedmlp.ops.lora import _handoff_grid

    for rows, out in ((8192, 4096), (32768, 4096), (16384, 14336), (2048, 4096), (16384, 4096)):
        assert _handoff_grid((rows // 128) * (out // 256), rows // 128, 132) == (132, True), (rows, out)
    for rows, out in ((16384, 2048), (32768, 1024), (1024, 4096)):
        assert not _handoff_grid((rows // 128) * (out // 256), rows // 128, 132)[1], (rows, out)
    assert _handoff_grid(1024, 128, 132)[0] == 128  # 16384 x 2048 -> 2048: 8 tiles and an item each


@pytest.mark.gpu
@pytest.mark.parametrize("activation,save_preact", [("identity", False), ("gelu_tanh", False), ("silu", True)])
def test_onchip_forward_on_gpu(monkeypatch, activation, save_preact):
    """xs formed on chip (``lora_fwd_onchip_kernel``) for r = 8 and 16 at 300 x 200 -> 520
    (partial rows, columns, K and ranks; 3 row blocks of 5 column tiles) on 3 SMs, with the
    units the rule picks and forced to 2, 3 and 5 runs per row block (runs of 3 + 2, 2 + 2 + 1
    and 1 tile), bf16 and (r = 16) fp16; r = 24, 40 and 3 take the other forms. Outputs and
    every gradient against float64 (dB reads the xs the kernel wrote)."""
    import fusedmlp.ops.lora as ops

    recording_pingpong_launches(monkeypatch, ops)  # 3 SMs
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", False)
    real_segments = ops._onchip_segments
    launched = recording_module_launches(monkeypatch, ops)
    cases = ((8, None, torch.bfloat16), (16, 2, torch.bfloat16), (8, 3, torch.bfloat16), (16, 5, torch.bfloat16),
             (16, None, torch.float16), (24, None, torch.bfloat16), (40, None, torch.bfloat16), (3, None, torch.bfloat16))
    for r, segments, dtype in cases:
        monkeypatch.setattr(ops, "_onchip_segments", real_segments if segments is None else lambda *a: segments)
        launched.clear()
        tensors, g = make_inputs((300,), 200, 520, r, "cuda")
        run_check(tensors, g, dtype, activation, scale=2.0, save_preact=save_preact,
                  what=f"on chip r={r} segments={segments} {dtype}")
        assert (ops.lora_fwd_onchip_kernel in launched) == (r in (8, 16)), (r, launched)


@pytest.mark.gpu
@pytest.mark.parametrize("activation,save_preact", [("identity", False), ("gelu_tanh", False), ("silu", True)])
def test_handoff_forward_on_gpu(monkeypatch, activation, save_preact):
    """xs handed over through memory (``lora_fwd_handoff_kernel``), taken wherever eligible
    (HANDOFF_FORWARD "always": at these small shapes the items do not fit): 200-wide inputs (4 K steps, the last
    partial; 136 at r = 24: 3 K steps, so an item's last stage reads its second x tile wholly
    past K), 1000 rows (8 row blocks of 128, the last partial, so 8 xs items) -> 600 (3 column
    tiles, the last partial) or -> 200 (one column tile); groups of 3 row blocks (3 groups, the
    last partial) or 16 (one); on 1 SM (all items on one program), 3 (8 tiles each and 2 or 3
    items; at 200 columns one program of 2 tiles holds the 8 items), 7 (3 programs of 4 tiles,
    4 of 3 tiles and 2 items) and all SMs (24 programs of one tile, 8 of them with an item
    first); r = 8, 16, 24, 32 and 64 in bf16, 16 in fp16; r = 72 and 3 take other forms.
    Outputs and every gradient against float64 (dB reads the xs the kernel wrote)."""
    import fusedmlp.ops.lora as ops
    from fusedmlp.kernels.configs import LORA_HANDOFF_CONFIG

    recording_pingpong_launches(monkeypatch, ops)
    launched = recording_module_launches(monkeypatch, ops)
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", "always")  # also where the items do not fit
    all_sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = ((8, 600, 3, 3, torch.bfloat16), (16, 600, 3, 1, torch.bfloat16), (16, 600, 16, 7, torch.bfloat16),
             (24, 600, 3, all_sms, torch.bfloat16), (32, 200, 3, 3, torch.bfloat16), (16, 600, 3, 3, torch.float16),
             (64, 600, 3, 7, torch.bfloat16), (72, 600, 3, 3, torch.bfloat16), (3, 600, 3, 3, torch.bfloat16))
    for r, n, group_m, sms, dtype in cases:
        monkeypatch.setattr(ops, "num_sms", lambda t: sms)
        monkeypatch.setattr(ops, "LORA_HANDOFF_CONFIG", dict(LORA_HANDOFF_CONFIG, GROUP_M=group_m))
        launched.clear()
        d_in = 136 if r == 24 else 200  # 3 K steps: an item's last stage reads its second x tile past K
        tensors, g = make_inputs((1000,), d_in, n, r, "cuda")
        run_check(tensors, g, dtype, activation, scale=2.0, save_preact=save_preact,
                  what=f"handoff r={r} {d_in} -> {n} groups of {group_m} on {sms} SMs {dtype}")
        assert (ops.lora_fwd_handoff_kernel in launched) == (r % 8 == 0 and r <= 64), (r, launched)


@pytest.mark.gpu
@pytest.mark.parametrize("activation,save_preact", [("identity", False), ("gelu_tanh", False), ("silu", True)])
def test_pingpong_forward_on_gpu(monkeypatch, activation, save_preact):
    """With xs from cuBLAS, ranks that are multiples of 8 run the forward (and the backward's
    recomputation of pre) as the ping-pong kernel, xs @ B.T as the main loop's last K steps: one
    step at r = 8 and 24, two at 72 (partial in rank, rows, columns and K: 300 x 200 -> 392);
    r = 3 keeps the Triton kernel. Outputs and every gradient against float64, on 3 SMs so
    that each program walks several tiles."""
    import fusedmlp.ops.lora as ops

    kernels = recording_pingpong_launches(monkeypatch, ops)
    monkeypatch.setattr(ops, "IN_LOOP_MAX_MACS", 0)  # xs from cuBLAS at every size
    monkeypatch.setattr(ops, "ONCHIP_FORWARD", False)
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", False)
    for r in (8, 24, 72, 3):
        kernels.clear()
        tensors, g = make_inputs((300,), 200, 392, r, "cuda")
        run_check(tensors, g, torch.bfloat16, activation, scale=2.0, save_preact=save_preact, what=f"ping-pong r={r}")
        assert (ops.lora_fwd_pingpong_kernel in kernels) == (r % 8 == 0), (r, kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("activation,save_preact", [("identity", False), ("gelu_tanh", True)])
def test_forms_beyond_the_pingpong_width_on_gpu(monkeypatch, activation, save_preact):
    """Inputs wider than LORA_PINGPONG_MAX_K (lowered to 128 here), xs from cuBLAS (the handoff
    kernel off): each form of
    LORA_FORWARD_FORMS (the Triton kernel; the ping-pong kernel on wide cooperative tiles of
    2 x 64 rows, the last one partial at 1000 rows), forced, at r = 24 (one rank step) and 72
    (two): outputs and every gradient against float64, on 3 SMs. Untimed, the rule: the Triton
    kernel. With autotuning on, a shape's first call times both forms and keeps the faster."""
    import fusedmlp.kernels.configs as configs
    import fusedmlp.ops.lora as ops
    from fusedmlp.ops._common import FastestForm, clear_call_plans

    kernels = recording_pingpong_launches(monkeypatch, ops)
    monkeypatch.setattr(ops, "IN_LOOP_MAX_MACS", 0)  # xs from cuBLAS at every size
    monkeypatch.setattr(ops, "ONCHIP_FORWARD", False)
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", False)
    monkeypatch.setattr(ops, "LORA_PINGPONG_MAX_K", 128)
    for r in (24, 72):
        tensors, g = make_inputs((1000,), 200, 392, r, "cuda")
        for form in (*ops.LORA_FORWARD_FORMS, None):
            kernels.clear()
            with ops.lora_forward_form.forcing(form) if form else contextlib.nullcontext():
                run_check(tensors, g, torch.bfloat16, activation, scale=2.0, save_preact=save_preact,
                          what=f"{form or 'rule'} r={r}")
            forward = [k for k in kernels if k is not ops.dgrad_pingpong_kernel]  # not the backward's dx
            assert forward == ([ops.lora_fwd_pingpong_kernel] if form == "wide" else []), (form, kernels)
    monkeypatch.setattr(configs, "AUTOTUNE", True)
    chooser = FastestForm()
    monkeypatch.setattr(ops, "lora_forward_form", chooser)
    clear_call_plans()  # the rule's call above filed a plan for these tensors, which would skip the timing
    run_check(tensors, g, torch.bfloat16, activation, scale=2.0, save_preact=save_preact, what="timed")
    (key, times), = chooser.times.items()
    assert set(times) == set(ops.LORA_FORWARD_FORMS) and chooser.chosen[key] == min(times, key=times.get)


@pytest.mark.gpu
@pytest.mark.parametrize("rows,r", [(8192, 16), (600, 64)], ids=["rank-in-loop", "rank-from-cublas"])
def test_step_replayed_from_a_cuda_graph(rows, r):
    """The bench's graphed impls and a user's captured training step: forward+backward
    (W frozen) captured once and replayed on new inputs, output and every gradient against
    float64 (xs rounded as the op rounds it), with the rank product from the main loop and
    from cuBLAS."""
    check_replayed_step(lambda *ts: fusedmlp.lora_linear(*ts, 2.0, "gelu_tanh"),
                        lambda *ts: rounded_reference(torch.bfloat16)(*ts, 2.0, "gelu_tanh"),
                        lambda: make_inputs((rows,), 1024, 1024, r, "cuda"), what=f"{rows} rows, r={r}")


@pytest.mark.gpu
@pytest.mark.parametrize("rows,r,activation", [(8192, 16, "gelu_tanh"), (8192, 16, None), (600, 64, "gelu_tanh")],
                         ids=["r16", "r16-identity", "r64"])
def test_repeated_steps_replay_call_plans_on_gpu(rows, r, activation):
    """A training loop's plain steps on the same tensors (W frozen): every step against
    float64, and the later steps replay the forward's launch from a call plan (ops/_common.py
    ``CallPlans``; the form's own plan), and every other launch that the steps filed a plan for
    (the dgrad kernel's, linear_act's dpre stream)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the forward's plan holds a Hopper form's launch (compute capability 9.0)")
    replayed = check_repeated_steps(lambda *ts: fusedmlp.lora_linear(*ts, 2.0, activation),
                                    lambda *ts: rounded_reference(torch.bfloat16)(*ts, 2.0, activation),
                                    lambda: make_inputs((rows,), 256, 192, r, "cuda"), what=f"{rows} rows, r={r}")
    forward = {f"fusedmlp.ops.lora.{name}" for name in ("_fwd_plans", "_onchip_plans", "_handoff_plans")}
    assert forward & set(replayed), replayed


@pytest.mark.parametrize("rows,d_out", [(111, 24), (9, 40)], ids=["merged-weight", "fewer-rows-than-outputs"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_identity_backward(device, monkeypatch, dtype, rows, d_out):
    """No activation: dpre is g (no dpre stream is launched); dx is one GEMM against the merged
    weight W + s * B @ A, or with fewer rows than outputs dpre @ W plus d_xa @ A (on Hopper in
    bf16 the dgrad kernel with d_xa @ A as its last K steps, test_dgrad_tail_on_gpu); every
    gradient (x, W, b, A, B) against float64."""
    import fusedmlp.ops.linear_act as linear_ops

    def refuse(*args, **kwargs):
        raise AssertionError("the identity's backward launched a dpre stream")

    monkeypatch.setattr(linear_ops._dpre_launcher, "launch", refuse)
    tensors, g = make_inputs((rows,), 40, d_out, 8, device, grads=(True, True, True, True, True))
    run_check(tensors, g, dtype, None, what="streamless")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("r", [1, 3, 70], ids=lambda r: f"r={r}")
def test_merged_weight(device, monkeypatch, dtype, r):
    """The backward's merged weight ``W + s * B @ A`` from lora_merge_kernel (partial tiles, a
    rank past one 64-wide rank block at r = 70, a weight with a row stride of its own), rounded
    once: within one ulp of the float64 value, plus fp32 accumulation error."""
    import fusedmlp.ops.lora as ops

    launched = recording_module_launches(monkeypatch, ops)
    out, d_in, scale = 37, 150, 0.3
    weight = torch.randn(out, d_in + 6, dtype=torch.float64, device=device)[:, :d_in].to(dtype)
    lora_a = torch.randn(r, d_in, dtype=torch.float64, device=device).to(dtype)
    lora_b = torch.randn(out, r, dtype=torch.float64, device=device).to(dtype)
    merged = ops._merged_weight(weight, lora_b, lora_a, scale, traced=False)
    # fp32 at "highest" and fp64 on a GPU: cuBLAS's addmm (ops/_common.py gemms_on_cublas)
    assert launched == ([] if ops.gemms_on_cublas(weight) else [ops.lora_merge_kernel])
    assert merged.dtype == dtype and merged.shape == weight.shape
    expected = weight.double() + scale * lora_b.double() @ lora_a.double()
    ulp = torch.finfo(dtype).eps * expected.abs()
    slack = 1e-5 * r * (lora_b.double().abs() @ lora_a.double().abs()) if dtype != torch.float64 else 0.0
    assert ((merged.double() - expected).abs() <= ulp + slack + 1e-12).all(), (merged.double() - expected).abs().max()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lead,r,bias", [((37,), 1, True), ((3, 7), 3, False), ((50,), 16, True)],
                         ids=["r=1", "3-D-r=3-nobias", "r=16"])
@pytest.mark.parametrize(
    "grads", [(True, True, True, True, True), (False, False, False, True, True), (True, False, False, False, False)],
    ids=["all-incl-W", "adapter-only", "dx-only"],
)
def test_merged_forward(device, monkeypatch, dtype, lead, r, bias, grads):
    """The identity forward as ``F.linear`` against the merged weight (``MERGED_FORWARD``
    "always"; by the rule, Hopper at inputs up to 1024 wide), xs formed in the backward where
    dB needs it: the output and every gradient against float64, lora_merge_kernel launched
    (cuBLAS's addmm where the products run there) and no one-kernel forward; then the same
    forward where autograd records nothing."""
    import fusedmlp.ops.lora as ops

    monkeypatch.setattr(ops, "MERGED_FORWARD", "always")

    def refuse(*args, **kwargs):
        raise AssertionError("a one-kernel forward ran")

    monkeypatch.setattr(ops, "lora_forward_impl", refuse)
    launched = recording_module_launches(monkeypatch, ops)
    tensors, g = make_inputs(lead, 40, 36, r, device, bias, grads)
    run_check(tensors, g, dtype, "identity", scale=2.0, what="merged")
    assert ops.lora_merge_kernel in launched or ops.gemms_on_cublas(tensors[1].to(dtype))
    x, w, b, a, lb = (None if t is None else t.detach().to(dtype) for t in tensors)
    with torch.no_grad():
        y = fusedmlp.lora_linear(x, w, b, a, lb, 2.0)
    want = rounded_reference(dtype)(*(None if t is None else t.double() for t in (x, w, b, a, lb)), 2.0, "identity")
    assert_close(y, want, dtype, "merged inference forward")


@pytest.mark.parametrize("rows,grads,merges", [
    (50, (True, False, True, True, True), 1), (50, (False, False, False, True, True), 1),
    (20, (True, False, True, True, True), 1),
], ids=["dx-on-the-merged-weight", "no-dx", "fewer-rows-than-outputs"])
def test_merged_forward_merges_once_a_step(device, monkeypatch, rows, grads, merges):
    """After the merged forward, a backward whose dx is taken against the merged weight uses the
    forward's (kept for it), so a fwd+bwd step forms it once; without dx, or with fewer rows
    than outputs (dx = dpre @ W plus the low-rank term), nothing is kept and nothing formed
    again. Every gradient against float64."""
    import fusedmlp.ops.lora as ops

    monkeypatch.setattr(ops, "MERGED_FORWARD", "always")
    launched = recording_module_launches(monkeypatch, ops)
    tensors, g = make_inputs((rows,), 40, 36, 8, device, True, grads)
    run_check(tensors, g, torch.bfloat16, "identity", scale=2.0, what="merged once")
    assert launched.count(ops.lora_merge_kernel) == merges


def test_merged_forward_rule(monkeypatch):
    """Where an eager call's forward is the merged one: the identity, no dropout, no kept pre;
    by the rule also Hopper (faked here), 16-bit, inputs up to MERGED_FORWARD_MAX_IN wide and at
    least as many rows as outputs; "always" lifts the rule, False turns it off."""
    import fusedmlp.ops.lora as ops

    monkeypatch.setattr(ops, "MERGED_FORWARD", True)
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    monkeypatch.setattr(ops, "gemms_on_cublas", lambda t: False)
    monkeypatch.setattr(ops, "pingpong_device", lambda t: True)
    bf16 = torch.bfloat16

    def wanted(m=2048, k=1024, out=1024, r=16, dtype=bf16, act="identity", store_pre=False, dropout=False,
               xs_needed=False):
        x, weight = torch.empty(m, k, dtype=dtype), torch.empty(out, k, dtype=dtype)
        lora_a = torch.empty(r, k, dtype=dtype)
        return ops._merged_forward_wanted(x, weight, lora_a, x if dropout else None, act, store_pre, xs_needed)

    assert wanted() and wanted(m=1024) and wanted(k=512, out=2048, m=2048) and wanted(dtype=torch.float16)
    # where B trains, above the ranks whose xs the on-chip forms make nearly free
    assert not wanted(xs_needed=True) and not wanted(r=8, xs_needed=True) and not wanted(r=3, xs_needed=True)
    assert wanted(r=24, xs_needed=True) and wanted(r=64, xs_needed=True)
    assert not wanted(m=1023)  # fewer rows than outputs
    assert not wanted(k=2048)  # wider than MERGED_FORWARD_MAX_IN
    assert not wanted(dtype=torch.float32)
    for case in ({"act": "relu"}, {"store_pre": True}, {"dropout": True}):
        assert not wanted(**case), case
    monkeypatch.setattr(ops, "pingpong_device", lambda t: False)
    assert not wanted()
    monkeypatch.setattr(ops, "MERGED_FORWARD", "always")
    assert wanted() and wanted(m=1, k=4096, dtype=torch.float32) and wanted(r=8, xs_needed=True)
    assert not wanted(act="gelu") and not wanted(dropout=True) and not wanted(store_pre=True)
    monkeypatch.setattr(ops, "MERGED_FORWARD", False)
    assert not wanted()


@pytest.mark.gpu
@pytest.mark.parametrize("r,grads,merged", [
    (64, (True, False, True, True, True), True),  # B trains, rank above 16
    (16, (True, False, True, True, True), False),  # B trains: xs on chip
    (16, (True, False, True, True, False), True),  # B frozen: no xs wanted
], ids=["r=64", "r=16", "r=16-B-frozen"])
def test_merged_forward_by_the_rule_on_gpu(monkeypatch, r, grads, merged):
    """bf16 at 4096 x 1024 -> 1024, identity with a bias, the library's rule: the merged form on
    Hopper where the backward does not need xs or the rank is above 16 (the one-kernel forms
    elsewhere, and on other GPUs); output and every gradient against float64."""
    import fusedmlp.ops.lora as ops

    monkeypatch.setattr(ops, "MERGED_FORWARD", True)
    launched = recording_module_launches(monkeypatch, ops)
    tensors, g = make_inputs((4096,), 1024, 1024, r, "cuda", grads=grads)
    run_check(tensors, g, torch.bfloat16, "identity", scale=2.0, what="merged by the rule")
    leaves = [None if t is None else t.detach().to(torch.bfloat16).requires_grad_(t.requires_grad) for t in tensors]
    launched.clear()
    fusedmlp.lora_linear(*leaves, 2.0)  # the forward alone: what it launched
    assert (ops.lora_merge_kernel in launched) == (merged and ops.pingpong_device(leaves[0])), launched


def test_dgrad_with_tail_strided_fallback(device):
    """``dx = dpre @ W + d_xa @ A`` where dpre's rows are not TMA-readable (an odd row stride):
    cuBLAS with the term as its addend, on every device (on Hopper the aligned case is the
    kernel: test_dgrad_tail_on_gpu)."""
    import fusedmlp.ops.lora as ops

    m, out, d_in, r = 50, 24, 40, 8
    dpre = torch.randn(m, out + 1, dtype=torch.float64, device=device)[:, :out]
    weight = torch.randn(out, d_in, dtype=torch.float64, device=device)
    d_xa = torch.randn(m, r, dtype=torch.float64, device=device)
    lora_a = torch.randn(r, d_in, dtype=torch.float64, device=device)
    xs = torch.randn(m, r, dtype=torch.float64, device=device)
    expected = dpre @ weight + d_xa @ lora_a
    for dtype in (torch.float32, torch.bfloat16):
        dx, db = ops._dgrad_with_tail(dpre.to(dtype), weight.to(dtype), d_xa.to(dtype), lora_a.to(dtype))
        assert_close(dx.double(), expected, dtype, f"strided dpre {dtype}")
        assert db is None
        # with xs: dB = dpre.T @ xs beside it (cuBLAS here), in fp32
        dx, db = ops._dgrad_with_tail(dpre.to(dtype), weight.to(dtype), d_xa.to(dtype), lora_a.to(dtype),
                                      xs=xs.to(dtype))
        assert db.dtype == torch.float32
        assert_close(dx.double(), expected, dtype, f"strided dpre {dtype}, with xs")
        assert_close(db.double(), dpre.t() @ xs, dtype, f"dB beside strided dpre {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("activation,save_preact", [("identity", False), ("gelu_tanh", False), ("relu", True)])
def test_dgrad_tail_on_gpu(monkeypatch, activation, save_preact):
    """On Hopper, dx as dgrad_pingpong_kernel with d_xa @ A as its last K steps (one step
    at r = 8, 16 and 24, two at 72; rows, columns and K partial; fewer rows than outputs and
    more; the backward in row chunks, where the activation streams dpre) where M * cdiv(r, 64)
    <= DGRAD_TAIL_ROWS_PER_OUTPUT * out and r is a multiple of 8, the merged weight otherwise;
    where B trains and r pads to 16, lora_dgrad_db_kernel, which also forms dB (its K steps all
    on one column tile, split among 3, or among 9 tiles of which some have none; r = 16 with B
    frozen takes the plain kernel; r = 32 with its rank block allowed): outputs and every
    gradient against float64, on 3 SMs."""
    import fusedmlp.ops._common as common
    import fusedmlp.ops.lora as ops

    kernels = recording_pingpong_launches(monkeypatch, ops)
    cases = ((300, 200, 392, 8, None, True), (600, 200, 104, 24, None, True), (500, 200, 104, 72, None, True),
             (300, 200, 392, 3, None, True), (400, 600, 1032, 16, None, True), (400, 600, 1032, 16, None, False),
             (300, 2304, 600, 16, None, True), (300, 2304, 600, 32, None, True), ("chunked", 200, 104, 8, None, True),
             (600, 200, 104, 24, 0, True))
    for rows, d_in, d_out, r, rule, b_trains in cases:
        # r = 32: the kernel at its 32-wide rank block too (not taken by default: DGRAD_DB_RANK_BLOCKS)
        monkeypatch.setattr(ops, "DGRAD_DB_RANK_BLOCKS", (16, 32) if r == 32 else (16,))
        chunked = rows == "chunked"
        if chunked:  # 600 rows in chunks of 256 (where dpre is a stream's transient)
            rows = 600
            monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 256)
            monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)
        if rule is not None:
            monkeypatch.setattr(ops, "DGRAD_TAIL_ROWS_PER_OUTPUT", rule)
        kernels.clear()
        tensors, g = make_inputs((rows,), d_in, d_out, r, "cuda", grads=(True, True, True, True, b_trains))
        run_check(tensors, g, torch.bfloat16, activation, scale=2.0, save_preact=save_preact,
                  what=f"dgrad tail {rows} rows, out {d_out}, r={r}, rule {rule}, B trains {b_trains}")
        tail = r % 8 == 0 and rows * -(-r // 64) <= ops.DGRAD_TAIL_ROWS_PER_OUTPUT * d_out
        with_db = tail and b_trains and (r <= 16 or r == 32)
        launches = [kernels.count(ops.dgrad_pingpong_kernel), kernels.count(ops.lora_dgrad_db_kernel)]
        expected = 0 if not tail else 3 if chunked and activation != "identity" else 1
        assert launches == ([0, expected] if with_db else [expected, 0]), (rows, r, b_trains, kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["identity", "gelu_tanh"])
def test_rank_products_beside_the_dgrad_on_gpu(monkeypatch, activation):
    """From BESIDE_DGRAD_MIN_MACS (forced to 0 here) the tail dgrad kernel runs on the
    high-priority stream with the fewest programs that take as many rounds of tiles (5 tiles
    on 4 SMs: 3 programs of 2 rounds), while dB and dA run on the current stream: outputs and
    every gradient against float64, the same bits as with the products after the kernel, in
    row chunks (where dpre is a stream's transient freed after each chunk) and replayed from a
    CUDA graph."""
    import fusedmlp.ops._common as common
    import fusedmlp.ops.lora as ops

    recording_pingpong_launches(monkeypatch, ops, sms=4)  # 4 SMs; launches recorded below with their stream
    launches = []  # (kernel, programs, stream priority, on the caller's stream); the backward runs on autograd's thread
    recording = ops.launch_pingpong
    caller = torch.cuda.current_stream()
    monkeypatch.setattr(ops, "launch_pingpong", lambda kernel, *args, **kwargs: (
        launches.append((kernel, args[3], torch.cuda.current_stream().priority, torch.cuda.current_stream() == caller)),
        recording(kernel, *args, **kwargs))[1])
    if activation != "identity":  # 600 rows in chunks of 256
        monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 256)
        monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)
    rows, d_in, d_out, r = 600, 200, 104, 16
    tensors, g = make_inputs((rows,), d_in, d_out, r, "cuda")
    leaves = [t.detach().bfloat16().requires_grad_(t.requires_grad) for t in tensors]

    def grads(min_macs):
        monkeypatch.setattr(ops, "BESIDE_DGRAD_MIN_MACS", min_macs)
        for t in leaves:
            t.grad = None
        launches.clear()
        fusedmlp.lora_linear(*leaves, 2.0, activation).backward(g.bfloat16())
        return [t.grad.clone() for t in leaves if t.requires_grad]

    after = grads(1 << 62)
    tail_kernels = (ops.dgrad_pingpong_kernel, ops.lora_dgrad_db_kernel)
    assert [launch[1:] for launch in launches if launch[0] in tail_kernels] == \
        [(4, caller.priority, True)] * (1 if activation == "identity" else 3)
    assert all(launch[0] is ops.lora_dgrad_db_kernel for launch in launches if launch[0] in tail_kernels)
    beside = grads(0)
    dgrads = [launch[1:] for launch in launches if launch[0] in tail_kernels]
    high = torch.cuda.Stream(priority=common.SIDE_STREAM_PRIORITY).priority
    assert high < caller.priority  # lower numbers go first
    # chunks of 256, 256 and 88 rows: 2, 2 and 1 row tiles of 128 on 4 SMs
    programs = [3] if activation == "identity" else [2, 2, 1]
    assert dgrads == [(count, high, False) for count in programs], dgrads
    for got, want in zip(beside, after):
        assert torch.equal(got, want)
    monkeypatch.setattr(ops, "BESIDE_DGRAD_MIN_MACS", 0)
    run_check(tensors, g, torch.bfloat16, activation, scale=2.0, what="rank products beside the dgrad")
    check_replayed_step(lambda *ts: fusedmlp.lora_linear(*ts, 2.0, activation),
                        lambda *ts: rounded_reference(torch.bfloat16)(*ts, 2.0, activation),
                        lambda: make_inputs((rows,), d_in, d_out, r, "cuda"), what="beside the dgrad, replayed")


@pytest.mark.parametrize("activation,save_preact", [("gelu", False), ("silu", True)])
def test_fewer_rows_than_outputs(device, activation, save_preact):
    """M < out: dx is dpre @ W with the low-rank term added after (not the merged weight)."""
    tensors, g = make_inputs((2, 3), 20, 48, 5, device)
    run_check(tensors, g, torch.float32, activation, save_preact=save_preact, what="few rows")


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_backward_in_row_chunks(device, monkeypatch, activation):
    import fusedmlp.ops._common as common

    monkeypatch.setattr(common, "BWD_MIN_CHUNK_ROWS", 128)
    monkeypatch.setattr(common, "BWD_CHUNK_BYTES", 0)
    tensors, g = make_inputs((300,), 24, 40, 4, device, grads=(True, True, True, True, True))
    run_check(tensors, g, torch.float32, activation, what="chunked")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_dropout(device, dtype):
    """The LoRA path sees F.dropout's x (same RNG stream); the base path sees x itself."""
    p, scale = 0.3, 1.5
    tensors64, g64 = make_inputs((2, 31), 36, 28, 6, device)
    tensors64 = [None if t is None else t.detach().to(dtype).double().requires_grad_(t.requires_grad)
                 for t in tensors64]
    seed = torch.initial_seed()
    torch.manual_seed(seed)
    keep = torch.nn.functional.dropout(torch.ones(62, 36, dtype=dtype, device=device), p, training=True)
    assert 0 < (keep == 0).sum() < keep.numel()

    def reference(x, w, b, a, lb):
        return rounded_reference(dtype)(x, w, b, a, lb, scale, "gelu", x_lora=x * keep.double().reshape(x.shape))

    def fused(x, w, b, a, lb):
        torch.manual_seed(seed)
        return fusedmlp.lora_linear(x, w, b, a, lb, scale, "gelu", dropout_p=p)

    tensors = [None if t is None else t.detach().to(dtype) for t in tensors64]
    check_against_float64(fused, reference, tensors, tensors64, g64.to(dtype), g64, "dropout")


def test_inference_forward_keeps_nothing(device, monkeypatch):
    """save_preact=True writes no pre-activation where autograd records nothing
    (helpers.check_inference_forward)."""
    import fusedmlp.ops.lora as lora_ops

    (x, w, b, a, lb), _ = make_inputs((4, 5), 24, 18, 4, device)
    x, w, b, a, lb = (t.detach() for t in (x, w, b, a, lb))
    check_inference_forward(
        monkeypatch, lora_ops, "lora_forward_impl", lambda args: args[9],
        lambda grad: fusedmlp.lora_linear(x.float(), w.float(), b.float(), a.float().requires_grad_(grad),
                                          lb.float(), 2.0, "gelu", save_preact=True),
        lora_linear_reference(x, w, b, a, lb, 2.0, "gelu"), torch.float32, "lora")


def test_empty_batch(device):
    x = torch.randn(0, 24, device=device, requires_grad=True)
    w = torch.randn(18, 24, device=device)
    a = torch.randn(4, 24, device=device, requires_grad=True)
    lb = torch.randn(18, 4, device=device, requires_grad=True)
    y = fusedmlp.lora_linear(x, w, None, a, lb, 2.0, "silu")
    assert y.shape == (0, 18)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(a.grad, torch.zeros_like(a)) and torch.equal(lb.grad, torch.zeros_like(lb))


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("rank_mismatch", ValueError, r"lora_b must be \[out, r\] = \[20, 4\]"),
        ("a_features", ValueError, r"lora_a must be \[r, in\]"),
        ("zero_rank", ValueError, "at least one row"),
        ("a_dtype", TypeError, "lora_a has dtype"),
        ("a_rank", ValueError, "lora_a must be 2-D"),
        ("scale", TypeError, "scale must be a finite Python number"),
        ("scale_nan", TypeError, "scale must be a finite Python number"),
        ("dropout", ValueError, r"dropout_p must be a number in \[0, 1\]"),
        ("activation", ValueError, "activation must be one of"),
        ("x_features", ValueError, "features in its last dimension"),
    ],
)
def test_bad_inputs(device, case, exc, match):
    x = torch.randn(5, 12, device=device)
    w = torch.randn(20, 12, device=device)
    a = torch.randn(4, 12, device=device)
    lb = torch.randn(20, 4, device=device)
    kwargs = dict(scale=2.0, activation=None)
    if case == "rank_mismatch":
        lb = torch.randn(20, 5, device=device)
    elif case == "a_features":
        a = torch.randn(4, 13, device=device)
    elif case == "zero_rank":
        a, lb = torch.randn(0, 12, device=device), torch.randn(20, 0, device=device)
    elif case == "a_dtype":
        a = a.double()
    elif case == "a_rank":
        a = a[None]
    elif case == "scale":
        kwargs["scale"] = torch.tensor(2.0)
    elif case == "scale_nan":
        kwargs["scale"] = float("nan")
    elif case == "dropout":
        kwargs["dropout_p"] = 1.5
    elif case == "activation":
        kwargs["activation"] = "tanh"
    elif case == "x_features":
        x = torch.randn(5, 11, device=device)
    with pytest.raises(exc, match=match):
        fusedmlp.lora_linear(x, w, None, a, lb, **kwargs)


@pytest.mark.parametrize("activation,save_preact,dropout_p", [("gelu_tanh", False, 0.0), ("relu", False, 0.0),
                                                              ("silu", True, 0.0), (None, False, 0.25)])
def test_torch_compile_fullgraph(device, activation, save_preact, dropout_p):
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    x = torch.randn(2, 33, 40, device=device, requires_grad=True)
    w = torch.randn(24, 40, device=device)
    b = torch.randn(24, device=device, requires_grad=True)
    a = torch.randn(5, 40, device=device, requires_grad=True)
    lb = torch.randn(24, 5, device=device, requires_grad=True)

    def step(x, b, a, lb):
        return fusedmlp.lora_linear(x, w, b, a, lb, 0.5, activation, dropout_p, save_preact).square().sum()

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    torch.manual_seed(7)
    loss = compiled(x, b, a, lb)
    grads = torch.autograd.grad(loss, (x, b, a, lb))
    if dropout_p:  # compiled RNG differs from eager's: check that it ran and is finite
        assert all(torch.isfinite(t).all() for t in (loss, *grads))
        return
    eager_loss = step(x, b, a, lb)
    eager = torch.autograd.grad(eager_loss, (x, b, a, lb))
    assert rel_err(loss, eager_loss) < 1e-5
    for got, want in zip(grads, eager):
        assert rel_err(got, want) < 1e-5


def test_lora_linear_module(device):
    """PEFT's layout and init; scaling; frozen base; merge/unmerge keep the function; eval drops dropout."""
    layer = fusedmlp.LoRALinear(24, 36, r=4, alpha=8, activation="gelu", dropout=0.5).to(device, torch.float64)
    assert set(layer.state_dict()) == {"base_layer.weight", "base_layer.bias", "lora_A.default.weight",
                                       "lora_B.default.weight"}
    assert layer.scaling == 2.0 and not layer.base_layer.weight.requires_grad
    assert torch.count_nonzero(layer.lora_b) == 0  # zero init: starts as the base layer
    x = torch.randn(7, 24, device=device, dtype=torch.float64)
    base = torch.nn.functional.gelu(layer.base_layer(x))
    layer.eval()
    assert_close(layer(x), base, torch.float64, "zero-init adapter")
    with torch.no_grad():
        layer.lora_b.normal_()
    expected = lora_linear_reference(x, layer.base_layer.weight, layer.base_layer.bias, layer.lora_a, layer.lora_b,
                                     2.0, "gelu")
    assert_close(layer(x), expected, torch.float64, "eval forward")
    weight = layer.base_layer.weight.detach().clone()
    layer.merge()
    assert layer.merged and rel_err(layer.base_layer.weight, weight) > 1e-3
    assert_close(layer(x), expected, torch.float64, "merged forward")
    layer.unmerge()
    assert not layer.merged and rel_err(layer.base_layer.weight, weight) < 1e-12
    layer.train()
    torch.manual_seed(0)
    dropped = layer(x)
    assert rel_err(dropped, expected) > 1e-3  # dropout on the LoRA path in training mode
    rs = fusedmlp.LoRALinear(8, 8, r=16, alpha=8, use_rslora=True)
    assert rs.scaling == 2.0
    with pytest.raises(ValueError, match="r must be a positive int"):
        fusedmlp.LoRALinear(8, 8, r=0, alpha=8)


def _peft_model(device, dtype, dropout=0.0, **options):
    peft = pytest.importorskip("peft")
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 16)).to(device, dtype)
    config = peft.LoraConfig(r=4, lora_alpha=12, target_modules=["0", "2"], lora_dropout=dropout, **options)
    model = peft.get_peft_model(model, config)
    for module in model.modules():  # PEFT's B starts at zero: make the adapters do something
        if isinstance(module, nn.Linear) and module.weight.shape[1] == 4:
            with torch.no_grad():
                module.weight.normal_()
    return model


@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_patch_peft_lora(device, merged):
    """PEFT LoRA layers become LoRALinear: same keys, same Parameters, same outputs and gradients."""
    dtype = torch.float64
    model = _peft_model(device, dtype)
    if merged:
        model.merge_adapter()
    x = torch.randn(9, 24, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(9, 16, device=device, dtype=dtype)
    keys = list(model.state_dict())
    params = {name: p for name, p in model.named_parameters()}

    def run():
        model.zero_grad()
        x.grad = None
        y = model(x)
        y.backward(g)
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return y.detach(), dict(grads, x=x.grad.clone())

    y_peft, grads_peft = run()
    replaced = fusedmlp.patch(model)
    assert [r.new_type for r in replaced] == ["PeftLoRALinear", "PeftLoRALinear"], replaced
    lora_layers = [m for m in model.modules() if isinstance(m, fusedmlp.LoRALinear)]
    assert len(lora_layers) == 2 and all(m.merged == merged for m in lora_layers)
    assert list(model.state_dict()) == keys
    assert all(p is params[name] for name, p in model.named_parameters())
    y_fused, grads_fused = run()
    assert_close(y_fused, y_peft, dtype, "patched output")
    assert grads_fused.keys() == grads_peft.keys() and grads_peft
    for name in grads_peft:
        assert_close(grads_fused[name], grads_peft[name], dtype, f"grad {name}")
    assert [r.new_type for r in fusedmlp.unpatch(model)] == ["Linear", "Linear"]  # PEFT's class is back
    assert not any(isinstance(m, fusedmlp.LoRALinear) for m in model.modules())


def test_patch_peft_lora_with_fp32_adapters_on_bf16(device):
    """PEFT's default keeps the adapters of a bf16 model in fp32: they are patched too, cast to
    bf16 for the kernel; output and gradients (fp32, on the fp32 adapters) against float64."""
    model = _peft_model(device, torch.bfloat16)
    adapters = {name: p for name, p in model.named_parameters() if "lora_" in name}
    assert {p.dtype for p in adapters.values()} == {torch.float32}  # PEFT's autocast_adapter_dtype
    reference = copy.deepcopy(model).double()
    x = torch.randn(9, 24, device=device, dtype=torch.bfloat16)
    g = torch.randn(9, 16, device=device, dtype=torch.bfloat16)
    y_peft = model(x)
    assert [r.new_type for r in fusedmlp.patch(model)] == ["PeftLoRALinear", "PeftLoRALinear"]
    y = model(x)
    y.backward(g)
    y_ref = reference(x.double())
    y_ref.backward(g.double())
    bound = eager_bound(torch.bfloat16, y_peft, y_ref)
    assert y.dtype == torch.bfloat16 and rel_err(y, y_ref) < bound, rel_err(y, y_ref)
    for name, p in reference.named_parameters():
        if "lora_" in name:
            assert adapters[name].grad.dtype == torch.float32, name
            assert rel_err(adapters[name].grad, p.grad) < 3 * bound, (name, rel_err(adapters[name].grad, p.grad))


def test_peft_merge_and_unload_after_patch(device):
    """PEFT's merge_and_unload unloads patched layers too (LoRALinear answers merge(safe_merge,
    adapter_names) and get_base_layer()); an rsLoRA layer reports PEFT's alpha."""
    model = _peft_model(device, torch.float64, use_rslora=True)
    x = torch.randn(5, 24, device=device, dtype=torch.float64)
    y_peft = model(x)
    fusedmlp.patch(model)
    assert {m.lora_alpha for m in model.modules() if isinstance(m, fusedmlp.LoRALinear)} == {12}
    plain = model.merge_and_unload()
    assert [type(m) for m in plain] == [nn.Linear, nn.ReLU, nn.Linear]
    assert_close(plain(x), y_peft, torch.float64, "merged and unloaded")
    layer = fusedmlp.LoRALinear(4, 4, r=2, alpha=2)
    with torch.no_grad():
        layer.lora_b.fill_(float("inf"))
    with pytest.raises(ValueError, match="NaN or inf"):
        layer.merge(safe_merge=True)
    assert not layer.merged and torch.isfinite(layer.base_layer.weight).all()


def test_peft_helpers_reach_patched_layers(device, tmp_path):
    """PEFT's model-level helpers reach patched layers (tuner layers of PEFT's): save_pretrained
    saves the adapter as the unpatched model does and it loads back; disable_adapter() and
    disable_adapter_layers() run the base model; merge_adapter / unmerge_adapter fold the
    update in and out; a state switched while patched goes back to PEFT's layers on unpatch."""
    peft = pytest.importorskip("peft")
    safetensors = pytest.importorskip("safetensors.torch")
    model = _peft_model(device, torch.float64)
    x = torch.randn(5, 24, device=device, dtype=torch.float64)
    y_peft = model(x)
    with model.disable_adapter():
        y_base = model(x)
    model.save_pretrained(tmp_path / "unpatched")
    fusedmlp.patch(model)
    layers = [m for m in model.modules() if isinstance(m, fusedmlp.LoRALinear)]
    assert len(layers) == 2 and model.get_model_status().num_adapter_layers == 2

    model.save_pretrained(tmp_path / "patched")
    saved = {d: safetensors.load_file(tmp_path / d / "adapter_model.safetensors") for d in ("unpatched", "patched")}
    assert saved["patched"].keys() == saved["unpatched"].keys() and len(saved["patched"]) == 4
    for key, value in saved["unpatched"].items():
        assert torch.equal(saved["patched"][key], value), key
    base = nn.Sequential(nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 16)).to(device, torch.float64)
    base_state = model.get_base_model().state_dict()
    base.load_state_dict({key.replace("base_layer.", ""): value for key, value in base_state.items() if "lora_" not in key})
    reloaded = peft.PeftModel.from_pretrained(base, tmp_path / "patched")
    assert_close(reloaded(x), y_peft, torch.float64, "reloaded adapter")

    with model.disable_adapter():
        assert_close(model(x), y_base, torch.float64, "inside disable_adapter()")
    assert_close(model(x), y_peft, torch.float64, "after disable_adapter()")
    model.merge_adapter()
    assert all(m.merged for m in layers)
    assert_close(model(x), y_peft, torch.float64, "merged")
    model.unmerge_adapter()
    assert not any(m.merged for m in layers)
    assert_close(model(x), y_peft, torch.float64, "unmerged")
    model.base_model.disable_adapter_layers()
    assert_close(model(x), y_base, torch.float64, "adapter layers disabled")
    fusedmlp.unpatch(model)
    assert_close(model(x), y_base, torch.float64, "disabled, unpatched")
    model.base_model.enable_adapter_layers()
    assert_close(model(x), y_peft, torch.float64, "enabled again, unpatched")


@pytest.mark.filterwarnings("ignore:Already unmerged")  # PEFT's, where the layer was unmerged while patched
@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_unpatch_tells_peft_the_merge_state(device, merged):
    """merge() / unmerge() on a patched layer changes the shared base weight; after unpatch,
    PEFT's layer knows which state it is in (its own unmerge takes out what is in)."""
    model = _peft_model(device, torch.float64)
    x = torch.randn(5, 24, device=device, dtype=torch.float64)
    y_peft = model(x)
    base = {name: p.detach().clone() for name, p in model.named_parameters() if "base_layer" in name}
    if merged:
        model.merge_adapter()
    fusedmlp.patch(model)
    for layer in (m for m in model.modules() if isinstance(m, fusedmlp.LoRALinear)):
        layer.unmerge() if merged else layer.merge()
    fusedmlp.unpatch(model)
    assert_close(model(x), y_peft, torch.float64, "after unpatch")
    model.unmerge_adapter()
    for name, p in model.named_parameters():
        if "base_layer" in name:
            assert_close(p, base[name], torch.float64, name)
    assert_close(model(x), y_peft, torch.float64, "after PEFT's unmerge")


def test_patch_skips_what_it_cannot_match(device):
    """Disabled adapters and several adapters stay PEFT layers."""
    model = _peft_model(device, torch.float64)
    with model.disable_adapter():
        assert len(fusedmlp.patch(model, copy=True)) == 0
    peft = pytest.importorskip("peft")
    model.add_adapter("second", peft.LoraConfig(r=2, target_modules=["0"]))
    patched = fusedmlp.patch(model, copy=True)
    assert [r.name.rsplit(".", 1)[-1] for r in patched] == ["2"]  # layer 0 holds two adapters


@pytest.mark.gpu
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("r", [8, 64], ids=lambda r: f"r={r}")
@pytest.mark.parametrize("tokens,d", [(8192, 1024), (4096, 4096)])
def test_bf16_at_scale(activation, r, tokens, d):
    """bf16 at LLM widths (the tensor-descriptor kernel on Hopper) against float64 on the GPU."""
    tensors, g = make_inputs((tokens,), d, d, r, "cuda")
    run_check(tensors, g, torch.bfloat16, activation, scale=2.0, what="at scale")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_ieee_gemms_run_on_cublas(dtype, monkeypatch):
    """fp32 at "highest" and fp64 (IEEE products, which Triton runs on CUDA cores) run the
    forward as cuBLAS products with the activation after them, as the reference does, and the
    backward's merged weight with addmm: no Triton GEMM kernel launched (the dpre stream is
    elementwise), at ranks and sizes that would take each forward path, with dropout, against
    float64."""
    import fusedmlp.ops.lora as ops

    launched = recording_launches(monkeypatch, (ops._fwd_launcher, ops._fwd_tma_launcher))
    recording_module_launches(monkeypatch, ops, launched)
    with fp32_matmul_precision("highest"):
        for activation, save_preact in (("identity", False), ("identity", True), ("relu", False), ("gelu_tanh", True)):
            for r in (8, 40):
                tensors, g = make_inputs((300,), 200, 96, r, "cuda")
                run_check(tensors, g, dtype, activation, save_preact=save_preact, what=f"r={r}")
        x = torch.randn(300, 200, dtype=dtype, device="cuda")
        (_, w, b, a, lb), _ = make_inputs((300,), 200, 96, 8, "cuda")
        y = fusedmlp.lora_linear(x, *(t.detach().to(dtype) for t in (w, b, a, lb)), 0.5, dropout_p=0.5)
        assert y.shape == (300, 96) and torch.isfinite(y).all()
    assert not launched


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(LORA_FP32_CONFIGS)))
def test_every_tf32_config_on_gpu(monkeypatch, index):
    """fp32 at "high" keeps the Triton forward, on TF32 tensor cores, with LORA_FP32_CONFIGS (the
    16-bit tiles half as deep in K; the first runs untuned): each config forced, x @ A.T in the
    main loop and from cuBLAS, against float64 within 5e-3 (10 mantissa bits a product)."""
    import fusedmlp.ops.lora as ops

    launcher = ops._fwd_launcher
    for in_loop_macs in (10**12, 0):
        monkeypatch.setattr(ops, "IN_LOOP_MAX_MACS", in_loop_macs)
        for r, save_preact in ((8, False), (24, True)):
            tensors, g = make_inputs((1000,), 200, 600, r, "cuda")
            leaves = [t.detach().float().requires_grad_(t.requires_grad) for t in tensors]
            with fp32_matmul_precision("high"), launcher.forcing(launcher.fp32_configs[index]):
                y = fusedmlp.lora_linear(*leaves, 0.5, "gelu_tanh", save_preact=save_preact)
                y.backward(g.float())
            ref = lora_linear_reference(*tensors, 0.5, "gelu_tanh")
            ref.backward(g)
            what = (index, in_loop_macs, r)
            assert rel_err(y, ref) < 5e-3, (what, rel_err(y, ref))
            for name, out, t in zip(("dx", "db", "dA", "dB"), (leaves[0], *leaves[2:]), (tensors[0], *tensors[2:])):
                assert rel_err(out.grad, t.grad) < 5e-3, (what, name, rel_err(out.grad, t.grad))


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
@pytest.mark.parametrize("index", range(len(LORA_CONFIGS)))
def test_every_config_on_gpu(monkeypatch, tma, index):
    """Every tile config of both forward kernels, not only the one the tuner picks: the rank-r
    product is a second dot fed by the first one's accumulator, the pattern Triton 3.6 compiled
    wrong in some whole-MLP tiles on Hopper (kernels/configs.py). A config whose tiles do not fit
    shared memory at a rank is skipped there, as the tuner drops it."""
    import triton

    import fusedmlp.ops.lora as ops

    if tma and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the TMA path is for Hopper")
    if not tma:
        monkeypatch.setattr(ops, "tma_eligible", lambda *tensors: False)
    monkeypatch.setattr(ops, "IN_LOOP_MAX_MACS", 10**12)  # x @ A.T in the main loop at every rank here
    monkeypatch.setattr(ops, "IN_LOOP_MAX_RANK", 64)
    monkeypatch.setattr(ops, "ONCHIP_FORWARD", False)
    monkeypatch.setattr(ops, "HANDOFF_FORWARD", False)
    launcher = ops._fwd_tma_launcher if tma else ops._fwd_launcher
    ran = 0
    with launcher.forcing(launcher.configs[index]):
        for r in (8, 16, 64):
            tensors, g = make_inputs((300,), 256, 384, r, "cuda")
            try:
                run_check(tensors, g, torch.bfloat16, "relu", what=f"config {index} r={r}")
                ran += 1
            except triton.runtime.errors.OutOfResources:
                assert r > 8, "every config fits the smallest rank"
    assert ran


def test_second_derivative_is_refused(device):
    """The backward builds no graph: differentiating it again raises (before, part of the
    second derivative came through the rank products and the rest was dropped)."""
    (x, w, b, a, lb), _ = make_inputs((5,), 24, 20, 4, device)
    y = fusedmlp.lora_linear(x.float(), w.float(), b.float(), a.float(), lb.float(), 0.7, "gelu")
    (ga,) = torch.autograd.grad(y.square().sum(), a, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        ga.square().sum().backward()


@pytest.mark.parametrize("save_preact", [False, True], ids=["saves-less", "save_preact"])
def test_backward_twice(device, save_preact):
    """No saved tensor is written over (unlike linear_act's save_preact): one retained graph
    gives the same gradients twice."""
    (x, w, b, a, lb), g = make_inputs((9,), 24, 20, 4, device)
    leaves = [t.detach().float().requires_grad_() for t in (x, a, lb)]
    y = fusedmlp.lora_linear(leaves[0], w.float(), b.float(), leaves[1], leaves[2], 0.7, "gelu",
                             save_preact=save_preact)
    check_backward_twice(y, leaves, g.float(), refuses=False)
