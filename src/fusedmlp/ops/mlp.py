"""A whole MLP in one fused kernel: planning, validation, launch, autograd, torch.library ops.

    fusedmlp.mlp(x, weights, biases=None, activation="relu", last_activation=None, recompute=False)
        a_0 = x;  a_{i+1} = act_i(a_i @ weights[i].T + biases[i]);  y = a_L
        act_i = activation for every layer but the last, last_activation for the last.

Forward: one kernel for the whole stack (kernels/mlp.py) when it fits on chip: every layer's
output at most ``FULL_MAX`` wide, except that a wider layer may be followed by a narrow one
(it is then streamed in chunks into the next layer) or be the last (streamed into y); so is
a layer whose weight tile is too large to load whole (``FULL_TILE_BYTES``: 256 x 256 in fp32).
So 13-512-256-64-16 and 367-512-256-1 (DLRM) run as one kernel; two adjacent layers wider than
``FULL_MAX`` (1024-1024-...) do not, and such stacks run layer by layer through
``linear_act``, automatically (so do CPU tensors without the Triton interpreter, through its
PyTorch reference). CUDA tensors whose products would run on CUDA cores, fp32 at PyTorch's
"highest" matmul precision and fp64 (``gemms_on_cublas``: on an H100 the whole-stack kernel's
fp32 CUDA-core dots ran DLRM's MLPs 2.4-5x slower than eager's SGEMM and took 20-60 s to
compile a tile), run layer by layer with cuBLAS products under one autograd Function
(``_CublasStackFunction``). On Hopper in 16 bits, from ``FIRST_LAYER_GEMM_MIN_ROWS`` rows, a wide
first layer fed by a wide input (DLRM's 367 -> 512) runs as linear_act's forward and the
rest of the stack as one kernel (the comment at that constant says when and why); in eager
mode inside ``fusedmlp.graph_capture_mode`` (a step to be replayed from a CUDA graph), from
``FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED`` rows.

Backward: the dgrad kernel (every ``dL/dz_i``, and dx, in one pass from the last layer to the
first; for an input wider than ``FULL_MAX`` dx is one cuBLAS product after it), then one
grouped wgrad launch for every dW and db (plus a fixed-order reduction of its
row-slice partials when the batch is large): 2-3 launches whatever the depth. The wgrad
kernel reads x's rows whole 16-byte units wide where they have room (the forward's
zero-padded copy of a 367-wide input, DLRM's interaction rows), so its loads of x are vectors.
For a stack whose input is wider than ``FULL_MAX`` (DLRM's 367-wide top MLP), in a step for
replay from a CUDA graph from ``CUBLAS_WGRAD_MIN_ROWS_GRAPHED`` rows on a GPU (in plain calls
from ``CUBLAS_WGRAD_MIN_ROWS``: never by default, the constant says why), the weight gradients
are cuBLAS products of the saved tensors instead (``_weight_grads_cublas``: one per layer, and
a product with a ones vector per bias). The top MLP's weight gradients on an H100 in bf16
(``benchmarks/mlp_wgrad_cols.py``), kernel / cuBLAS: 13.9 / 33.8 us at 2048 rows, 38.5 /
58.6 at 8192, 68.5 / 70.5 at 16384, 119 / 109 at 32768, 216 / 165 at 65536 (the kernel
reading 367 columns: 26-396 us); the captured fwd+bwd steps tie at 16384 rows (160 us). The
bottom MLP's (13 wide input) take 147 us with the kernel and 198 us on cuBLAS at 65536 rows
(H200, ``benchmarks/mlp_wgrad_sweep.py``).

What the backward keeps, per layer (``recompute=False``, the default): the output for
activations whose derivative is a function of it (identity, relu, squared_relu, sigmoid; it
is also the next layer's input), otherwise the pre-activation (the input of the next layer is
then recomputed from it on load). For the last layer: y itself, or its pre-activation when
``last_activation`` needs it. ``recompute=True`` keeps only x and runs the forward kernel again
at the start of the backward.

Under torch.compile:
    fusedmlp::mlp(x, weights, biases, acts, save) -> [y, saved_0, ..., saved_{L-1}]
    fusedmlp::mlp_backward(g, x, weights, biases, saved, y, acts, recompute, needs_dx) -> (dx, grads)
``grads`` is one flat buffer holding dW_0, db_0, dW_1, ... (views of it are the gradients).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .._cuda_graph import in_graph_capture_mode
from ..kernels.configs import INTERPRET, MLP_DGRAD_CONFIGS, MLP_FWD_CONFIGS, Launcher
from ..kernels.launch import exact_key, launch, launch_prepared
from ..kernels.mlp import (
    mlp_dgrad_kernel, mlp_fwd_kernel, mlp_pad_rows_kernel, mlp_reduce_kernel, mlp_wgrad_kernel,
)
from ._common import (
    acc_dtypes,
    aligned_rows_empty,
    aligned_width,
    autocast_dtype,
    autotune_m_key,
    call_autocast,
    cdiv,
    check_bool,
    check_same_dtype_device,
    check_tensor,
    dot_meta,
    dot_width,
    gemms_on_cublas,
    grad_needed,
    kernel_backward,
    next_power_of_2,
    num_sms,
    pingpong_device,
    rows_aligned,
    shared_memory_per_block,
    use_triton,
    widened,
)
from .activations import DERIVATIVE_FROM_OUTPUT, activation_reference, check_activation
from .linear_act import _cublas_fwd, backward_formula, linear_act, linear_act_forward_impl

__all__ = ["mlp", "mlp_reference", "mlp_plan", "FULL_MAX"]

# Widest layer output kept whole on chip (a BLOCK_M x FULL_MAX fp32 accumulator); wider
# layers are streamed in BLOCK_C-column chunks.
FULL_MAX = 256
# Largest weight tile a "full" layer loads whole (``[PADS[i], PADS[i+1]]`` elements: the dot
# operand staged in shared memory, next to the activation tile): 256 x 256 in 16 bits. A layer
# whose tile is larger (256 x 256 in fp32: 256 KiB, past Hopper's 227 KiB a block, so the
# kernel would not launch) is streamed in BLOCK_C-column chunks into the next layer instead,
# as a wide one. Layer 0's tile counts only where the dgrad walk forms dx from it whole
# (``dx_direct``); its forward reads W_0 in BLOCK_IN steps.
FULL_TILE_BYTES = 128 * 1024
# A streamed layer whose input is one narrow tile loads its next chunk's weight tile and bias
# while the current chunk's dots run (kernels/mlp.py, _streamed_pair): a program's serial
# chain of chunks is the kernel's time when there are few row blocks per multiprocessor, and
# when the forward writes tensors for the backward at any batch. An inference forward (nothing
# saved) does it up to this many rows (rounded up to a power of two, as the tuner's key):
# beyond, the grid hides the loads' latency and the tile held ahead costs occupancy. H100, bf16,
# CUDA-graph kernel time, best config each way (benchmarks/NOTES.md, "The MLP forward's loads
# one chunk ahead"): training forward 0.72-0.99x at 2048-65536 rows on DLRM's bottom MLP and a
# 32-64-512-64-16 stack; inference 0.76-0.98x up to 16384 rows, 1.00-1.45x at 32768-65536.
LOADS_AHEAD_MAX_ROWS = 16384
# Inputs at least this wide whose rows are not a multiple of 16 bytes (DLRM's 367) reach the
# forward kernel in aligned rows, W_0 padded likewise (``_aligned_first_layer``). Narrower ones
# (13) are left alone: a K loop of one step gains nothing from it, and the copies would add
# launches to small steps that are host-bound already (a choice, not a measurement).
ALIGN_MIN_WIDTH = 64
# A first layer that is wide in (at least ALIGN_MIN_WIDTH) and streamed out (wider than
# FULL_MAX, a narrow layer next: DLRM's top MLP, 367 -> 512 -> 256 -> 1) runs on Hopper in
# 16 bits, from FIRST_LAYER_GEMM_MIN_ROWS rows, as a GEMM of its own (linear_act's ping-pong
# forward: TMA, wgmma, the activation in its epilogue), the rest of the stack as one kernel
# reading that layer's output (which the backward keeps anyway). The whole-stack kernel
# re-reads x once per 128-column chunk of the wide layer, on mma.sync tiles; TMA also reads
# the interaction's padded rows in place, so they need no copy. On an H200 in bf16
# (``benchmarks/mlp_split_sweep.py``, CUDA graphs, copies included), the top MLP's training
# forward at 4096 / 16384 / 65536 rows: 36 / 50 / 196 us whole, 21 / 40 / 139 split from
# contiguous rows, 18 / 30 / 111 from the interaction's; inference 139 us whole at 65536, 130
# and 103 split. The split costs one launch more, 30-40 us of host time on the machines
# here: it is taken where it saves more GPU time than that (10-20 us at 16384 rows, 57-85 at
# 65536 in training; plain calls at those sizes are host-bound on this host either way).
FIRST_LAYER_GEMM_MIN_ROWS = 32768
# In ``graph_capture_mode`` (a step captured in a CUDA graph and replayed: no host time per
# launch) the split is taken from this many rows, the fewest measured: the same sweep gave the
# training forward 15 us split against 33 whole at 512 and 1024 rows, 18-19 against 34 at 2048
# (inference 16 against 26-27); the captured top-MLP step of ``fusedmlp bench mlp``
# (``benchmarks/mlp_graph_split.py``) 67 against 85 us forward+backward at 2048 rows, 124
# against 136 at 8192.
FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED = 512
# The wgrad kernel sums each dW tile over row slices of at least this many rows, as many
# slices as it takes to give every multiprocessor about _WGRAD_TILES_PER_SM tiles.
WGRAD_MIN_SLICE_ROWS = 1024
_WGRAD_TILES_PER_SM = 4
# (BLOCK_N, BLOCK_K) of the wgrad tiles (4 warps, 3 stages) and the most rows summed per
# step (BLOCK_R), from a sweep on an H200 in bf16: 64 x 128 x 128 was the fastest of the tiles
# that computed right, 147 us for the bottom DLRM MLP's weight gradients at 65536 rows
# (64 x 64 x 64 with two tiles per SM, the earlier choice: 346 us; cuBLAS, one product per
# layer: 198 us). BLOCK_R shrinks until the stages fit the GPU's shared memory, less
# _WGRAD_SMEM_SPARE for Triton's own scratch (fp32 on an H200: 64 rows). 128 x 128 tiles on
# 4 warps and 64 x 256 on 8 computed gradients 1-5% off there (Triton 3.6): not used.
_WGRAD_TILE = (32, 32, 32) if INTERPRET else (64, 128, 128)
_WGRAD_STAGES = 3
_WGRAD_SMEM_SPARE = 24 * 1024
_REDUCE_BLOCK = 1024
# The weight gradients of a stack wider in than FULL_MAX (DLRM's top MLP) are cuBLAS products
# (``_weight_grads_cublas``) in a step replayed from a CUDA graph (graph_capture_mode, or a
# capture under way) from CUBLAS_WGRAD_MIN_ROWS_GRAPHED rows, where they take less GPU time
# than the wgrad kernel (module docstring). In plain calls from CUBLAS_WGRAD_MIN_ROWS: never by
# default. They are six launches (a product per weight and per bias) where the kernel's
# finished calls are two: on an H200 machine here each cuBLAS call took 35-45 us of host time
# (torch.profiler), and the plain top-MLP step at 65536 rows was the host's (1.43 ms from an
# idle GPU against 0.41 of GPU work), where cuBLAS saves about 50 us of GPU time.
CUBLAS_WGRAD_MIN_ROWS = 2**62
CUBLAS_WGRAD_MIN_ROWS_GRAPHED = 16384

_KEY = ["M_KEY", "WIDTHS", "ROLES", "ACTS"]
# How the tuner times the forward's and the dgrad's configs (kernels/configs.py, Launcher).
MLP_TUNER_TIMING = "graph"
_fwd_launcher = Launcher(mlp_fwd_kernel, MLP_FWD_CONFIGS, key=_KEY + ["HAS_BIAS", "SAVE", "LOADS_AHEAD"],
                         timing=MLP_TUNER_TIMING)
_dgrad_launcher = Launcher(mlp_dgrad_kernel, MLP_DGRAD_CONFIGS, key=_KEY + ["FROM_OUTPUT", "NEEDS_DX"],
                           timing=MLP_TUNER_TIMING)


@dataclass(frozen=True)
class MLPPlan:
    """How one stack runs: per-layer facts as the kernels take them (tuples, one entry per layer)."""

    widths: tuple   # (in, out_0, ..., out_{L-1})
    pads: tuple     # widths rounded up to a power of two, at least 16
    roles: tuple    # "full", "streamed", "consumer" or "streamed_out" (kernels/mlp.py)
    acts: tuple
    has_bias: tuple
    save: tuple     # what a training forward writes per layer: "pre", "out" or "none"
    from_output: tuple  # act' from the saved output (hidden: the saved tensor; last: y)
    a_acts: tuple   # wgrad: activation applied to the saved tensor to get layer i's input
    offsets: tuple  # start of dW_i (then db_i) in the flat gradient buffer
    total: int      # size of that buffer
    dx_direct: bool  # dx formed in the dgrad walk (input at most full_max wide), else on cuBLAS

    @property
    def layers(self) -> int:
        return len(self.acts)


def _roles(widths: tuple, full_max: int, itemsize: int) -> Optional[tuple]:
    """The roles of the layers, or None when the stack cannot run as one kernel. A layer is
    streamed when its output is wider than ``full_max``, or when its weight tile would be more
    than FULL_TILE_BYTES of ``itemsize``-byte elements (then a consumer may still follow: it
    reads the weight in chunks)."""
    layers = len(widths) - 1
    roles = []
    for i in range(layers):
        wide = widths[i + 1] > full_max
        whole_tile = i > 0 or dot_width(widths[0]) <= full_max
        big_tile = whole_tile and dot_width(widths[i]) * dot_width(widths[i + 1]) * itemsize > FULL_TILE_BYTES
        if roles and roles[-1] == "streamed":
            if wide:
                return None  # two wide layers in a row: no narrow consumer
            roles.append("consumer")
        elif wide or big_tile:
            roles.append("streamed_out" if i == layers - 1 else "streamed")
        else:
            roles.append("full")
    return tuple(roles)


@functools.lru_cache(maxsize=256)
def mlp_plan(widths: tuple, acts: tuple, has_bias: tuple, full_max: int, itemsize: int = 2) -> Optional[MLPPlan]:
    """The plan of a stack (``acts`` resolved per layer; ``itemsize``: bytes per element of the
    data dtype), or None if it needs the per-layer path."""
    roles = _roles(widths, full_max, itemsize)
    if roles is None:
        return None
    layers = len(acts)
    save, from_output = [], []
    for i, act in enumerate(acts):
        derivable = act in DERIVATIVE_FROM_OUTPUT
        if i < layers - 1:  # the next layer's input is needed anyway: the output if it gives act'
            save.append("out" if derivable else "pre")
            from_output.append(derivable)
        else:  # y is returned (and saved by autograd): enough when act' follows from it
            save.append("none" if derivable else "pre")
            from_output.append(derivable)
    a_acts = ("identity",) + tuple(acts[i] if save[i] == "pre" else "identity" for i in range(layers - 1))
    offsets, total = [], 0
    for i in range(layers):
        offsets.append(total)
        total += widths[i + 1] * widths[i] + (widths[i + 1] if has_bias[i] else 0)
    pads = tuple(dot_width(w) for w in widths)
    return MLPPlan(widths, pads, roles, acts, has_bias, tuple(save), tuple(from_output), a_acts, tuple(offsets),
                   total, pads[0] <= full_max)


def layer_activations(layers: int, activation: str, last_activation: str) -> tuple:
    return (activation,) * (layers - 1) + (last_activation,)


def mlp_reference(x, weights, biases=None, activation="relu", last_activation=None):
    """Plain PyTorch: the same stack with ``F.linear`` and the activation of each layer."""
    acts = layer_activations(len(weights), check_activation(activation), check_activation(last_activation))
    biases = [None] * len(weights) if biases is None else biases
    if x.device.type == "cpu" and x.element_size() == 2 and not x.is_contiguous():
        # PyTorch 2.13's CPU 16-bit matmul on AMX / avx512_bf16 processors lets NaN in the gap
        # between the rows of a row-padded x (the fused interaction's output) into the result
        x = x.contiguous()
    for w, b, act in zip(weights, biases, acts):
        x = activation_reference(torch.nn.functional.linear(x, w, b), act)
    return x


# --------------------------------------------------------------------------------------
# Kernel launches
# --------------------------------------------------------------------------------------
def _block_in(plan: MLPPlan) -> int:
    """K step of the layer-0 loop over x."""
    return min(32 if INTERPRET else 64, plan.pads[0])


def _first_layer_padding(x) -> Optional[int]:
    """The width x's and W_0's rows are copied to for the forward kernel (``_aligned_first_layer``),
    or None where they go in as they are."""
    cols = x.shape[1]
    padded = aligned_width(cols, x.element_size())
    return None if padded == cols or cols < ALIGN_MIN_WIDTH else padded


def _first_layer_as_gemm(x, plan: MLPPlan, graphed: bool = False) -> bool:
    """True when layer 0 runs as a GEMM of its own (FIRST_LAYER_GEMM_MIN_ROWS says when and
    why; ``graphed``: for replay from a CUDA graph, FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED); from
    metadata alone, so that fake tensors get the same answer (the custom op never passes
    ``graphed``). The layer's output width must give 16-byte rows (TMA writes them; the rest of
    the stack reads them as they are)."""
    min_rows = FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED if graphed else FIRST_LAYER_GEMM_MIN_ROWS
    return (plan.roles[0] == "streamed" and plan.widths[0] >= ALIGN_MIN_WIDTH
            and aligned_width(plan.widths[1], x.element_size()) == plan.widths[1]
            and x.shape[0] >= min_rows and pingpong_device(x))


def _aligned_first_layer(x, w0, as_gemm: bool = False):
    """(x, W_0) for the forward kernel, both in rows a multiple of 16 bytes long.

    A wide input of unaligned width (367: DLRM's top MLP) is copied into zero-padded rows of
    the aligned width (368; ``mlp_pad_rows_kernel``) and W_0 likewise (0.4 MB): with rows of
    734 bytes every load of x and W_0 would be a 2-byte one. ``as_gemm`` (layer 0 by TMA,
    which reads rows in place and zero-fills past the last column): x is copied only when its
    rows are not 16-byte aligned in memory already (the interaction's rows are).
    Measured on an H200 in bf16 (``benchmarks/mlp_fwd_sweep.py``, CUDA-graph timing, 65536
    rows), the top MLP's forward kernel: 306 us on contiguous 367-wide rows (W_0 padded);
    on the interaction's padded rows read in place, whose padding may hold anything (NaN),
    211 us with the last K step masked column by column, 195 us with the padding zeroed
    after the load in that step, 206 us zeroed in every step; 167 us on zero-padded rows,
    to which the copy adds 28 us.
    """
    padded = _first_layer_padding(x)
    if padded is None:
        return x, w0
    if as_gemm and rows_aligned(x):
        return x, _zero_padded_rows(padded, w0)[0]
    return _zero_padded_rows(padded, x, w0)


def _no_padding(like) -> tuple:
    """``padded`` where no copy was made: two empty tensors."""
    return like.new_empty((0,)), like.new_empty((0,))


def _padded_first_layer_empty(x, w0, plan: MLPPlan) -> tuple:
    """Uninitialised tensors of the shapes ``_launch_forward`` returns as ``padded`` (fake impls)."""
    padded = _first_layer_padding(x)
    if padded is None or x.shape[0] == 0:
        return _no_padding(x)
    x_copied = not (_first_layer_as_gemm(x, plan) and rows_aligned(x))
    return (x.new_empty((x.shape[0], padded) if x_copied else (0,)), w0.new_empty((w0.shape[0], padded)))


def _first_layer_operands(x, w0, padded) -> tuple:
    """(x, W_0) for the backward's cuBLAS products: views of the forward's zero-padded copies
    where it made them (their rows are 16-byte aligned, so ``_mm_into`` takes them in place
    instead of padding again), else x and W_0 themselves."""
    x_wide, w0_wide = padded
    cols = w0.shape[1]
    return (x_wide[:, :cols] if x_wide.numel() else x), (w0_wide[:, :cols] if w0_wide.numel() else w0)


def _kept_x(x, padded):
    """What the backward keeps of x: nothing (an empty placeholder) when it keeps x's padded
    copy, which serves its products instead (so a caller that drops x frees it)."""
    return x if not padded[0].numel() else padded[0].new_empty((0,))


def _zero_padded_rows(width: int, *tensors) -> tuple:
    """Each of ``tensors`` (one or two, [rows, cols] of the same cols, any strides) copied into
    contiguous ``[rows, width]`` rows, zeros past ``cols``: one launch of
    ``mlp_pad_rows_kernel`` for all."""
    outs = tuple(t.new_empty((t.shape[0], width)) for t in tensors)
    a, b = tensors if len(tensors) == 2 else (tensors[0], tensors[0][:0])
    a_out, b_out = outs if len(outs) == 2 else (outs[0], outs[0])
    if a.shape[0] + b.shape[0] == 0:
        return outs
    memo = (width, exact_key(a), exact_key(b), exact_key(outs))
    if launch_prepared(mlp_pad_rows_kernel, memo):
        return outs
    block_w = min(next_power_of_2(width), 1024)
    block_m = max(1, 8192 // block_w)
    grid = (cdiv(a.shape[0], block_m) + cdiv(b.shape[0], block_m),)
    launch(mlp_pad_rows_kernel, grid, a, a_out, a.shape[0], a.stride(0), a.stride(1),
           b, b_out, b.shape[0], b.stride(0), b.stride(1), COLS=a.shape[1], WIDTH=width, BLOCK_M=block_m,
           BLOCK_W=block_w, memo=memo)
    return outs


def _launch_forward(x, weights, biases, plan: MLPPlan, save: bool, graphed: bool = False):
    """(y, saved, padded): y [M, out]; saved[i] per ``plan.save`` when ``save``, else empty
    tensors; padded = (x, W_0) copied into zero-padded rows (``_aligned_first_layer``), an
    empty tensor in place of each that was not."""
    modes = plan.save if save else ("none",) * plan.layers
    if x.shape[0] and _first_layer_as_gemm(x, plan, graphed):
        return _launch_forward_first_gemm(x, weights, biases, plan, modes)
    x_in, w0 = _aligned_first_layer(x, weights[0]) if x.shape[0] else (x, weights[0])
    y, saved, empty = _launch_stack(x_in, (w0,) + tuple(weights[1:]), biases, plan, modes)
    return y, saved, ((x_in, w0) if x_in is not x else (empty, empty))


def _loads_ahead(m: int, modes: tuple) -> bool:
    """Whether the forward's streamed layers load their next chunk ahead (LOADS_AHEAD_MAX_ROWS)."""
    return modes != ("none",) * len(modes) or autotune_m_key(m) <= LOADS_AHEAD_MAX_ROWS


def _launch_stack(x, weights, biases, plan: MLPPlan, modes: tuple):
    """(y, saved, empty): the whole-stack kernel over x and the weights as given (x's rows and
    W_0's as the kernel is to read them), saving per ``modes``; ``empty``, an empty tensor,
    stands for each tensor not saved (one allocation: each costs host time)."""
    m = x.shape[0]
    y = x.new_empty((m, plan.widths[-1]))
    empty = x.new_empty((0,))
    saved = [x.new_empty((m, plan.widths[i + 1])) if mode != "none" else empty for i, mode in enumerate(modes)]
    if m == 0:
        return y, saved, empty
    # everything the launch's arguments follow from (the plan: from the weights' shapes, the
    # biases' presence, the dtype and the activations): a repeated call is the finished call
    memo = (plan.acts, modes, exact_key(x), exact_key(tuple(weights)), exact_key(tuple(biases)), exact_key(y),
            exact_key(tuple(saved)))
    if _fwd_launcher.launch_prepared(memo):
        return y, saved, empty
    grid = lambda meta: (cdiv(m, meta["BLOCK_M"]),)  # noqa: E731
    _fwd_launcher.launch(
        grid, x, tuple(weights), tuple(b if b is not None else y for b in biases), y,
        tuple(t if t.numel() else y for t in saved),
        M=m, M_KEY=autotune_m_key(m), stride_xm=x.stride(0), stride_xk=x.stride(1),
        WIDTHS=(weights[0].shape[1],) + plan.widths[1:], PADS=plan.pads, ROLES=plan.roles, ACTS=plan.acts,
        HAS_BIAS=plan.has_bias, SAVE=modes, LOADS_AHEAD=_loads_ahead(m, modes), BLOCK_IN=_block_in(plan),
        **dot_meta(x.dtype),
        dtype=x.dtype, memo=memo,
    )
    return y, saved, empty


def _launch_forward_first_gemm(x, weights, biases, plan: MLPPlan, modes: tuple):
    """``_launch_forward`` with layer 0 as a GEMM of its own (FIRST_LAYER_GEMM_MIN_ROWS):
    ``a_1 = act_0(x @ W_0.T + b_0)`` by linear_act's forward, then layers 1.. as one kernel
    over a_1. a_1 (or z_0, for an activation whose derivative needs it) is layer 0's saved
    tensor, as the whole-stack kernel would write it."""
    cols = x.shape[1]
    x_in, w0_in = _aligned_first_layer(x, weights[0], as_gemm=True)
    a1, z0 = linear_act_forward_impl(x_in[:, :cols], w0_in[:, :cols], biases[0], plan.acts[0], modes[0] == "pre")
    rest = mlp_plan(plan.widths[1:], plan.acts[1:], plan.has_bias[1:], FULL_MAX, x.element_size())
    y, saved, empty = _launch_stack(a1, weights[1:], biases[1:], rest, modes[1:])
    first = a1 if modes[0] == "out" else (z0 if modes[0] == "pre" else empty)
    return y, [first] + saved, (x_in if x_in is not x else empty, w0_in if w0_in is not weights[0] else empty)


@functools.lru_cache(maxsize=256)
def _wgrad_geometry(plan: MLPPlan, m: int, dtype: torch.dtype, sms: int, shared: int) -> tuple:
    """(TILE_N, TILE_K, BLOCK_R, tiles, slices, rows_per_slice) of the wgrad launch over m rows
    (cached: a step's host time is what small batches pay for). TILE_N and TILE_K, per layer:
    the _WGRAD_TILE shape clipped to the layer's padded widths (a 13-wide input takes 16-wide
    tiles, not 128 of padding); BLOCK_R shrinks until the stages fit ``shared`` bytes; row
    slices of at least WGRAD_MIN_SLICE_ROWS rows, about _WGRAD_TILES_PER_SM tiles per
    multiprocessor."""
    block_n, block_k, block_r = (16, 16, 16) if (dtype == torch.float64 and not INTERPRET) else _WGRAD_TILE
    budget = shared - _WGRAD_SMEM_SPARE
    while block_r > 16 and _WGRAD_STAGES * block_r * (block_n + block_k) * dtype.itemsize > budget:
        block_r //= 2
    tile_n = tuple(min(block_n, plan.pads[i + 1]) for i in range(plan.layers))
    tile_k = tuple(min(block_k, plan.pads[i]) for i in range(plan.layers))
    tiles = sum(cdiv(plan.widths[i + 1], tile_n[i]) * cdiv(plan.widths[i], tile_k[i]) for i in range(plan.layers))
    slices = max(1, min(cdiv(m, WGRAD_MIN_SLICE_ROWS), cdiv(_WGRAD_TILES_PER_SM * sms, tiles)))
    rows_per_slice = cdiv(cdiv(m, slices), block_r) * block_r
    return tile_n, tile_k, block_r, tiles, cdiv(m, rows_per_slice), rows_per_slice


def _new_dx(g, plan: MLPPlan, needs_dx: bool):
    """dx [M, in] (empty unless needs_dx): contiguous for the dgrad kernel; with 16-byte aligned
    rows when cuBLAS writes it (an input wider than FULL_MAX), which ``_mm_into`` then does in place."""
    if not needs_dx:
        return g.new_empty((0,))
    if plan.dx_direct:
        return g.new_empty((g.shape[0], plan.widths[0]))
    return aligned_rows_empty(g, g.shape[0], plan.widths[0])


def _wgrad_on_cublas(g, plan: MLPPlan, graphed: bool) -> bool:
    """Whether the weight gradients are cuBLAS products (CUBLAS_WGRAD_MIN_ROWS says when and
    why; ``graphed``: the step is to be replayed from a CUDA graph, as is one being captured)."""
    if not g.is_cuda or plan.dx_direct or any(a != "identity" for a in plan.a_acts):
        return False
    m = g.shape[0]
    if m >= CUBLAS_WGRAD_MIN_ROWS:
        return True
    return m >= CUBLAS_WGRAD_MIN_ROWS_GRAPHED and (graphed or torch.cuda.is_current_stream_capturing())


def _launch_backward(g, x, weights, saved, y, plan: MLPPlan, needs_dx: bool, padded: tuple, graphed: bool = False):
    """(dx, grads): dx [M, in] (empty unless needs_dx); grads the flat dW_0, db_0, dW_1, ... buffer.
    ``padded``: the forward's zero-padded copies of x and W_0 (``_launch_forward``); ``graphed``:
    the step is for replay from a CUDA graph (``_wgrad_on_cublas``)."""
    m = g.shape[0]
    layers = plan.layers
    dx = _new_dx(g, plan, needs_dx)
    acc_torch = acc_dtypes(g.dtype)[1]
    if m == 0:
        return dx, g.new_zeros((plan.total,))
    g = g.contiguous()
    d = [g.new_empty((m, plan.widths[i + 1])) for i in range(layers)]
    # what act'_i reads: the saved tensor; for the last layer y when act' follows from it
    act_in = list(saved[:-1]) + [y if plan.from_output[-1] else saved[-1]]
    act_in = [t if t.numel() else g for t in act_in]  # an identity last layer reads nothing
    memo = (plan.acts, needs_dx, exact_key(g), exact_key(tuple(weights)), exact_key(tuple(act_in)),
            exact_key(tuple(d)), exact_key(dx))
    if not _dgrad_launcher.launch_prepared(memo):
        grid = lambda meta: (cdiv(m, meta["BLOCK_M"]),)  # noqa: E731
        _dgrad_launcher.launch(
            grid, g, tuple(weights), tuple(act_in), tuple(d), dx if needs_dx else g,
            M=m, M_KEY=autotune_m_key(m), WIDTHS=plan.widths, PADS=plan.pads, ROLES=plan.roles, ACTS=plan.acts,
            FROM_OUTPUT=plan.from_output, NEEDS_DX=needs_dx and plan.dx_direct,
            **dot_meta(g.dtype), dtype=g.dtype, memo=memo,
        )
    x, w0 = _first_layer_operands(x, weights[0], padded)
    if needs_dx and not plan.dx_direct:  # dx = d_0 @ W_0 on cuBLAS (kernels/mlp.py says why)
        _mm_into(d[0], w0, dx)
    if _wgrad_on_cublas(g, plan, graphed):
        return dx, _weight_grads_cublas(d, x, saved, plan)
    tile_n, tile_k, block_r, tiles, slices, rows_per_slice = _wgrad_geometry(
        plan, m, g.dtype, 4 if INTERPRET else num_sms(g), shared_memory_per_block(g))
    grads = g.new_empty((plan.total,))
    out = grads if slices == 1 else g.new_empty((slices, plan.total), dtype=acc_torch)
    a_inputs = tuple(saved[i] for i in range(layers - 1))
    # x's rows read whole 16-byte units wide where they have room (the forward's padded copy,
    # DLRM's interaction rows): vector loads instead of 2-byte ones for a 367-wide input
    x_cols = aligned_width(plan.widths[0], x.element_size())
    x_cols = x_cols if widened(x, x_cols) is not None else plan.widths[0]
    # (the geometry follows from the plan, m, the dtype and the device: the memo's own)
    memo = (plan.acts, plan.has_bias, x_cols, exact_key(x), exact_key(tuple(d)), exact_key(a_inputs), exact_key(out))
    if not launch_prepared(mlp_wgrad_kernel, memo):
        launch(
            mlp_wgrad_kernel, (tiles, slices), x, tuple(d), a_inputs if a_inputs else (x,), out,
            m, rows_per_slice, x.stride(0), x.stride(1), plan.total,
            WIDTHS=plan.widths, X_COLS=x_cols, A_ACTS=plan.a_acts, HAS_BIAS=plan.has_bias, OFFSETS=plan.offsets,
            TILE_N=tile_n, TILE_K=tile_k, BLOCK_R=block_r, **dot_meta(g.dtype), num_warps=4,
            num_stages=_WGRAD_STAGES, memo=memo,
        )
    if slices > 1:
        memo = (exact_key(out), exact_key(grads))
        if not launch_prepared(mlp_reduce_kernel, memo):
            launch(
                mlp_reduce_kernel, (cdiv(plan.total, _REDUCE_BLOCK),), out, grads, plan.total, slices,
                BLOCK=_REDUCE_BLOCK, UPCAST=dot_meta(g.dtype)["UPCAST"], memo=memo,
            )
    return dx, grads


def _weight_grads_cublas(d, x, saved, plan: MLPPlan):
    """The flat dW_0, db_0, dW_1, ... buffer as cuBLAS products of the d_i and the saved layer
    inputs (which must be those inputs themselves: ``plan.a_acts`` all identity), one per
    weight and one per bias."""
    grads = d[0].new_empty((plan.total,))
    ones = _ones(d[0].shape[0], d[0])  # bias gradients as d_i^T @ 1: cuBLAS reads d_i once (torch.sum's
    for i in range(plan.layers):  # column reduction took 62 us for 65536 x 512 bf16 on an H200)
        rows, cols = plan.widths[i + 1], plan.widths[i]
        start = plan.offsets[i]
        _mm_into(d[i].t(), x if i == 0 else saved[i - 1], grads[start:start + rows * cols].view(rows, cols))
        if plan.has_bias[i]:
            torch.mv(d[i].t(), ones, out=grads[start + rows * cols:start + rows * cols + rows])
    return grads


_ONES = {}


def _ones(m: int, like: torch.Tensor) -> torch.Tensor:
    """m ones of ``like``'s dtype: a view of a vector kept per (device, dtype, stream), so that
    a step spends no launch on them (each costs host time where steps are host-bound); kept
    per stream so that it is only ever read on the stream that wrote it. Made afresh while a
    CUDA graph is being captured (the graph owns its memory)."""
    if like.is_cuda and torch.cuda.is_current_stream_capturing():
        return like.new_ones((m,))
    key = (like.device, like.dtype, torch.cuda.current_stream(like.device).stream_id if like.is_cuda else 0)
    ones = _ONES.get(key)
    if ones is None or ones.numel() < m:
        ones = _ONES[key] = like.new_ones((m,))
    return ones[:m]


def _mm_into(a, b, out):
    """out = a @ b on cuBLAS. When b's and out's rows are not 16-byte aligned (DLRM's 367-wide
    interaction, its 13 dense inputs), b is padded to aligned rows and the product's extra
    columns are dropped: cuBLAS's kernels for misaligned rows run at a fraction of the speed
    (0.24 ms for the top MLP's dx at batch 65536 in bf16 on an H200). b and out are read and
    written in place when their rows already have the padding (``aligned_rows_empty``: the
    interaction's output, the dx allocated here; out's padding is overwritten, so callers pass
    their own allocations); otherwise b is copied padded, and the product goes to a buffer
    that is copied into out."""
    cols = b.shape[1]
    padded = aligned_width(cols, b.element_size())
    if padded == cols:
        torch.mm(a, b, out=out)
        return
    b_wide = widened(b, padded)
    if b_wide is None:
        b_wide = _zero_padded_rows(padded, b)[0]
    out_wide = widened(out, padded)
    if out_wide is not None:
        torch.mm(a, b_wide, out=out_wide)
    else:
        out.copy_(torch.mm(a, b_wide)[:, :cols])


# --------------------------------------------------------------------------------------
# Implementations shared by both autograd paths
# --------------------------------------------------------------------------------------
def _parse_acts(acts: str) -> tuple:
    return tuple(acts.split(","))


def _plan_of(weights, biases, acts: tuple) -> MLPPlan:
    # the widths from the weights alone: the backward's x may be a placeholder (``_kept_x``)
    widths = (weights[0].shape[1],) + tuple(w.shape[0] for w in weights)
    return mlp_plan(widths, acts, tuple(b is not None for b in biases), FULL_MAX, weights[0].element_size())


def mlp_forward_impl(x, weights, biases, acts: str, save: bool, graphed: bool = False):
    """(y, saved, padded) of a fusable stack (``acts``: the per-layer names joined by commas);
    ``padded`` (x and W_0 in zero-padded rows, or empty tensors) is kept for the backward when
    ``save``, and empty otherwise: the recomputing backward pads again rather than keep a
    second copy of x. ``graphed``: pick the kernels for replay from a CUDA graph."""
    plan = _plan_of(weights, biases, _parse_acts(acts))
    y, saved, padded = _launch_forward(x, weights, biases, plan, save, graphed)
    if not save and (padded[0].numel() or padded[1].numel()):
        padded = _no_padding(y)
    return y, saved, padded


def mlp_backward_impl(g, x, weights, biases, saved, y, acts: str, recompute: bool, needs_dx: bool, padded,
                      graphed: bool = False):
    """(dx, grads) of a fusable stack; ``recompute`` first reruns the forward (``graphed`` as
    for ``mlp_forward_impl``) to get ``saved`` (and ``padded``)."""
    plan = _plan_of(weights, biases, _parse_acts(acts))
    if recompute:
        y, saved, padded = _launch_forward(x, weights, biases, plan, True, graphed)
    return _launch_backward(g, x, weights, saved, y, plan, needs_dx, padded, graphed)


@torch.library.custom_op("fusedmlp::mlp", mutates_args=())
def _mlp_op(x: torch.Tensor, weights: list[torch.Tensor], biases: list[Optional[torch.Tensor]], acts: str,
            save: bool) -> list[torch.Tensor]:
    """[y, *saved, x padded, W_0 padded] (``mlp_forward_impl``)."""
    y, saved, padded = mlp_forward_impl(x, weights, biases, acts, save)
    outputs, seen = [y, *saved, *padded], set()
    for i, t in enumerate(outputs):  # the eager path shares one empty placeholder; a custom
        if id(t) in seen:            # op's outputs may not alias one another
            outputs[i] = t.new_empty((0,))
        seen.add(id(t))
    return outputs


@_mlp_op.register_fake
def _(x, weights, biases, acts, save):
    plan = _plan_of(weights, biases, _parse_acts(acts))
    modes = plan.save if save else ("none",) * plan.layers
    m = x.shape[0]
    padded = _padded_first_layer_empty(x, weights[0], plan) if save else _no_padding(x)
    return [x.new_empty((m, plan.widths[-1]))] + [
        x.new_empty((m, plan.widths[i + 1]) if mode != "none" else (0,)) for i, mode in enumerate(modes)
    ] + list(padded)


@torch.library.custom_op("fusedmlp::mlp_backward", mutates_args=())
def _mlp_backward_op(g: torch.Tensor, x: torch.Tensor, weights: list[torch.Tensor],
                     biases: list[Optional[torch.Tensor]], saved: list[torch.Tensor], y: torch.Tensor, acts: str,
                     recompute: bool, needs_dx: bool, padded: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return mlp_backward_impl(g, x, weights, biases, saved, y, acts, recompute, needs_dx, tuple(padded))


@_mlp_backward_op.register_fake
def _(g, x, weights, biases, saved, y, acts, recompute, needs_dx, padded):
    plan = _plan_of(weights, biases, _parse_acts(acts))
    return _new_dx(g, plan, needs_dx), g.new_empty((plan.total,))


def _split_grads(grads, weights, biases, needs):
    """Views of the flat buffer: (dW_0, db_0, dW_1, db_1, ...), None where not needed (the
    buffer cut in one call: a slice per gradient costs host time per layer)."""
    sizes = [t.numel() for pair in zip(weights, biases) for t in pair if t is not None]
    pieces = iter(grads.split_with_sizes(sizes))
    out = []
    for i, (w, b) in enumerate(zip(weights, biases)):
        dw = next(pieces)
        out.append(dw.view(w.shape) if needs[2 * i] else None)
        db = next(pieces) if b is not None else None
        out.append(db if b is not None and needs[2 * i + 1] else None)
    return out


class _MLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, acts, recompute, *params):
        weights, biases = params[0::2], params[1::2]
        graphed = in_graph_capture_mode()  # (the custom op, whose fake must agree, never asks)
        y, saved, padded = mlp_forward_impl(x, weights, biases, acts, not recompute, graphed)
        ctx.acts, ctx.recompute, ctx.graphed = acts, recompute, graphed
        ctx.save_for_backward(_kept_x(x, padded), y, *padded, *params, *saved)
        return y

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        x, y, x_wide, w0_wide, *rest = ctx.saved_tensors
        layers = len(rest) // 3
        params, saved = rest[:2 * layers], rest[2 * layers:]
        weights, biases = params[0::2], params[1::2]
        needs_dx = ctx.needs_input_grad[0]
        dx, grads = mlp_backward_impl(grad_y, x, weights, biases, saved, y, ctx.acts, ctx.recompute, needs_dx,
                                      (x_wide, w0_wide), ctx.graphed)
        return (dx if needs_dx else None, None, None, *_split_grads(grads, weights, biases, ctx.needs_input_grad[3:]))


# relu's and sigmoid's derivatives from the saved output, by the aten kernels eager's own
# autograd runs (DLRM's activations); the others go through linear_act's backward_formula
_OUTPUT_BACKWARD = {"relu": lambda g, y: torch.ops.aten.threshold_backward(g, y, 0),
                    "sigmoid": torch.ops.aten.sigmoid_backward}


class _CublasStackFunction(torch.autograd.Function):
    """fp32 at "highest" and fp64 on a GPU (``gemms_on_cublas``): the stack layer by layer with
    cuBLAS products (linear_act's ``_cublas_fwd``: relu and its bias in cuBLAS's epilogue) under
    ONE autograd Function. Layer by layer through linear_act (a Function, its checks and its
    Triton dpre stream each), plain fp32 fwd+bwd steps of DLRM's MLPs took 1.7-2.5x eager's
    time at 2048-8192 rows, the host's time on an H100 machine; this way 1.15-1.35x
    (benchmarks/NOTES.md, "fp32 MLP stacks under one autograd Function"). Each layer keeps what
    linear_act would (its output for relu, sigmoid and the identity, its pre-activation
    otherwise unless ``recompute``); the backward forms dpre with aten's relu / sigmoid kernels
    (eager's: the same bits as eager's gradients) or ``backward_formula``, then cuBLAS's dx and
    dW and a column sum for db."""

    @staticmethod
    def forward(ctx, x, acts, recompute, *params):
        h, inputs, saved, modes = x, [], [], []
        for w, b, act in zip(params[0::2], params[1::2], acts):
            from_output = act in DERIVATIVE_FROM_OUTPUT or act == "identity"
            mode = "output" if from_output else ("recompute" if recompute else "pre")
            y, pre = _cublas_fwd(h, w, b, act, mode == "pre")
            inputs.append(h)
            saved.append(pre if mode == "pre" else (y if mode == "output" and act != "identity" else None))
            modes.append(mode)
            h = y
        ctx.acts, ctx.modes = acts, modes
        ctx.save_for_backward(*inputs, *saved, *params)
        return h

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        layers, wanted = len(ctx.modes), ctx.needs_input_grad
        tensors = ctx.saved_tensors
        inputs, saved, params = tensors[:layers], tensors[layers:2 * layers], tensors[2 * layers:]
        grads, g = [None] * (2 * layers), grad_y
        for i in reversed(range(layers)):
            w, b, act = params[2 * i], params[2 * i + 1], ctx.acts[i]
            needs_x = any(wanted[:1] + wanted[3:3 + 2 * i])  # x, or a parameter of an earlier layer
            needs = (needs_x, wanted[3 + 2 * i], b is not None and wanted[4 + 2 * i])
            if act in _OUTPUT_BACKWARD or act == "identity":
                dpre = g if act == "identity" else _OUTPUT_BACKWARD[act](g, saved[i])
                dx = dpre @ w if needs[0] else None
                grads[2 * i] = dpre.t() @ inputs[i] if needs[1] else None
                grads[2 * i + 1] = dpre.sum(0) if needs[2] else None
            else:
                dx, grads[2 * i], grads[2 * i + 1] = backward_formula(g, inputs[i], w, b, saved[i], act,
                                                                      ctx.modes[i], needs, False)
            g = dx
        return (g if wanted[0] else None, None, None, *grads)


def _setup_context(ctx, inputs, output):
    x, weights, biases, acts, save = inputs
    y, *saved, x_wide, w0_wide = output
    ctx.set_materialize_grads(False)
    ctx.acts, ctx.recompute = acts, not save
    ctx.layers = len(weights)
    ctx.save_for_backward(_kept_x(x, (x_wide, w0_wide)), y, x_wide, w0_wide, *weights,
                          *[b if b is not None else y.new_empty((0,)) for b in biases], *saved)
    ctx.has_bias = tuple(b is not None for b in biases)


def _op_backward(ctx, grad_outputs):
    grad_y = grad_outputs[0]  # the saved tensors get no gradient
    x, y, x_wide, w0_wide, *rest = ctx.saved_tensors
    layers = ctx.layers
    weights, biases = rest[:layers], [b if has else None for b, has in zip(rest[layers:2 * layers], ctx.has_bias)]
    saved = rest[2 * layers:]
    if grad_y is None:
        return None, None, None, None, None
    needs_dx = ctx.needs_input_grad[0]
    dx, grads = torch.ops.fusedmlp.mlp_backward(grad_y, x, weights, biases, saved, y, ctx.acts, ctx.recompute,
                                                needs_dx, [x_wide, w0_wide])
    needs = [True] * (2 * layers)
    split = _split_grads(grads, weights, biases, needs)
    return (dx if needs_dx else None), split[0::2], split[1::2], None, None


torch.library.register_autograd("fusedmlp::mlp", _op_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
def _layer_fits(w, b, dtype, device, width) -> bool:
    """True when layer (w, b) passes ``check_mlp_inputs``'s checks, tested without building
    the error messages' names (the common case: validation runs on every call)."""
    return (isinstance(w, torch.Tensor) and w.dtype == dtype and w.dim() == 2 and w.shape[1] == width
            and w.shape[0] and w.device == device
            and (b is None or (isinstance(b, torch.Tensor) and b.dtype == dtype and b.dim() == 1
                               and b.shape[0] == w.shape[0] and b.device == device)))


def check_mlp_inputs(x, weights, biases) -> list:
    """Validate the stack; returns the biases as a list (one entry per layer, None allowed)."""
    check_tensor(x, "x", min_ndim=1)
    if isinstance(weights, torch.Tensor) or not isinstance(weights, Sequence) or len(weights) == 0:
        raise TypeError("weights must be a non-empty list or tuple of [out, in] tensors, one per layer")
    if biases is None:
        biases = [None] * len(weights)
    elif isinstance(biases, torch.Tensor) or not isinstance(biases, Sequence):
        raise TypeError("biases must be None or a list or tuple with one [out] tensor (or None) per layer")
    elif len(biases) != len(weights):
        raise ValueError(f"biases has {len(biases)} entries but there are {len(weights)} weights")
    dtype, device, width = x.dtype, x.device, x.shape[-1]
    if width == 0:
        raise ValueError(f"x has no input features (shape {tuple(x.shape)})")
    for i, (w, b) in enumerate(zip(weights, biases)):
        if _layer_fits(w, b, dtype, device, width):
            width = w.shape[0]
            continue
        check_tensor(w, f"weights[{i}]", ndim=2)
        if b is not None:
            check_tensor(b, f"biases[{i}]", ndim=1)
        check_same_dtype_device("x", x, **{f"weights[{i}]": w, f"biases[{i}]": b})
        if w.shape[1] != width:
            source = "x's last dimension" if i == 0 else f"weights[{i - 1}] (out={width})"
            raise ValueError(f"weights[{i}] has shape {tuple(w.shape)}: it takes {w.shape[1]} inputs but "
                             f"{source} gives {width}")
        if w.shape[0] == 0:
            raise ValueError(f"weights[{i}] has no output features (shape {tuple(w.shape)})")
        if b is not None and b.shape[0] != w.shape[0]:
            raise ValueError(f"biases[{i}] must have {w.shape[0]} elements (rows of weights[{i}]), got {b.shape[0]}")
        width = w.shape[0]
    return list(biases)


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Optional[Sequence[Optional[torch.Tensor]]] = None,
    activation: Optional[str] = "relu",
    last_activation: Optional[str] = None,
    recompute: bool = False,
) -> torch.Tensor:
    """A stack of Linear + activation layers as one fused kernel (forward and backward).

    Args:
        x: ``[..., in]`` input, any leading shape; fp16, bf16, fp32 or fp64; any strides.
        weights: one ``[out_i, in_i]`` ``nn.Linear`` weight per layer, ``in_{i+1} = out_i`` (a
            list, tuple or ``nn.ParameterList``).
        biases: None, or one ``[out_i]`` tensor (or None) per layer (likewise).
        activation: the activation after every layer but the last (identity, relu,
            squared_relu, gelu, gelu_tanh, sigmoid, silu; None = identity).
        last_activation: the activation after the last layer (None = identity).
        recompute: keep only x for the backward (it reruns the forward kernel) instead of
            one tensor per layer.

    Returns:
        ``[..., out_{L-1}]`` tensor of x's dtype; inside ``torch.autocast``, of the autocast dtype (tensor
        arguments cast as for ``F.linear``).
    """
    if (dtype := autocast_dtype(x)) is not None:  # under torch.autocast: cast as F.linear's inputs are
        return call_autocast(mlp, dtype, x, weights, biases, activation, last_activation, recompute)
    act, last_act = check_activation(activation), check_activation(last_activation)
    if isinstance(weights, torch.nn.ParameterList):  # a module's list of parameters (not a Sequence)
        weights = list(weights)
    if isinstance(biases, torch.nn.ParameterList):
        biases = list(biases)
    biases = check_mlp_inputs(x, weights, biases)
    check_bool(recompute, "recompute")
    acts = layer_activations(len(weights), act, last_act)
    x2d = x.reshape(-1, x.shape[-1])
    plan, cublas = None, gemms_on_cublas(x2d)
    if use_triton(x2d) and not cublas:
        widths = (x2d.shape[1],) + tuple(w.shape[0] for w in weights)
        # (dynamo traces the planner itself rather than call through its cache)
        planner = mlp_plan.__wrapped__ if torch.compiler.is_compiling() else mlp_plan
        plan = planner(widths, acts, tuple(b is not None for b in biases), FULL_MAX, x2d.element_size())
    if cublas and not torch.compiler.is_compiling():  # one Function, the products on cuBLAS
        params = [t for pair in zip(weights, biases) for t in pair]
        if grad_needed(x2d, *params):
            y = _CublasStackFunction.apply(x2d, acts, recompute, *params)
        else:
            y = x2d
            for w, b, a in zip(weights, biases, acts):
                y = _cublas_fwd(y, w, b, a, False)[0]
    elif plan is None:  # too wide for one kernel, CPU without the interpreter, or traced: layer by layer
        y = x2d
        for w, b, a in zip(weights, biases, acts):
            y = linear_act(y, w, b, a)
    else:
        weights = [w.contiguous() for w in weights]
        biases = [b.contiguous() if b is not None else None for b in biases]
        joined = ",".join(acts)
        params = [t for pair in zip(weights, biases) for t in pair]
        if not grad_needed(x2d, *params):  # inference: no layer's tensor is kept
            y = (torch.ops.fusedmlp.mlp(x2d, weights, biases, joined, False)[0] if torch.compiler.is_compiling()
                 else mlp_forward_impl(x2d, weights, biases, joined, False, in_graph_capture_mode())[0])
        elif torch.compiler.is_compiling():
            y = torch.ops.fusedmlp.mlp(x2d, weights, biases, joined, not recompute)[0]
        else:
            y = _MLPFunction.apply(x2d, joined, recompute, *params)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])
