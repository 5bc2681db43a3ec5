"""Fused LoRA linear: validation, launch, autograd and the torch.library op.

    fusedmlp.lora_linear(x, weight, bias, lora_a, lora_b, scale, activation=None, dropout_p=0.0)
        y = act(x @ weight.T + bias + scale * (drop(x) @ lora_a.T) @ lora_b.T)

Forward: one kernel (kernels/lora.py), with the rank-r product ``xs = s * x @ A.T`` from one
of four places:
- formed once per row block, by programs that hold a tile less than the others, and handed to
  the row block's tiles through memory (``lora_fwd_handoff_kernel``), on Hopper in 16 bits
  for ranks that are multiples of 8 up to 64, no dropout, where those items fit beside the
  tiles (``HANDOFF_FORWARD``, ``_handoff_grid``: large GEMMs with 16 or more column tiles of
  256, e.g. 2048 or more rows at 4096 -> 4096);
- else formed on chip once per unit of a row block's column tiles (``lora_fwd_onchip_kernel``:
  the unit's first tile accumulates it beside the base product from the same x tiles, the
  unit's other tiles take it from shared memory), on Hopper in 16 bits for ranks 8 and 16,
  inputs up to ``LORA_PINGPONG_MAX_K`` wide and no dropout (``ONCHIP_FORWARD``, the rule below);
- in every tile's main loop, from the same x tiles (x read once for W and A), for base
  GEMMs of up to ``IN_LOOP_MAX_MACS`` multiply-adds (``M * out * in``), ranks up to
  ``IN_LOOP_MAX_RANK``, no dropout;
- from cuBLAS first (``[M, r]``, one more read of x), which the kernel reads in its epilogue:
  for larger GEMMs, and with dropout, where A multiplies a dropped-out copy of x. On Hopper,
  for inputs up to ``LORA_PINGPONG_MAX_K`` wide and ranks that are multiples of 8, the kernel
  is the ping-pong one instead, which reads xs and B as the last K steps of its main loop;
  for wider inputs the ping-pong kernel on wide cooperative tiles and the Triton kernel are
  timed on a shape's first call and the faster kept (``lora_forward_form``).
Measured on an H200 in bf16 (benchmarks/lora_rank_paths.py, first tile config, results in
benchmarks/results/): with x read once the forward took 1.5-1.7x the bare base GEMM at
8192-32768 tokens x 4096 and 1.7-2.0x at 32768 x 1024, against 1.13-1.16x and 1.57-1.66x
through cuBLAS: the second, 16-64-wide product inside the main loop slows the Triton GEMM
far more than its share of the work. Where the step is host-bound (base GEMMs up to
32768 x 1024 x 1024), the one-kernel path was as fast or faster: 0.050-0.069 against
0.081-0.088 ms forward at 8192 x 1024, and 0.55-0.65 against 0.75-0.94 ms forward+backward
at 32768 x 1024 (`fusedmlp bench lora`, autotuned, same results folder).
Either way ``xs @ B.T``, the bias and the activation are applied on the tile, and the
low-rank output ``[M, out]`` never reaches memory.

The merged form (eager calls; ``MERGED_FORWARD``, ``_merged_forward_wanted``): for the identity
with no dropout on Hopper in 16 bits, at inputs up to 1024 wide and at least as many rows as
outputs, the forward is cuBLAS's ``F.linear`` against ``W + s * B @ A`` (one pass of
``lora_merge_kernel``, rounded once to W's dtype, as the backward's merged dx below), and xs is
formed in the backward, where dB needs it. At K = 1024 every one-kernel form above pays for its
rank product on each unit of tiles (1.24-1.48x the bare GEMM at 32768 x 1024 -> 1024), the merged
one a pass over a 1024 x 1024 weight (1.07-1.08x). Where B trains, the backward's read of x for
xs outweighs that at ranks 8 and 16, whose xs the on-chip forms make nearly free, so there the
merged form is the inference forward's (and a frozen B's) and the forward of ranks above 16.

Backward, with g = dL/dy and dpre = g * act'(pre) (the stream kernel of ``linear_act``, with
its deterministic db; g itself for the identity, with no stream), the rank-r products in the
cheap order (``[M, r]`` intermediates):

    dB = dpre.T @ xs            d_xa = s * (dpre @ B)   [M, r]         dA = d_xa.T @ drop(x)
    dx = dpre @ W + d_xa @ A                                           dW = dpre.T @ x if W trains

dx avoids where it can ``dpre @ W`` plus a separately formed low-rank term ``d_xa @ A`` (an
``[M, in]`` product written by one GEMM and read by the next). On Hopper in 16 bits (ranks
whose rows TMA reads, r a multiple of 8) it is one ping-pong kernel whose main loop ends with
``d_xa @ A`` as extra K steps (kernels/linear_act.py's ``dgrad_pingpong_kernel``: ``cdiv(r, 64)`` steps of 64),
where ``M * cdiv(r, 64) <= DGRAD_TAIL_ROWS_PER_OUTPUT * out`` (eager calls; not in
torch.compile's trace). Elsewhere, with at least as many rows as outputs, it is one GEMM
against the merged weight ``W + s * B @ A``, formed once per backward by one pass over W
(``lora_merge_kernel``; an ``[out, in]`` matrix rounded once to the weight's dtype;
``torch.addmm`` under torch.compile's tracing); with fewer rows than outputs, ``dpre @ W``
with the term added onto it. On an H100 in bf16 at 8192 x 4096 -> 4096, r = 16, dx took 415
us with the tail steps against 454 with the merged weight formed by ``torch.addmm`` (50 us of
it: a copy of W, then a read and a write) and 430 with the merge kernel (25 us); cuBLAS's
bare ``dpre @ W`` 406. Rounding the merged weight costs about one more rounding of dx, as
eager PEFT's two rounded products do: emulated in bf16 on a CPU (2048 x 1024 -> 1024, r = 16,
B at 1e-3 and 1e-1), dx's relative error against float64 was 2.3e-3 with the merged weight,
2.3-2.7e-3 for eager PEFT and 1.7e-3 for dx rounded once (the tail kernel's dx is rounded
once). With dropout the LoRA path's input is a dropped-out copy of x, so the low-rank term
goes to that copy (``d_xa @ A``, through the mask) and dx is ``dpre @ W``.

Where B trains and r pads to 16 (``DGRAD_DB_RANK_BLOCKS``), the tail kernel also forms dB from
the dpre tiles its main loop reads (kernels/lora.py ``lora_dgrad_db_kernel``: each row block's
K steps shared among its column tiles, fp32 partials per row block summed in order after it).
With the tail kernel, from ``BESIDE_DGRAD_MIN_MACS`` multiply-adds of the base GEMM, the other
rank products (dA, and dB where the kernel does not form it; memory-bound: a read of x, a read
of dpre) run beside it: the kernel on a high-priority stream with the fewest programs that take
as many rounds of tiles as one per SM, the products on the current stream, where the SMs left
over and those freed by the kernel's last round take them; the current stream then waits for
the kernel. The same bits either way.

What the backward keeps is ``linear_act``'s choice (``save_preact``; the output for
activations whose derivative follows from it; otherwise nothing, pre recomputed from x and
the saved xs), plus xs ``[M, r]``; after the merged forward, xs is not kept but the merged
weight ``[out, in]`` is, where the backward's dx is taken against it (formed once a step, not
twice). Dropout is PyTorch's (``F.dropout`` on x, outside the kernel), so its mask and its
gradient are PyTorch's own.

fp32 at PyTorch's "highest" matmul precision and fp64 on a GPU (``gemms_on_cublas``, where
Triton's dots would run on CUDA cores) take the reference's form: cuBLAS's base product with
``xs @ B.T`` added by addmm, the activation as one elementwise pass, and the merged weight by
addmm; the backward's dpre stream is elementwise and stays. fp32 at "high" keeps the kernels
(TF32, tiles half as deep in K).

Under torch.compile: ``fusedmlp::lora_linear(x, weight, bias, lora_a, lora_b, x_lora, xs,
scale, act, store_pre) -> (y, pre, xs)`` with its autograd registered.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import torch

from ..kernels.configs import (
    DGRAD_PINGPONG_CONFIG,
    LINEAR_PINGPONG_CONFIG,
    LINEAR_WIDE_COOPERATIVE_CONFIG,
    LORA_CONFIGS,
    LORA_FP32_CONFIGS,
    LORA_HANDOFF_CONFIG,
    LORA_HANDOFF_RANK_BLOCKS,
    LORA_ONCHIP_CONFIG,
    LORA_ONCHIP_STAGES,
    LORA_TMA_CONFIGS,
    Launcher,
)
from ..kernels.launch import launch
from ..kernels.linear_act import dgrad_pingpong_kernel
from ..kernels.lora import (
    lora_dgrad_db_kernel,
    lora_fwd_handoff_kernel,
    lora_fwd_kernel,
    lora_fwd_onchip_kernel,
    lora_fwd_pingpong_kernel,
    lora_fwd_tma_kernel,
    lora_merge_kernel,
)
from ._common import (
    autocast_dtype,
    autotune_m_key,
    call_autocast,
    CallPlans,
    cdiv,
    check_bool,
    check_finite_number,
    check_linear_inputs,
    check_same_dtype_device,
    check_tensor,
    contiguous_bias,
    dot_meta,
    dot_width,
    exact_key,
    FastestForm,
    fork_join,
    gemms_on_cublas,
    grad_needed,
    kernel_backward,
    launch_pingpong,
    num_sms,
    persistent_grid,
    pingpong_device,
    pingpong_eligible,
    tma_eligible,
    use_triton,
)
from .activations import activation_reference, check_activation
from .linear_act import backward_formula, saved_mode, tensor_to_save

__all__ = ["lora_linear", "lora_linear_reference"]

# Where xs = s * x @ A.T comes from (module docstring): the main loop for base GEMMs up to
# this many multiply-adds and ranks up to this for 16-bit data (half of it for fp32, a quarter for
# fp64: the A tile's bytes per pipeline stage must fit the first tile config's shared
# memory), cuBLAS otherwise. Ranks above IN_LOOP_WIDE_RANK take the main loop only up to a
# quarter of IN_LOOP_MAX_MACS: the wider second product costs more than the launch it saves
# there (H200, bf16, benchmarks/lora_rank_paths.py: at 32768 x 1024 -> 1024, r = 64, 0.185 ms
# in the loop against 0.159 through cuBLAS; r <= 32 0.142-0.144 against 0.145-0.150; at
# 8192 x 1024 -> 1024 the loop wins at every rank, 0.098-0.100 against 0.112-0.128).
IN_LOOP_MAX_MACS = 2**35
IN_LOOP_MAX_RANK = 64
IN_LOOP_WIDE_RANK = 32

# With xs given, on Hopper the forward runs as a ping-pong kernel (xs @ B.T as its main loop's
# last K steps) up to this input width; beyond it the Triton kernel (xs @ B.T in its epilogue).
# On an H200, identity, kernel time in CUDA graphs (benchmarks/lora_pingpong_sweep.py): 125.3
# against 140.9 us at 32768 x 1024 -> 1024, r = 64; at K = 4096, 1.5-3% slower at r = 16 (443.1
# against 430.4 us at 8192 x 4096 -> 4096; 1753 / 1722 at 32768 rows) and a tie at r = 64.
LORA_PINGPONG_MAX_K = 1024
# Beyond it, the ping-pong kernel on the linear forward's wide cooperative tiles (2 x 64 rows by
# 256 columns, configs.py) against the Triton TMA kernel, timed per shape key (FastestForm, as
# ops/linear_act.py's forms): on an H100 at 4096 -> 4096, r = 16, 1.075-1.097x the base GEMM
# against 1.093-1.111x, a tie at r = 64 (benchmarks/NOTES.md, "128 x 256 cooperative tiles");
# the Triton kernel is the rule where nothing is timed.
LORA_FORWARD_FORMS = ("tma", "wide")
# With no dropout, on Hopper in 16 bits, ranks 8 and 16 (configs.py's LORA_ONCHIP_STAGES) and
# inputs up to LORA_PINGPONG_MAX_K wide, the forward forms xs on chip (lora_fwd_onchip_kernel:
# once per unit of a row block's column tiles, by the unit's first tile, x read once for W and
# A); ONCHIP_FORWARD = False sends those calls to the forms below (the tests of those forms set
# it). ``_onchip_segments`` cuts each row block into units: ONCHIP_RANK_TILE_COST is what a
# unit's first tile's second MMA costs, in tiles; ONCHIP_X_BYTES bounds the x row blocks read at
# once (every tile of a unit reads its row block again: from L2 if the programs' row blocks fit).
# H100, bf16, identity with bias, kernel time in CUDA graphs, units forced (benchmarks/NOTES.md,
# "LoRA's forward with xs formed on chip"): at 32768 x 1024 -> 1024, r = 16, 147.6 / 135.0 /
# 132.1 / 146.2 us for 1 / 2 / 4 / 8 runs per row block (x read at once 33 / 17 / 8.6 / 4.3
# MB), against 146.6 with x @ A.T in every tile's main loop and 113.4 for cuBLAS's addmm; at
# 8192 rows 48.4 / 30.9 / 32.8 against 36.8 and 28.6. Beyond K = 1024 it lost to the other
# forms at every count (8192 x 4096 -> 4096: 456.8 at best against 444.2).
ONCHIP_FORWARD = True
ONCHIP_RANK_TILE_COST = 0.25
ONCHIP_X_BYTES = 16 * 2**20
# With no dropout, on Hopper in 16 bits, ranks that are multiples of 8 up to 64, the forward
# forms xs on chip in lora_fwd_handoff_kernel (xs items, one per row block, on the programs
# that hold a tile less, handed to the row block's tiles through memory) where the items fit
# beside the tiles; HANDOFF_FORWARD = False sends those calls to the forms below, "always" to
# the kernel wherever it is eligible (tests, benchmarks).
# HANDOFF_ITEM_COST is what an item costs, in tiles of the same K (``_handoff_grid``): with two
# K steps a ring stage, two items fit in one tile's slack at 8192 x 4096 -> 4096 (the kernel
# 423.8 us against linear_act's 402.1 and the forms before's 448.3; H100, bf16, r 16, kernel
# time in CUDA graphs, benchmarks/NOTES.md "LoRA's forward with xs items on the spare programs").
HANDOFF_FORWARD = True
HANDOFF_ITEM_COST = 0.35
# The backward's dx with d_xa @ A as the dgrad kernel's last K steps where M * cdiv(r, BLOCK_K)
# is at most this many times out, against the merged weight beyond (H100, bf16, 4096 x 4096
# weight, r = 16, kernel time in CUDA graphs, configs.py's DGRAD_PINGPONG_CONFIG: 415 against
# 430 us at 8192 rows, a tie at 32768; at 32768 x 1024 -> 1024 124 against 119).
DGRAD_TAIL_ROWS_PER_OUTPUT = 8
# With the tail kernel, dB = dpre.T @ xs and dA = d_xa.T @ x (memory-bound: one read of dpre and
# one of x) run on the current stream while the dgrad kernel runs on a high-priority stream
# with the fewest programs that take as many rounds of tiles as one per SM (1024 tiles: 128
# programs of 8 against 132 of 7.76), the SMs left over taking the products; for base GEMMs of
# at least this many multiply-adds: the fork costs a launch's worth of host time (36-52 us on
# the H100 machines here), which a plain call at a smaller shape may not hide. H100, bf16,
# fwd+bwd steps in CUDA graphs, identity with bias, W frozen, blocks of one form
# (benchmarks/lora_beside_dgrad.py), ms: 8192 x 4096 r 16 0.890 -> 0.858, r 64 0.905 -> 0.885,
# 32768 x 4096 r 16 3.687 -> 3.642, r 64 3.627 -> 3.598, 2048 x 4096 r 16 0.250 -> 0.251; eager
# PEFT's 1.168 / 1.196 / 4.624 / 4.612 / 0.285. The same gradient bits either way.
BESIDE_DGRAD_MIN_MACS = 2**36
# Where B trains and the rank pads to one of these widths, the tail kernel also forms dB from the
# dpre tiles it reads (kernels/lora.py ``lora_dgrad_db_kernel``: fp32 partials per row block,
# summed in order here), and dA alone runs beside it, where it ran after the kernel before. H100,
# bf16, fwd+bwd steps in CUDA graphs, identity with bias, W frozen, us, dB in the kernel against
# beside it (benchmarks/lora_dgrad_db_ab.py; benchmarks/NOTES.md, "LoRA's dB in the dgrad
# kernel"): 8192 x 4096 r 8 / 16 896.9 / 893.1 against 912.6 / 915.1, 32768 x 4096 r 8 / 16
# 3475.8 / 3450.1 against 3522.8 / 3551.4, 8192 x 1024 r 16 103.2 against 102.8; at r 32 (the
# kernel compiles with 32-wide xs tiles too) 901.4 against 896.0 at 8192 x 4096: its partials,
# [row blocks, out, r] fp32, are twice as large, so 32 is left out. 64 would overflow the
# shared memory.
DGRAD_DB_RANK_BLOCKS = (16,)
# The identity LoRA linear with no dropout, inputs up to MERGED_FORWARD_MAX_IN wide and at least
# as many rows as outputs, on Hopper in 16 bits, in eager calls (not torch.compile's trace):
# the forward is cuBLAS's ``F.linear`` against the merged weight ``W + s * B @ A`` (one pass of
# ``lora_merge_kernel``); xs, which dB needs, is then formed in the backward (one more read of
# x there), so where B trains the merged form is taken only above MERGED_FORWARD_XS_MAX_RANK,
# where the one-kernel forms no longer form xs on chip. H100, bf16, bias, CUDA graphs, L2
# flushed, merged / one-kernel, us (benchmarks/lora_merged_forward.py; benchmarks/NOTES.md,
# "LoRA's forward against the merged weight"): forward at 32768 x 1024 -> 1024 r 4 / 8 / 16 /
# 24 / 32 / 64 110.5 / 109.8 / 109.9 / 111.1 / 111.2 / 110.3 against 143.8 / 128.2 / 127.1 /
# 147.4 / 145.3 / 151.4 (the bare mm 102-103), at 8192 rows 35.7-36.5 against 39.1-50.5 (mm
# 30.5-30.7); fwd+bwd at 32768 rows r 8 / 16 328.7 / 329.5 against 319.7 / 320.6, r 24 / 32 /
# 64 332.6 / 332.5 / 335.7 against 342.5 / 339.4 / 346.4; at 8192 rows r 8 / 16 107.8 / 106.3
# against 104.1 / 102.6, r 32 / 64 106.0 / 108.6 against 105.1 / 114.3. MERGED_FORWARD = False
# sends every call to the one-kernel forms (this op's tests set it), "always" takes the merged
# form wherever it is correct (identity, no dropout, no kept pre; tests, benchmarks).
MERGED_FORWARD = True
MERGED_FORWARD_MAX_IN = 1024
MERGED_FORWARD_XS_MAX_RANK = 16
lora_forward_form = FastestForm(fields=("device", "dtype", "m_key", "n", "k", "r", "activation", "bias", "store_pre"),
                                name="lora_forward")
_FWD_KEY = ["M_KEY", "N", "K", "R_PAD", "ACT", "HAS_BIAS", "STORE_PRE", "LORA_IN_LOOP"]
_fwd_launcher = Launcher(lora_fwd_kernel, LORA_CONFIGS, key=_FWD_KEY, fp32_configs=LORA_FP32_CONFIGS)
_fwd_tma_launcher = Launcher(lora_fwd_tma_kernel, LORA_TMA_CONFIGS, key=_FWD_KEY)
# the forward's launch (the forms with xs given or in the loop, the on-chip and hand-off forms) and
# the dgrad kernel's, replayed by a training loop's repeated calls (CallPlans)
_fwd_plans, _onchip_plans, _handoff_plans, _dgrad_plans = CallPlans(), CallPlans(), CallPlans(), CallPlans()


def lora_linear_reference(x, weight, bias, lora_a, lora_b, scale, activation=None, x_lora=None):
    """Plain PyTorch: ``act(x @ W.T + b + scale * (x_lora @ A.T) @ B.T)``, x_lora = x by default."""
    linear = torch.nn.functional.linear
    x_lora = x if x_lora is None else x_lora
    pre = linear(x, weight, bias) + scale * linear(linear(x_lora, lora_a), lora_b)
    return activation_reference(pre, check_activation(activation))


def _rank_block(r: int) -> int:
    """The padded rank the kernel works in: a power of two, at least tl.dot's 16."""
    return dot_width(r)


@functools.lru_cache(maxsize=64)
def _split_scale(scale: float) -> tuple[float, float]:
    """(hi, lo) fp32 numbers with hi + lo = scale to ~1e-15 (Triton passes floats as fp32);
    cached: a layer's scale is the same every call, and the two numpy casts cost host time."""
    hi = float(np.float32(scale))
    return hi, float(np.float32(scale - hi))


def _scaled_rank_product(x, lora_a, scale):
    """``scale * x @ A.T`` [M, r] on cuBLAS, the scale applied before the one rounding (alpha)."""
    xs = x.new_empty((x.shape[0], lora_a.shape[0]))
    return xs.addmm_(x, lora_a.t(), beta=0, alpha=scale)


# --------------------------------------------------------------------------------------
# Kernel launch
# --------------------------------------------------------------------------------------
def _launch_fwd(x, weight, bias, lora_a, lora_b, xs_given, scale, act, store_pre):
    m, k = x.shape
    n, r = weight.shape[0], lora_a.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    pre = torch.empty((m, n) if store_pre else (0,), dtype=x.dtype, device=x.device)
    in_loop = xs_given is None
    xs = torch.empty((m, r), dtype=x.dtype, device=x.device) if in_loop else xs_given
    if m == 0:
        return y, pre, xs
    if n == 0:  # no output tiles to carry the rank-r product: xs for the backward from cuBLAS
        return y, pre, (_scaled_rank_product(x, lora_a, scale) if in_loop else xs)
    plan = (exact_key(x), exact_key(weight), exact_key(bias), exact_key(lora_a), exact_key(lora_b), exact_key(xs),
            y.data_ptr(), pre.data_ptr(), exact_key(scale), act, store_pre, in_loop)
    if _fwd_plans.launch(plan):  # a training loop's repeated call
        return y, pre, xs
    scale_hi, scale_lo = _split_scale(scale)
    common = dict(M=m, N=n, K=k, R=r, M_KEY=autotune_m_key(m), SCALE_HI=scale_hi, SCALE_LO=scale_lo,
                  ACT=act, HAS_BIAS=bias is not None, STORE_PRE=store_pre, LORA_IN_LOOP=in_loop,
                  R_PAD=_rank_block(r))
    b_ptr = bias if bias is not None else y

    def launch_pingpong_form(config):
        # xs @ B.T as the main loop's last K steps (kernels/lora.py); r a multiple of 8 here
        launch_pingpong(
            lora_fwd_pingpong_kernel, config, m, n, num_sms(x),
            {"x_desc": x, "xs_desc": xs}, {"w_desc": weight, "lora_b_desc": lora_b},
            {"y_desc": y, "pre_desc": pre if store_pre else y},
            b_ptr=b_ptr, M=m, N=n, K=k, R=r, ACT=act, HAS_BIAS=bias is not None, STORE_PRE=store_pre,
        )

    pingpong = not in_loop and pingpong_eligible(x, weight, y, xs, lora_b, *((pre,) if store_pre else ()))
    if pingpong and k <= LORA_PINGPONG_MAX_K:
        with _fwd_plans.filing(plan):
            launch_pingpong_form(LINEAR_PINGPONG_CONFIG)
        return y, pre, xs
    lora_strides = dict(stride_lbn=lora_b.stride(0), stride_lbr=lora_b.stride(1), stride_xsm=xs.stride(0))
    if tma_eligible(x, weight, y, *((lora_a,) if in_loop else ()), *((pre,) if store_pre else ())):

        def launch(form):
            if form == "wide":
                return launch_pingpong_form(LINEAR_WIDE_COOPERATIVE_CONFIG)
            return _fwd_tma_launcher.launch(
                persistent_grid(num_sms(x), m, n),
                # *_desc: plain tensors, made descriptors by the launcher (kernels/launch.py); an
                # unused one (A, pre) is any tensor of valid shape
                x_desc=x, w_desc=weight, lora_a_desc=lora_a if in_loop else x,
                b_ptr=b_ptr, lora_b_ptr=lora_b, xs_ptr=xs, y_desc=y,
                pre_desc=pre if store_pre else y,
                **lora_strides, **common, **dot_meta(x.dtype), memo=plan,
            )

        key = (x.device.index, x.dtype, common["M_KEY"], n, k, r, act, bias is not None, store_pre)
        with _fwd_plans.filing(plan):
            lora_forward_form.run(key, LORA_FORWARD_FORMS if pingpong else ("tma",), "tma", launch)
        return y, pre, xs
    grid = lambda meta: (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    _fwd_launcher.launch(
        grid, x, weight, b_ptr, lora_a, lora_b, xs, y, pre if store_pre else y,
        stride_xm=x.stride(0), stride_xk=x.stride(1), stride_wn=weight.stride(0), stride_wk=weight.stride(1),
        stride_lan=lora_a.stride(0), stride_lak=lora_a.stride(1), stride_ym=y.stride(0),
        stride_pm=pre.stride(0) if store_pre else 0,
        **lora_strides, **common, **dot_meta(x.dtype), dtype=x.dtype,
    )
    return y, pre, xs


@functools.lru_cache(maxsize=256)  # a pure function of its arguments, called on every forward
def _onchip_segments(m: int, n: int, k: int, element_size: int, sms: int, block_m: int, block_n: int) -> int:
    """Units per row block for ``lora_fwd_onchip_kernel``: the count of runs its column tiles
    are cut into (none empty) that minimises the busiest program's work, ``cdiv(units, sms)``
    units of ``cdiv(col_tiles, segments) + ONCHIP_RANK_TILE_COST`` tiles each (the fewest
    runs among equals), among the counts whose programs read at most ``ONCHIP_X_BYTES`` of x
    at a time (one ``[BLOCK_M, K]`` row block per run in flight): every tile of a run reads
    its row block again, which only L2 makes cheap. Where no count qualifies, the one that
    comes nearest."""
    row_blocks, col_tiles = cdiv(m, block_m), cdiv(n, block_n)
    row_block_bytes = block_m * k * element_size
    best, best_key = 1, None
    for segments in range(1, col_tiles + 1):
        per_unit = cdiv(col_tiles, segments)
        if (segments - 1) * per_unit >= col_tiles:
            continue
        units = row_blocks * segments
        x_bytes = cdiv(min(units, sms), segments) * row_block_bytes
        key = (max(x_bytes, ONCHIP_X_BYTES), cdiv(units, sms) * (per_unit + ONCHIP_RANK_TILE_COST))
        if best_key is None or key < best_key:
            best, best_key = segments, key
    return best


def _launch_onchip(x, weight, bias, lora_a, lora_b, scale, act, store_pre):
    """(y, pre, xs) from ``lora_fwd_onchip_kernel`` (xs formed on chip and written), or None
    where it does not apply: a GPU without the ping-pong kernels, rows TMA cannot read or
    write, ranks other than 8 and 16, inputs wider than LORA_PINGPONG_MAX_K."""
    m, k = x.shape
    n, r = weight.shape[0], lora_a.shape[0]
    rank_block = _rank_block(r)
    if (not ONCHIP_FORWARD or m == 0 or n == 0 or rank_block not in LORA_ONCHIP_STAGES or k > LORA_PINGPONG_MAX_K
            or (n * x.element_size()) % 16 or not pingpong_eligible(x, weight, lora_a, lora_b)):
        return None
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    pre = torch.empty((m, n) if store_pre else (0,), dtype=x.dtype, device=x.device)
    xs = torch.empty((m, r), dtype=x.dtype, device=x.device)
    meta = dict(LORA_ONCHIP_CONFIG, STAGES=LORA_ONCHIP_STAGES[rank_block])
    block_m, block_n, block_k = (meta.pop(name) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    sms = num_sms(x)
    segments = _onchip_segments(m, n, k, x.element_size(), sms, block_m, block_n)
    # everything the launch's arguments come from: its key as a call plan and as a memo
    plan = (exact_key(x), exact_key(weight), exact_key(bias), exact_key(lora_a), exact_key(lora_b), y.data_ptr(),
            pre.data_ptr(), xs.data_ptr(), exact_key(scale), act, store_pre)
    if _onchip_plans.launch(plan):
        return y, pre, xs
    scale_hi, scale_lo = _split_scale(scale)
    blocks = {"x_desc": (block_m, block_k), "w_desc": (block_n, block_k), "rank_a_desc": (rank_block, block_k),
              "rank_b_desc": (block_n, rank_block), "xs_out_desc": (block_m, rank_block),
              "y_desc": (block_m, block_n), "pre_desc": (block_m, block_n)}
    with _onchip_plans.filing(plan):
        launch(lora_fwd_onchip_kernel, (min(sms, cdiv(m, block_m) * segments),),
               x_desc=x, w_desc=weight, rank_a_desc=lora_a, rank_b_desc=lora_b,
               b_ptr=bias if bias is not None else y, xs_out_desc=xs, y_desc=y, pre_desc=pre if store_pre else y,
               M=m, N=n, K=k, segments=segments, SCALE_HI=scale_hi, SCALE_LO=scale_lo,
               ACT=act, HAS_BIAS=bias is not None, STORE_PRE=store_pre, **meta, descriptor_blocks=blocks, memo=plan)
    return y, pre, xs


def _handoff_grid(tiles: int, row_blocks: int, sms: int) -> tuple[int, bool]:
    """(programs, fits) for ``lora_fwd_handoff_kernel``: the count P <= sms with the shortest
    estimated time, in tiles, of its busiest program (the larger P on a tie), and whether that
    time stays within the rounds of tiles alone (``cdiv(tiles, min(sms, tiles))``). Where it
    does not, the items would lengthen the kernel, which the forms with xs from cuBLAS or on
    chip per unit (a smaller share of a tile per row block there) do not. With ``q, rem =
    divmod(tiles, P)``, rem programs run q + 1 tiles and the other ``P - rem`` q tiles and the
    row blocks' xs items (kernels/lora.py ``handoff_work``), HANDOFF_ITEM_COST tiles each."""
    return _handoff_plan(tiles, row_blocks, sms, HANDOFF_ITEM_COST)


@functools.lru_cache(maxsize=256)
def _handoff_plan(tiles: int, row_blocks: int, sms: int, item_cost: float) -> tuple[int, bool]:
    """``_handoff_grid``'s search, cached: a layer calls with the same shape every step, and the
    search over up to sms / 2 grids took about 20 us of host time uncached (a CPU-only machine)."""
    most = min(sms, tiles)
    best, best_time = most, float("inf")
    for programs in range(most, max(1, most // 2) - 1, -1):
        q, rem = divmod(tiles, programs)
        time = max(q + (rem > 0), q + cdiv(row_blocks, programs - rem) * item_cost)
        if time < best_time:
            best, best_time = programs, time
    return best, best_time <= cdiv(tiles, most)


def _launch_handoff(x, weight, bias, lora_a, lora_b, scale, act, store_pre):
    """(y, pre, xs) from ``lora_fwd_handoff_kernel`` (xs formed on chip and written), or None
    where it does not apply: a GPU without the ping-pong kernels, ranks TMA cannot read (r a
    multiple of 8 in 16 bits) or wider than LORA_HANDOFF_RANK_BLOCKS allow, outputs TMA
    cannot write, shapes whose xs items do not fit beside the tiles (``_handoff_grid``)."""
    m, k = x.shape
    n, r = weight.shape[0], lora_a.shape[0]
    rank_block = _rank_block(r)
    if (not HANDOFF_FORWARD or m == 0 or n == 0 or rank_block not in LORA_HANDOFF_RANK_BLOCKS
            or (n * x.element_size()) % 16 or not pingpong_device(x)):
        return None
    tile_m = 2 * LORA_HANDOFF_CONFIG["BLOCK_M"]  # cooperative: both consumers on each tile
    grid, fits = _handoff_grid(cdiv(m, tile_m) * cdiv(n, LORA_HANDOFF_CONFIG["BLOCK_N"]), cdiv(m, tile_m), num_sms(x))
    # the layout checks last: the shapes that fall through to the on-chip form (which checks
    # them again) skip them here (about 10 us of host time on the H100 machine's host)
    if (not fits and HANDOFF_FORWARD != "always") or not pingpong_eligible(x, weight, lora_a, lora_b):
        return None
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    pre = torch.empty((m, n) if store_pre else (0,), dtype=x.dtype, device=x.device)
    xs = torch.empty((m, r), dtype=x.dtype, device=x.device)
    meta = dict(LORA_HANDOFF_CONFIG)
    block_m, block_n, block_k = (meta.pop(name) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    flags = torch.zeros((cdiv(m, tile_m),), dtype=torch.int32, device=x.device)  # zero at launch
    # everything the launch's arguments come from: its key as a call plan and as a memo
    plan = (exact_key(x), exact_key(weight), exact_key(bias), exact_key(lora_a), exact_key(lora_b), y.data_ptr(),
            pre.data_ptr(), xs.data_ptr(), flags.data_ptr(), grid, exact_key(scale), act, store_pre)
    if _handoff_plans.launch(plan):
        return y, pre, xs
    scale_hi, scale_lo = _split_scale(scale)
    blocks = {"x_desc": (tile_m, block_k), "w_desc": (block_n, block_k), "rank_a_desc": (rank_block, block_k),
              "xs_desc": (tile_m, block_k), "lora_b_desc": (block_n, block_k),
              "y_desc": (block_m, block_n), "pre_desc": (block_m, block_n)}
    with _handoff_plans.filing(plan):
        launch(lora_fwd_handoff_kernel, (grid,),
               x_desc=x, w_desc=weight, rank_a_desc=lora_a, xs_desc=xs, lora_b_desc=lora_b,
               b_ptr=bias if bias is not None else y, xs_ptr=xs, flags_ptr=flags, y_desc=y,
               pre_desc=pre if store_pre else y, M=m, N=n, K=k, R=r, SCALE_HI=scale_hi, SCALE_LO=scale_lo,
               ACT=act, HAS_BIAS=bias is not None, STORE_PRE=store_pre, **meta, descriptor_blocks=blocks, memo=plan)
    return y, pre, xs


def lora_forward_impl(x, weight, bias, lora_a, lora_b, x_lora, xs, scale: float, act: str, store_pre: bool):
    """(y, pre, xs_out) for 2-D x: pre if store_pre (else empty), and ``xs = scale * x_lora @ A.T``
    (x_lora = x when None) when this call computed it; a given ``xs`` is used as is (the
    recompute path) and ``xs_out`` is then empty."""
    given = xs is not None
    kernel = use_triton(x) and not gemms_on_cublas(x)  # else the products on cuBLAS, as the reference
    if not given and x_lora is None and kernel:
        onchip = (_launch_handoff(x, weight, bias, lora_a, lora_b, scale, act, store_pre)
                  or _launch_onchip(x, weight, bias, lora_a, lora_b, scale, act, store_pre))
        if onchip is not None:
            return onchip
    r, macs = lora_a.shape[0], x.numel() * weight.shape[0]
    in_loop = (x_lora is None and r * x.element_size() <= 2 * IN_LOOP_MAX_RANK
               and macs <= (IN_LOOP_MAX_MACS if r <= IN_LOOP_WIDE_RANK else IN_LOOP_MAX_MACS // 4))
    if not given and not (in_loop and kernel):
        xs = _scaled_rank_product(x if x_lora is None else x_lora, lora_a, scale)
    if kernel:
        y, pre, xs_out = _launch_fwd(x, weight, bias, lora_a, lora_b, xs, scale, act, store_pre)
    else:
        pre = torch.nn.functional.linear(x, weight, bias).addmm_(xs, lora_b.t())
        y, xs_out = activation_reference(pre, act), xs
        if not store_pre:
            pre = pre.new_empty((0,))
        elif y is pre:  # the identity: a kept pre is a tensor of its own, as the kernels' is
            pre = pre.clone()
    return y, pre, (x.new_empty((0,)) if given else xs_out)


def _merged_forward_wanted(x, weight, lora_a, x_lora, act: str, store_pre: bool, xs_needed: bool) -> bool:
    """True when an eager call's forward is ``F.linear`` against the merged weight
    (``MERGED_FORWARD``): the identity, no dropout, no kept pre; by the rule, also Hopper,
    16-bit, inputs up to ``MERGED_FORWARD_MAX_IN`` wide, at least as many rows as outputs (where
    one pass over the ``[out, in]`` weight is small beside the GEMM), and, where the backward
    needs xs (``xs_needed``: B trains), ranks above ``MERGED_FORWARD_XS_MAX_RANK``."""
    if not MERGED_FORWARD or act != "identity" or store_pre or x_lora is not None or not use_triton(x):
        return False
    m, (out, k), r = x.shape[0], weight.shape, lora_a.shape[0]
    return MERGED_FORWARD == "always" or (
        pingpong_device(x) and x.element_size() == 2 and k <= MERGED_FORWARD_MAX_IN and m >= out > 0
        and not gemms_on_cublas(x) and (not xs_needed or r > MERGED_FORWARD_XS_MAX_RANK))


def _merged_forward(x, weight, bias, lora_a, lora_b, scale: float):
    """(``x @ (W + scale * B @ A).T + bias``, the merged weight): the merged weight in W's
    dtype, then cuBLAS."""
    merged = _merged_weight(weight, lora_b, lora_a, scale, False)
    return torch.nn.functional.linear(x, merged, bias), merged


# --------------------------------------------------------------------------------------
# Backward (shared by both autograd paths)
# --------------------------------------------------------------------------------------
def _dgrad_tail_wanted(m, weight, lora_a) -> bool:
    """True when dx is the ping-pong kernel with ``d_xa @ A`` as its last K steps: on Hopper,
    16-bit, A's and d_xa's rows readable by TMA (``r`` and ``in`` multiples of 16 bytes' worth),
    and ``m * cdiv(r, BLOCK_K) <= DGRAD_TAIL_ROWS_PER_OUTPUT * out`` (the steps cost the
    GEMM's M x in per K step, the merged weight two passes over the in x out weight)."""
    r, block_k = lora_a.shape[0], DGRAD_PINGPONG_CONFIG["BLOCK_K"]
    return (pingpong_device(weight) and (r * lora_a.element_size()) % 16 == 0 and tma_eligible(weight, lora_a)
            and m * cdiv(r, block_k) <= DGRAD_TAIL_ROWS_PER_OUTPUT * weight.shape[0])


def _dgrad_db_wanted(xs) -> bool:
    """True when the tail kernel also forms dB from its dpre tiles (``lora_dgrad_db_kernel``):
    its rank padding to DGRAD_DB_RANK_BLOCKS, xs's rows readable by TMA, and the dgrad config's
    cooperative tiles."""
    return (DGRAD_PINGPONG_CONFIG.get("COOPERATIVE", False) and _rank_block(xs.shape[1]) in DGRAD_DB_RANK_BLOCKS
            and tma_eligible(xs))


def _dgrad_with_tail(dpre, weight, d_xa, lora_a, beside=(), xs=None):
    """(dx, dB): ``dx = dpre @ W + d_xa @ A`` [M, in], one ping-pong kernel (kernels/linear_act.py)
    where dpre's rows are readable by TMA, else cuBLAS with the low-rank term as the GEMM's
    addend. dB is None without ``xs``; with it, ``dB = dpre.T @ xs`` in fp32 (fp64 for fp64):
    formed by the kernel itself where ``_dgrad_db_wanted`` (kernels/lora.py), else by cuBLAS
    first among the ``beside`` products.
    ``beside``: functions (the rank products dB and dA, or dA alone) run on the current stream
    while the kernel runs on a high-priority stream, from ``BESIDE_DGRAD_MIN_MACS``; after it
    otherwise."""
    dx = dpre.new_empty((dpre.shape[0], weight.shape[1]))
    m, n = dx.shape
    kernel = pingpong_eligible(dpre, weight, d_xa, lora_a, dx)
    with_db = xs is not None and kernel and _dgrad_db_wanted(xs)
    db_beside = []
    if xs is not None and not with_db:
        beside = (lambda: db_beside.append((dpre.t() @ xs).to(torch.promote_types(xs.dtype, torch.float32))),
                  *beside)

    def run_beside():
        for run in beside:
            run()

    if not kernel:
        torch.addmm(d_xa @ lora_a, dpre, weight, out=dx)
        run_beside()
        return dx, (db_beside[0] if db_beside else None)
    config, programs = DGRAD_PINGPONG_CONFIG, num_sms(dpre)
    tile_m = config["BLOCK_M"] * (2 if config.get("COOPERATIVE") else 1)
    fork = bool(beside) and m * n * weight.shape[0] >= BESIDE_DGRAD_MIN_MACS
    if fork:  # the fewest programs that take as many rounds of tiles: the SMs left take the products
        tiles = cdiv(m, tile_m) * cdiv(n, config["BLOCK_N"])
        programs = cdiv(tiles, cdiv(tiles, programs))
    # allocated here, before any fork: the join orders the caller's stream after the kernel
    db_part = dpre.new_empty((cdiv(m, tile_m), weight.shape[0], xs.shape[1]), dtype=torch.float32) if with_db else None
    # everything the kernel's arguments come from
    plan = (exact_key(dpre), exact_key(weight), exact_key(d_xa), exact_key(lora_a), exact_key(xs), dx.data_ptr(),
            None if db_part is None else db_part.data_ptr(), programs, with_db)

    def dgrad():
        _dgrad_plans.run(plan, launch_dgrad)

    def launch_dgrad():
        if with_db:
            launch_pingpong(lora_dgrad_db_kernel, config, m, n, programs,
                            {"a_desc": dpre, "tail_a_desc": d_xa}, {}, {"dx_desc": dx},
                            {"w_kn_desc": weight, "tail_w_kn_desc": lora_a},
                            other_descs={"xs_rank_desc": (xs, (tile_m, _rank_block(xs.shape[1])))},
                            db_part_ptr=db_part, M=m, N=n, K=weight.shape[0], R=lora_a.shape[0])
        else:
            launch_pingpong(dgrad_pingpong_kernel, config, m, n, programs,
                            {"a_desc": dpre, "tail_a_desc": d_xa}, {}, {"dx_desc": dx},
                            {"w_kn_desc": weight, "tail_w_kn_desc": lora_a},
                            M=m, N=n, K=weight.shape[0], R=lora_a.shape[0])

    if fork:
        fork_join(dpre.device, dgrad, run_beside)
    else:
        dgrad()
        run_beside()
    if with_db:  # the row blocks' partials, summed in a fixed order
        return dx, db_part.sum(0)
    return dx, (db_beside[0] if db_beside else None)


def _dx_on_merged_weight(m, weight, lora_a, lora_dx, traced) -> bool:
    """True when the backward's dx is taken against the merged weight (``_backward``): the
    low-rank term goes to dx (``lora_dx``), at least as many rows as outputs, and not the
    dgrad kernel with the rank tail."""
    return lora_dx and m >= weight.shape[0] and (traced or not _dgrad_tail_wanted(m, weight, lora_a))


def _merged_weight(weight, lora_b, lora_a, scale, traced):
    """``W + scale * B @ A`` [out, in] in W's dtype: one pass of ``lora_merge_kernel`` (addmm
    under tracing, where no kernel may launch, on the CPU reference path, and where the
    products run on cuBLAS: ``gemms_on_cublas``)."""
    if traced or not use_triton(weight) or gemms_on_cublas(weight) or weight.numel() == 0:
        return torch.addmm(weight, lora_b, lora_a, alpha=scale)
    merged = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    n, k = weight.shape
    block_n, block_k = (64, 128) if weight.element_size() <= 2 else (32, 64)
    scale_hi, scale_lo = _split_scale(scale)
    launch(lora_merge_kernel, (cdiv(n, block_n), cdiv(k, block_k)), weight, lora_b, lora_a, merged,
           n, k, lora_a.shape[0], scale_hi, scale_lo, weight.stride(0), weight.stride(1), lora_b.stride(0),
           lora_b.stride(1), lora_a.stride(0), lora_a.stride(1), merged.stride(0),
           RANK_BLOCK=min(_rank_block(lora_a.shape[0]), 64), BLOCK_N=block_n, BLOCK_K=block_k,
           **dot_meta(weight.dtype), num_warps=4)
    return merged


def _backward(grad_y, x, weight, bias, lora_a, lora_b, x_lora, xs, saved, scale, act, mode, needs, traced,
              merged=None):
    """(dx, dW, db, dA, dB, dx_lora), None where ``needs`` says it is not wanted. ``xs`` None:
    the forward did not form it (the merged form), so it is formed here if dB needs it.
    ``merged``: the merged weight the forward formed, where dx is taken against it."""
    needs_x, needs_w, needs_b, needs_a, needs_lb, needs_xl = needs
    forward = torch.ops.fusedmlp.lora_linear if traced else lora_forward_impl
    lora_input = x if x_lora is None else x_lora
    if xs is None and (needs_lb or act != "identity"):
        xs = _scaled_rank_product(lora_input, lora_a, scale)
    grads = {"a": None, "b": None, "x_lora": x_lora.new_empty(x_lora.shape) if needs_xl else None}

    def recompute_pre(rows):  # xs is kept: the recomputation is the base GEMM with its epilogue
        return forward(x[rows], weight, bias, lora_a, lora_b, None, xs[rows], scale, "identity", False)[0]

    def accumulate(name, a, b):  # grads[name] + a @ b, summed over the chunks in a fixed order
        grads[name] = a @ b if grads[name] is None else grads[name].addmm_(a, b)

    # dx = dpre @ W + d_xa @ A (module docstring): one kernel with the low-rank term as its last
    # K steps (``tail``), dpre @ (W + s * B @ A) against the merged weight formed once, or
    # dpre @ W with the term added after its GEMM (``d_xa_rows``)
    lora_dx = needs_x and x_lora is None
    m, r = x.shape[0], lora_a.shape[0]
    tail = lora_dx and not traced and _dgrad_tail_wanted(m, weight, lora_a)
    if merged is None and _dx_on_merged_weight(m, weight, lora_a, lora_dx, traced):
        merged = _merged_weight(weight, lora_b, lora_a, scale, traced)
    d_xa_rows = x.new_empty((m, r)) if lora_dx and not tail and merged is None else None
    chunk = {"beside": []}  # the current row chunk's d_xa, and its dB, dA, for the tail kernel
    # dB from the tail kernel itself (``_dgrad_db_wanted``): fp32 over the chunks, rounded once
    db_in_kernel = tail and needs_lb and _dgrad_db_wanted(xs)
    db_sum = []

    def lora_terms(rows, dpre):  # dB, dA, dx_lora and (without the merged weight) dx's d_xa
        later = chunk["beside"].append if tail else (lambda run: run())
        if needs_lb and not db_in_kernel:
            later(lambda: accumulate("b", dpre.t(), xs[rows]))
        if needs_a or needs_xl or d_xa_rows is not None or tail:
            d_xa = dpre.new_empty((dpre.shape[0], r)).addmm_(dpre, lora_b, beta=0, alpha=scale)
            if needs_a:
                later(lambda: accumulate("a", d_xa.t(), lora_input[rows]))
            if needs_xl:
                grads["x_lora"][rows] = d_xa @ lora_a
            if d_xa_rows is not None:
                d_xa_rows[rows] = d_xa
            if tail:
                chunk["d_xa"] = d_xa

    def dgrad_with_tail(rows, dpre):  # run after lora_terms on the same rows
        beside, chunk["beside"] = chunk["beside"], []
        dx_rows, db = _dgrad_with_tail(dpre, weight, chunk.pop("d_xa"), lora_a, beside,
                                       xs[rows] if db_in_kernel else None)
        if db_in_kernel:
            db_sum.append(db if not db_sum else db_sum.pop().add_(db))
        return dx_rows

    dx, dw, db = backward_formula(grad_y, x, weight, bias, saved, act, mode, (needs_x, needs_w, needs_b), traced,
                                  recompute_pre=recompute_pre, extra_terms=lora_terms,
                                  dgrad=dgrad_with_tail if tail else merged)
    if d_xa_rows is not None:
        dx = dx.addmm_(d_xa_rows, lora_a)
    if db_sum:
        grads["b"] = db_sum[0].to(lora_b.dtype)
    return dx, dw, db, grads["a"], grads["b"], grads["x_lora"]


# --------------------------------------------------------------------------------------
# Eager path (autograd.Function) and traced path (custom op with registered autograd)
# --------------------------------------------------------------------------------------
class _LoRAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, x_lora, scale, act, store_pre):
        xs_needed = ctx.needs_input_grad[4]  # dB = dpre.T @ xs
        merged = None
        if _merged_forward_wanted(x, weight, lora_a, x_lora, act, store_pre, xs_needed):
            # xs is formed by the backward, where it is needed; the merged weight is kept where
            # the backward's dx is taken against it (the same tensor it would form again)
            (y, merged), pre, xs = _merged_forward(x, weight, bias, lora_a, lora_b, scale), None, None
            if not _dx_on_merged_weight(x.shape[0], weight, lora_a, ctx.needs_input_grad[0], False):
                merged = None
        else:
            y, pre, xs = lora_forward_impl(x, weight, bias, lora_a, lora_b, x_lora, None, scale, act, store_pre)
        ctx.scale, ctx.act, ctx.mode = scale, act, saved_mode(act, store_pre)
        ctx.save_for_backward(x, weight, bias, lora_a, lora_b, x_lora, xs, tensor_to_save(act, ctx.mode, y, pre),
                              merged)
        return y

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        x, weight, bias, lora_a, lora_b, x_lora, xs, saved, merged = ctx.saved_tensors
        grads = _backward(grad_y, x, weight, bias, lora_a, lora_b, x_lora, xs, saved, ctx.scale, ctx.act,
                          ctx.mode, ctx.needs_input_grad[:6], False, merged)
        return (*grads, None, None, None)


@torch.library.custom_op("fusedmlp::lora_linear", mutates_args=())
def _lora_op(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], lora_a: torch.Tensor,
    lora_b: torch.Tensor, x_lora: Optional[torch.Tensor], xs: Optional[torch.Tensor], scale: float, act: str,
    store_pre: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return lora_forward_impl(x, weight, bias, lora_a, lora_b, x_lora, xs, scale, act, store_pre)


@_lora_op.register_fake
def _(x, weight, bias, lora_a, lora_b, x_lora, xs, scale, act, store_pre):
    shape = (x.shape[0], weight.shape[0])
    return (x.new_empty(shape), x.new_empty(shape if store_pre else (0,)),
            x.new_empty((0,) if xs is not None else (x.shape[0], lora_a.shape[0])))


def _setup_context(ctx, inputs, output):
    x, weight, bias, lora_a, lora_b, x_lora, _, scale, act, store_pre = inputs
    y, pre, xs = output
    ctx.set_materialize_grads(False)
    ctx.scale, ctx.act, ctx.mode = scale, act, saved_mode(act, store_pre)
    ctx.save_for_backward(x, weight, bias, lora_a, lora_b, x_lora, xs, tensor_to_save(act, ctx.mode, y, pre))


def _op_backward(ctx, grad_y, grad_pre, grad_xs):
    if grad_y is None:
        return (None,) * 10
    x, weight, bias, lora_a, lora_b, x_lora, xs, saved = ctx.saved_tensors
    grads = _backward(grad_y, x, weight, bias, lora_a, lora_b, x_lora, xs, saved, ctx.scale, ctx.act, ctx.mode,
                      ctx.needs_input_grad[:6], True)
    return (*grads, None, None, None, None)


torch.library.register_autograd("fusedmlp::lora_linear", _op_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
def check_lora_inputs(weight, lora_a, lora_b, scale) -> None:
    """Validate the adapter of an ``nn.Linear``-style ``weight [out, in]``: A [r, in], B [out, r]."""
    check_tensor(lora_a, "lora_a", ndim=2)
    check_tensor(lora_b, "lora_b", ndim=2)
    check_same_dtype_device("weight", weight, lora_a=lora_a, lora_b=lora_b)
    out_features, in_features = weight.shape
    r = lora_a.shape[0]
    if r < 1:
        raise ValueError(f"lora_a must have at least one row (the rank r), got shape {tuple(lora_a.shape)}")
    if lora_a.shape[1] != in_features:
        raise ValueError(f"lora_a must be [r, in] = [{r}, {in_features}] to match weight "
                         f"{tuple(weight.shape)}, got {tuple(lora_a.shape)}")
    if tuple(lora_b.shape) != (out_features, r):
        raise ValueError(f"lora_b must be [out, r] = [{out_features}, {r}] (rank r from lora_a "
                         f"{tuple(lora_a.shape)}), got {tuple(lora_b.shape)}")
    check_finite_number(scale, "scale", " (alpha / r)")


def lora_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scale: float,
    activation: Optional[str] = None,
    dropout_p: float = 0.0,
    save_preact: bool = False,
) -> torch.Tensor:
    """Fused LoRA linear ``act(x @ weight.T + bias + scale * (drop(x) @ lora_a.T) @ lora_b.T)``.

    Args:
        x: ``[..., in]``, any leading shape; fp16, bf16, fp32 or fp64; any strides.
        weight: ``[out, in]`` base weight (usually frozen; its gradient is computed only if it
            requires one). bias: optional ``[out]``, trainable or not.
        lora_a: ``[r, in]``; lora_b: ``[out, r]`` (PEFT's ``lora_A`` / ``lora_B`` weights).
        scale: the LoRA multiplier (``alpha / r``; PEFT's ``scaling``).
        activation: None (identity, a plain LoRA linear) or one of relu, squared_relu, gelu,
            gelu_tanh, sigmoid, silu.
        dropout_p: dropout probability on the LoRA path's input (applied whenever > 0, as
            ``F.dropout(training=True)``; modules pass 0 in eval mode).
        save_preact: True keeps the pre-activation for the backward, False (default) keeps
            what ``fusedmlp.linear_act`` keeps (the output, or nothing). Unlike linear_act,
            the backward does not write over the kept pre-activation, so a second backward
            (``retain_graph=True``) works.

    Returns:
        ``[..., out]`` tensor of x's dtype; inside ``torch.autocast``, of the autocast dtype (tensor
        arguments cast as for ``F.linear``).
    """
    if (dtype := autocast_dtype(x)) is not None:  # under torch.autocast: cast as F.linear's inputs are
        return call_autocast(lora_linear, dtype, x, weight, bias, lora_a, lora_b, scale, activation, dropout_p,
                             save_preact)
    act = check_activation(activation)
    check_linear_inputs(x, weight, bias)
    check_lora_inputs(weight, lora_a, lora_b, scale)
    check_bool(save_preact, "save_preact")
    bias = contiguous_bias(bias)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1], got {dropout_p!r}")
    x2d = x.reshape(-1, weight.shape[1])
    x_lora = torch.nn.functional.dropout(x2d, dropout_p, training=True) if dropout_p > 0 else None
    scale = float(scale)
    if not grad_needed(x2d, weight, bias, lora_a, lora_b):  # inference: nothing kept for a backward
        if torch.compiler.is_compiling():
            y = torch.ops.fusedmlp.lora_linear(x2d, weight, bias, lora_a, lora_b, x_lora, None, scale, act, False)[0]
        elif _merged_forward_wanted(x2d, weight, lora_a, x_lora, act, False, False):
            y = _merged_forward(x2d, weight, bias, lora_a, lora_b, scale)[0]
        else:
            y = lora_forward_impl(x2d, weight, bias, lora_a, lora_b, x_lora, None, scale, act, False)[0]
    elif torch.compiler.is_compiling():
        y = torch.ops.fusedmlp.lora_linear(x2d, weight, bias, lora_a, lora_b, x_lora, None, scale, act,
                                           save_preact)[0]
    else:
        y = _LoRAFunction.apply(x2d, weight, bias, lora_a, lora_b, x_lora, scale, act, save_preact)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], weight.shape[0])
