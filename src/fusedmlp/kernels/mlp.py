"""A whole narrow MLP in one kernel: forward, and a two-kernel backward (dgrad chain, wgrad).

The stack has L layers ``i = 0 .. L-1``; layer i maps ``WIDTHS[i]`` features to
``WIDTHS[i+1]``, with ``W_i [WIDTHS[i+1], WIDTHS[i]]`` (an ``nn.Linear`` weight), optional
bias ``b_i`` and activation ``act_i``:

    a_0 = x,   z_i = a_i @ W_i.T + b_i,   a_{i+1} = act_i(z_i),   y = a_L

Shapes: x ``[M, WIDTHS[0]]`` (any strides), y ``[M, WIDTHS[L]]``. Every other tensor here
(weights, saved activations, gradients) is contiguous and row-major, so its row stride is its
width: a compile-time constant. The per-layer facts are compile-time tuples (``WIDTHS``,
``PADS`` = widths rounded up to a power of two of at least 16, ``ACTS``, ``HAS_BIAS``,
``ROLES``, ...): each stack gets its own kernel, its layer loop unrolled.

**Forward** (``mlp_fwd_kernel``): a program owns ``BLOCK_M`` rows and carries them through
every layer; only y (and, when training, one tensor per layer for the backward) is written.
The current activation tile ``h`` ``[BLOCK_M, PADS[i]]`` stays in registers and is the left
operand of the next layer's dot. A tile of ``BLOCK_M x 512`` fp32 would not fit next to the
rest, so layers have roles, chosen by the host (ops/mlp.py):

- ``full``: the layer's whole output tile is formed at once (``WIDTHS[i+1] <= FULL_MAX``),
  its whole weight tile a dot operand (so at most FULL_TILE_BYTES: it goes through shared
  memory; a larger one, 256 x 256 in fp32, makes the layer ``streamed``).
- ``streamed`` + ``consumer``: a wide layer i is produced ``BLOCK_C`` columns at a time and
  each chunk, once activated, is consumed at once by layer i+1, which accumulates
  ``chunk @ W_{i+1}[:, chunk].T`` into its own (narrow) accumulator. Layer i's activation
  never exists whole, on chip or off. This is what lets widths of 512 and more through.
- ``streamed_out``: a wide last layer, written to y chunk by chunk.

Layer 0 reads x from memory through the shared main loop (kernels/gemm.py) in ``BLOCK_IN``
steps, so the input width is free (13 or 367: the masks pad it). A streamed layer 0 re-reads
its x rows once per chunk (they stay in L1/L2), unless they fit one K step and the chunks load
ahead (``_streamed_pair``): then once. A wide input of unaligned width (367) comes
in rows padded to a multiple of 16 bytes with zeros (``mlp_pad_rows_kernel``), W_0 likewise,
so that both are read in 16-byte vectors: with rows of 734 bytes every load would be a
2-byte one. Padded columns of a tile carry ``act(0)`` (0.5 for a sigmoid), harmless: the
next layer's weight tile is masked to zero there.

**Backward** with ``g = dL/dy``, ``d_i = dL/dz_i``:

    d_{L-1} = g * act'_{L-1}      d_{i-1} = (d_i @ W_i) * act'_{i-1}      dx = d_0 @ W_0
    dW_i = d_i.T @ a_i            db_i = d_i.sum(0)

- ``mlp_dgrad_kernel``: one program per row block walks the layers from the last to the
  first, mirroring the forward roles: ``d_i @ W_i`` is formed on chip and the activation
  derivative applied in registers (from the saved pre-activation, or from the saved output
  for relu-like activations), so no ``d @ W`` product makes a round trip to memory. Each
  ``d_i`` is written once (in the data dtype, as eager PyTorch keeps it), for the weight
  gradients. dx is formed in the same walk when the input is narrow; a wide input (367) would
  need a ``BLOCK_M x 512`` accumulator, so there the host forms ``dx = d_0 @ W_0`` on cuBLAS
  after the kernel (one more launch, only for inputs wider than FULL_MAX).
  Its tiles are 16 or 32 rows (mma.sync): Hopper's wgmma tiles compiled wrong here with
  Triton 3.6 (kernels/configs.py).
- ``mlp_wgrad_kernel``: every ``dW_i`` (and ``db_i``) in one launch: a grouped GEMM over the
  layers, each tile ``[TILE_N[i], TILE_K[i]]`` of one ``dW_i`` summing over a fixed slice of the
  rows (``grid[1]`` slices, so that a few small matrices still fill the GPU when M is large).
  With one slice the tiles are written in the data dtype; otherwise each slice writes fp32
  partials and ``mlp_reduce_kernel`` sums them in slice order. No atomics: the gradients are
  the same bits on every run. The layer inputs ``a_i`` come from the forward's saved tensors:
  as saved, or ``act(z)`` recomputed on load when the pre-activation was kept.

Cost model (elements moved to or from memory, per row; P = parameters, read from L2 by
every row block): forward ``WIDTHS[0] + WIDTHS[L]`` plus, when training, one saved tensor per
layer (``sum WIDTHS[1:L]`` hidden, and ``WIDTHS[L]`` more for a last activation whose
derivative needs z). dgrad reads g and the saved tensors and writes every ``d_i``
(``sum WIDTHS[1:]``) and dx; wgrad reads every ``d_i`` and ``a_i`` once. Eager PyTorch moves
each hidden activation about six times (write z, read z, write a, read a twice in backward,
...) and launches 2 kernels per layer forward and 3-4 backward; here it is 1 forward and 2-3
backward launches, whatever the depth. The FLOPs are the eager ones, ``2 M P`` forward and
``4 M P`` backward, save the padding of narrow widths to 16.
"""

import triton
import triton.language as tl

from .activations import activation, activation_grad
from .gemm import round_operand, xwT_mainloop
from .linear_act import _bias_act_epilogue


@triton.jit
def _operand(t, DTYPE: tl.constexpr, UPCAST: tl.constexpr):
    """``t`` rounded to the data dtype, ready to be a dot operand (fp32 under the interpreter,
    whose 16-bit dots are wrong or slow)."""
    t = round_operand(t, DTYPE, UPCAST)
    if UPCAST:
        t = t.to(tl.float32)
    return t


@triton.jit
def _weight_block(w_ptr, n, k, N: tl.constexpr, K: tl.constexpr, UPCAST: tl.constexpr):
    """``W[n, k]`` of a contiguous ``[N, K]`` weight for broadcast index tiles n, k (zero outside).

    ``n`` as a row and ``k`` as a column index tile gives ``W.T``'s block (``h @ W.T``);
    the other way round gives W's own block (``d @ W``).
    """
    block = tl.load(w_ptr + n * K + k, mask=(n < N) & (k < K), other=0.0)
    if UPCAST:
        block = block.to(tl.float32)
    return block


@triton.jit
def _bias_block(b_ptr, cols, N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """``b[cols]`` of an ``[N]`` bias in the accumulator dtype (zero outside)."""
    return tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(ACC_DTYPE)


@triton.jit
def _load_block(ptr, rows, mask_rows, cols, N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """Rows x cols of a contiguous ``[M, N]`` tensor, in the accumulator dtype (zero outside)."""
    block = tl.load(ptr + rows[:, None] * N + cols[None, :], mask=mask_rows[:, None] & (cols[None, :] < N),
                    other=0.0)
    return block.to(ACC_DTYPE)


@triton.jit
def _store_block(ptr, block, rows, mask_rows, cols, N: tl.constexpr, UPCAST: tl.constexpr):
    """Store rows x cols of a contiguous ``[M, N]`` tensor, rounded to its dtype."""
    tl.store(ptr + rows[:, None] * N + cols[None, :], round_operand(block, ptr.dtype.element_ty, UPCAST),
             mask=mask_rows[:, None] & (cols[None, :] < N))


@triton.jit
def _pre_activation(
    h, x_ptr, w_ptr, rows, mask_rows, cols, stride_xm, stride_xk,
    K: tl.constexpr, N: tl.constexpr, K_PAD: tl.constexpr, FROM_X: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``(a @ W[cols].T)``: ``a`` is ``h`` on chip, or x in memory (FROM_X)."""
    if FROM_X:
        mask_cols = cols < N
        acc, _ = xwT_mainloop(
            x_ptr, w_ptr, w_ptr, rows, mask_rows, cols, mask_cols, cols, mask_cols,
            K, stride_xm, stride_xk, K, 1, K, 1,
            BLOCK_M, BLOCK_N, 16, BLOCK_K, False, ACC_DTYPE, DOT_PRECISION, UPCAST,
        )
    else:
        k = tl.arange(0, K_PAD)
        w_t = _weight_block(w_ptr, cols[None, :], k[:, None], N, K, UPCAST)
        acc = tl.dot(h, w_t, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    return acc


@triton.jit
def _finish_layer(acc, b_ptr, saved_ptr, rows, mask_rows, cols, N: tl.constexpr, HAS_BIAS: tl.constexpr,
                  ACT: tl.constexpr, SAVE: tl.constexpr, ACC_DTYPE: tl.constexpr, UPCAST: tl.constexpr):
    """``act(acc + b)`` on the columns ``cols`` (fp32), writing what the backward needs of the
    layer: ``SAVE`` = ``"pre"`` (z), ``"out"`` (act(z)) or ``"none"``."""
    z, a = _bias_act_epilogue(acc, b_ptr, cols, cols < N, ACT, HAS_BIAS, ACC_DTYPE)
    if SAVE == "pre":
        _store_block(saved_ptr, z, rows, mask_rows, cols, N, UPCAST)
    elif SAVE == "out":
        _store_block(saved_ptr, a, rows, mask_rows, cols, N, UPCAST)
    return a


@triton.jit
def _layer_columns(
    h, x_ptr, w_ptr, b_ptr, saved_ptr, rows, mask_rows, cols, stride_xm, stride_xk,
    K: tl.constexpr, N: tl.constexpr, K_PAD: tl.constexpr, FROM_X: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, SAVE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_IN: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``act(z)[:, cols]`` of one layer (fp32), z or act(z) written for the backward per SAVE."""
    acc = _pre_activation(h, x_ptr, w_ptr, rows, mask_rows, cols, stride_xm, stride_xk, K, N, K_PAD, FROM_X,
                          BLOCK_M, BLOCK_N, BLOCK_IN, ACC_DTYPE, DOT_PRECISION, UPCAST)
    return _finish_layer(acc, b_ptr, saved_ptr, rows, mask_rows, cols, N, HAS_BIAS, ACT, SAVE, ACC_DTYPE, UPCAST)


@triton.jit
def _streamed_into_output(
    h, x_ptr, w_ptr, b_ptr, saved_ptr, y_ptr, rows, mask_rows, stride_xm, stride_xk,
    K: tl.constexpr, N: tl.constexpr, K_PAD: tl.constexpr, FROM_X: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, SAVE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_IN: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """A wide last layer, written to y ``BLOCK_C`` columns at a time."""
    for c in range(0, N, BLOCK_C):
        cols = c + tl.arange(0, BLOCK_C)
        a = _layer_columns(h, x_ptr, w_ptr, b_ptr, saved_ptr, rows, mask_rows, cols, stride_xm, stride_xk, K, N,
                           K_PAD, FROM_X, HAS_BIAS, ACT, SAVE, BLOCK_M, BLOCK_C, BLOCK_IN, ACC_DTYPE,
                           DOT_PRECISION, UPCAST)
        _store_block(y_ptr, a, rows, mask_rows, cols, N, UPCAST)


@triton.jit
def _streamed_pair(
    h, x_ptr, w_ptr, b_ptr, saved_ptr, w_next_ptr, b_next_ptr, saved_next_ptr, rows, mask_rows,
    stride_xm, stride_xk,
    K: tl.constexpr, N: tl.constexpr, K_PAD: tl.constexpr, FROM_X: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, SAVE: tl.constexpr,
    N_NEXT: tl.constexpr, N_NEXT_PAD: tl.constexpr, HAS_BIAS_NEXT: tl.constexpr, ACT_NEXT: tl.constexpr,
    SAVE_NEXT: tl.constexpr, LOADS_AHEAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_IN: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """A wide layer streamed into the next one: each ``BLOCK_C``-column chunk of its activation
    is multiplied into the next layer's accumulator as soon as it exists. Returns the next
    layer's activation ``[BLOCK_M, N_NEXT_PAD]`` (fp32).

    A program's time here is a serial chain of chunks (one row block alone takes nearly as
    long as a whole 2048-row grid), so with LOADS_AHEAD (the host's choice: ops/mlp.py), where
    the layer's input is one narrow tile (at most ``AHEAD_K`` wide: h on chip, or x in one K
    step, then loaded once), the next chunk's weight tile and bias are loaded while this
    chunk's dots run (benchmarks/NOTES.md, "The MLP forward's loads one chunk ahead"). Not on
    128-row tiles: with 3 stages they would overflow shared memory, and they are for wide
    inputs. The next layer's bias is loaded before the loop either way."""
    DTYPE: tl.constexpr = w_ptr.dtype.element_ty
    AHEAD_K: tl.constexpr = 64  # a [64, BLOCK_C] tile more in registers, at most
    AHEAD: tl.constexpr = LOADS_AHEAD and BLOCK_M <= 64 and K_PAD <= AHEAD_K and (not FROM_X or K_PAD <= BLOCK_IN)
    next_cols = tl.arange(0, N_NEXT_PAD)
    acc_next = tl.zeros((BLOCK_M, N_NEXT_PAD), dtype=ACC_DTYPE)
    if HAS_BIAS_NEXT:  # loaded before the loop, off the chain after it
        b_next = _bias_block(b_next_ptr, next_cols, N_NEXT, ACC_DTYPE)
    if AHEAD:
        k = tl.arange(0, K_PAD)
        if FROM_X:
            a_in = _operand(tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :] * stride_xk,
                                    mask=mask_rows[:, None] & (k[None, :] < K), other=0.0), DTYPE, UPCAST)
        else:
            a_in = h
        cols_ahead = tl.arange(0, BLOCK_C)
        w_t_ahead = _weight_block(w_ptr, cols_ahead[None, :], k[:, None], N, K, UPCAST)
        if HAS_BIAS:
            b_ahead = _bias_block(b_ptr, cols_ahead, N, ACC_DTYPE)
    for c in range(0, N, BLOCK_C):
        if AHEAD:
            cols = cols_ahead
            w_t = w_t_ahead
            cols_ahead = cols + BLOCK_C  # past N on the last chunk: masked to zeros, never used
            w_t_ahead = _weight_block(w_ptr, cols_ahead[None, :], k[:, None], N, K, UPCAST)
            acc = tl.dot(a_in, w_t, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
            if HAS_BIAS:
                acc += b_ahead[None, :]
                b_ahead = _bias_block(b_ptr, cols_ahead, N, ACC_DTYPE)
            a = _finish_layer(acc, b_ptr, saved_ptr, rows, mask_rows, cols, N, False, ACT, SAVE, ACC_DTYPE,
                              UPCAST)
        else:
            cols = c + tl.arange(0, BLOCK_C)
            a = _layer_columns(h, x_ptr, w_ptr, b_ptr, saved_ptr, rows, mask_rows, cols, stride_xm, stride_xk, K, N,
                               K_PAD, FROM_X, HAS_BIAS, ACT, SAVE, BLOCK_M, BLOCK_C, BLOCK_IN, ACC_DTYPE,
                               DOT_PRECISION, UPCAST)
        w_next_t = _weight_block(w_next_ptr, next_cols[None, :], cols[:, None], N_NEXT, N, UPCAST)
        acc_next = tl.dot(_operand(a, DTYPE, UPCAST), w_next_t, acc_next, input_precision=DOT_PRECISION,
                          out_dtype=ACC_DTYPE)
    if HAS_BIAS_NEXT:
        acc_next += b_next[None, :]
    return _finish_layer(acc_next, b_next_ptr, saved_next_ptr, rows, mask_rows, next_cols, N_NEXT, False,
                         ACT_NEXT, SAVE_NEXT, ACC_DTYPE, UPCAST)


@triton.jit
def mlp_fwd_kernel(
    x_ptr, w_ptrs, b_ptrs, y_ptr, saved_ptrs,     # w, b, saved: one entry per layer
    M, M_KEY, stride_xm, stride_xk,
    WIDTHS: tl.constexpr, PADS: tl.constexpr, ROLES: tl.constexpr, ACTS: tl.constexpr,
    HAS_BIAS: tl.constexpr, SAVE: tl.constexpr,   # SAVE[i]: "pre", "out" or "none"
    LOADS_AHEAD: tl.constexpr,                    # a streamed layer loads its next chunk's tiles ahead
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_IN: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """y = the whole stack on ``BLOCK_M`` rows per program (roles: this module's docstring).

    (Tuple entries are wrapped in ``tl.constexpr`` where they are passed on: Triton 3.6 hands
    them over as plain Python values otherwise.)
    """
    DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    LAYERS: tl.constexpr = len(ACTS)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_rows = rows < M
    h = x_ptr  # the activation tile on chip; layer 0 reads x from memory instead
    for i in tl.static_range(LAYERS):
        if ROLES[i] == "full":
            cols = tl.arange(0, tl.constexpr(PADS[i + 1]))
            a = _layer_columns(
                h, x_ptr, w_ptrs[i], b_ptrs[i], saved_ptrs[i], rows, mask_rows, cols, stride_xm, stride_xk,
                tl.constexpr(WIDTHS[i]), tl.constexpr(WIDTHS[i + 1]), tl.constexpr(PADS[i]), i == 0,
                tl.constexpr(HAS_BIAS[i]), tl.constexpr(ACTS[i]), tl.constexpr(SAVE[i]),
                BLOCK_M, tl.constexpr(PADS[i + 1]), BLOCK_IN, ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
            if i == LAYERS - 1:
                _store_block(y_ptr, a, rows, mask_rows, cols, tl.constexpr(WIDTHS[i + 1]), UPCAST)
            else:
                h = _operand(a, DTYPE, UPCAST)
        elif ROLES[i] == "streamed_out":
            _streamed_into_output(
                h, x_ptr, w_ptrs[i], b_ptrs[i], saved_ptrs[i], y_ptr, rows, mask_rows, stride_xm, stride_xk,
                tl.constexpr(WIDTHS[i]), tl.constexpr(WIDTHS[i + 1]), tl.constexpr(PADS[i]), i == 0,
                tl.constexpr(HAS_BIAS[i]), tl.constexpr(ACTS[i]), tl.constexpr(SAVE[i]),
                BLOCK_M, BLOCK_C, BLOCK_IN, ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
        elif ROLES[i] == "streamed":
            a = _streamed_pair(
                h, x_ptr, w_ptrs[i], b_ptrs[i], saved_ptrs[i], w_ptrs[i + 1], b_ptrs[i + 1], saved_ptrs[i + 1],
                rows, mask_rows, stride_xm, stride_xk,
                tl.constexpr(WIDTHS[i]), tl.constexpr(WIDTHS[i + 1]), tl.constexpr(PADS[i]), i == 0,
                tl.constexpr(HAS_BIAS[i]), tl.constexpr(ACTS[i]), tl.constexpr(SAVE[i]),
                tl.constexpr(WIDTHS[i + 2]), tl.constexpr(PADS[i + 2]), tl.constexpr(HAS_BIAS[i + 1]),
                tl.constexpr(ACTS[i + 1]), tl.constexpr(SAVE[i + 1]), LOADS_AHEAD,
                BLOCK_M, BLOCK_C, BLOCK_IN, ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
            if i + 1 == LAYERS - 1:
                _store_block(y_ptr, a, rows, mask_rows, tl.arange(0, tl.constexpr(PADS[i + 2])),
                             tl.constexpr(WIDTHS[i + 2]), UPCAST)
            else:
                h = _operand(a, DTYPE, UPCAST)
        # a "consumer" layer was completed by the step of the streamed layer before it


@triton.jit
def _dpre(grad, act_in_ptr, rows, mask_rows, cols, N: tl.constexpr, ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr,
          ACC_DTYPE: tl.constexpr):
    """``grad * act'`` on a tile; act' from the saved pre-activation, or output if FROM_OUTPUT."""
    if ACT != "identity":
        saved = _load_block(act_in_ptr, rows, mask_rows, cols, N, ACC_DTYPE)
        grad = grad * activation_grad(saved, ACT, FROM_OUTPUT)
    return grad


@triton.jit
def _dgrad_full(
    da, w_ptr, act_in_ptr, d_ptr, rows, mask_rows,
    K: tl.constexpr, N: tl.constexpr, K_PAD: tl.constexpr, N_PAD: tl.constexpr, ACT: tl.constexpr,
    FROM_OUTPUT: tl.constexpr, FOLD: tl.constexpr, ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """d = da * act' (written); returns ``d @ W``, the gradient of the layer's input, if FOLD."""
    cols = tl.arange(0, N_PAD)
    d = _dpre(da, act_in_ptr, rows, mask_rows, cols, N, ACT, FROM_OUTPUT, ACC_DTYPE)
    _store_block(d_ptr, d, rows, mask_rows, cols, N, UPCAST)
    if FOLD:
        k = tl.arange(0, K_PAD)
        w = _weight_block(w_ptr, cols[:, None], k[None, :], N, K, UPCAST)
        d = tl.dot(_operand(d, d_ptr.dtype.element_ty, UPCAST), w, input_precision=DOT_PRECISION,
                   out_dtype=ACC_DTYPE)
    return d


@triton.jit
def _dgrad_streamed_out(
    g_ptr, w_ptr, act_in_ptr, d_ptr, rows, mask_rows,
    K: tl.constexpr, N: tl.constexpr, K_PAD: tl.constexpr, ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr,
    FOLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """A wide last layer: d chunk by chunk from g (written), each chunk folded into the
    gradient of the layer's input, which is returned (if FOLD)."""
    k = tl.arange(0, K_PAD)
    da_in = tl.zeros((BLOCK_M, K_PAD), dtype=ACC_DTYPE)
    for c in range(0, N, BLOCK_C):
        cols = c + tl.arange(0, BLOCK_C)
        g = _load_block(g_ptr, rows, mask_rows, cols, N, ACC_DTYPE)
        d = _dpre(g, act_in_ptr, rows, mask_rows, cols, N, ACT, FROM_OUTPUT, ACC_DTYPE)
        _store_block(d_ptr, d, rows, mask_rows, cols, N, UPCAST)
        if FOLD:
            w = _weight_block(w_ptr, cols[:, None], k[None, :], N, K, UPCAST)
            da_in = tl.dot(_operand(d, d_ptr.dtype.element_ty, UPCAST), w, da_in, input_precision=DOT_PRECISION,
                           out_dtype=ACC_DTYPE)
    return da_in


@triton.jit
def _dgrad_consumer(
    da, w_ptr, act_in_ptr, d_ptr, w_in_ptr, act_in_in_ptr, d_in_ptr, rows, mask_rows,
    K_IN: tl.constexpr, K: tl.constexpr, N: tl.constexpr, K_IN_PAD: tl.constexpr, N_PAD: tl.constexpr,
    ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr, ACT_IN: tl.constexpr, FROM_OUTPUT_IN: tl.constexpr,
    FOLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """A consumer layer (``[K] -> [N]``) and the wide layer streamed into it (``[K_IN] -> [K]``).

    d = da * act' of the consumer, whole (written); the wide layer's d is formed chunk by
    chunk, ``(d @ W[:, chunk]) * act_in'`` (written), and each chunk folded into the gradient of
    the wide layer's input, which is returned (if FOLD)."""
    DTYPE: tl.constexpr = d_ptr.dtype.element_ty
    cols = tl.arange(0, N_PAD)
    d = _dpre(da, act_in_ptr, rows, mask_rows, cols, N, ACT, FROM_OUTPUT, ACC_DTYPE)
    _store_block(d_ptr, d, rows, mask_rows, cols, N, UPCAST)
    d = _operand(d, DTYPE, UPCAST)
    k_in = tl.arange(0, K_IN_PAD)
    da_in = tl.zeros((BLOCK_M, K_IN_PAD), dtype=ACC_DTYPE)
    for c in range(0, K, BLOCK_C):
        mid = c + tl.arange(0, BLOCK_C)
        w = _weight_block(w_ptr, cols[:, None], mid[None, :], N, K, UPCAST)
        d_mid = _dpre(tl.dot(d, w, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE), act_in_in_ptr, rows,
                      mask_rows, mid, K, ACT_IN, FROM_OUTPUT_IN, ACC_DTYPE)
        _store_block(d_in_ptr, d_mid, rows, mask_rows, mid, K, UPCAST)
        if FOLD:
            w_in = _weight_block(w_in_ptr, mid[:, None], k_in[None, :], K, K_IN, UPCAST)
            da_in = tl.dot(_operand(d_mid, DTYPE, UPCAST), w_in, da_in, input_precision=DOT_PRECISION,
                           out_dtype=ACC_DTYPE)
    return da_in


@triton.jit
def mlp_dgrad_kernel(
    g_ptr, w_ptrs, act_in_ptrs, d_ptrs, dx_ptr,   # act_in[i]: layer i's saved z or a; d[i]: dL/dz_i out
    M, M_KEY,
    WIDTHS: tl.constexpr, PADS: tl.constexpr, ROLES: tl.constexpr, ACTS: tl.constexpr,
    FROM_OUTPUT: tl.constexpr,                    # per layer: act_in holds act(z), not z
    NEEDS_DX: tl.constexpr,                       # form dx (the input must be at most FULL_MAX wide)
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """Every ``d_i = dL/dz_i`` (written) and dx, on ``BLOCK_M`` rows per program, last layer first.

    ``da`` is the gradient of the current layer's output, full width, in registers; the roles
    are the forward's (a streamed layer's d is formed chunk by chunk by its consumer's step).
    A step folds its d into the gradient of its input only where that is wanted: always but
    at layer 0, where it is dx (NEEDS_DX).
    """
    LAYERS: tl.constexpr = len(ACTS)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_rows = rows < M
    if ROLES[LAYERS - 1] != "streamed_out":
        da = _load_block(g_ptr, rows, mask_rows, tl.arange(0, tl.constexpr(PADS[LAYERS])),
                         tl.constexpr(WIDTHS[LAYERS]), ACC_DTYPE)
    for i in tl.static_range(LAYERS - 1, -1, -1):
        if ROLES[i] == "full":
            da = _dgrad_full(
                da, w_ptrs[i], act_in_ptrs[i], d_ptrs[i], rows, mask_rows,
                tl.constexpr(WIDTHS[i]), tl.constexpr(WIDTHS[i + 1]), tl.constexpr(PADS[i]),
                tl.constexpr(PADS[i + 1]), tl.constexpr(ACTS[i]), tl.constexpr(FROM_OUTPUT[i]),
                i > 0 or NEEDS_DX, ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
        elif ROLES[i] == "streamed_out":
            da = _dgrad_streamed_out(
                g_ptr, w_ptrs[i], act_in_ptrs[i], d_ptrs[i], rows, mask_rows,
                tl.constexpr(WIDTHS[i]), tl.constexpr(WIDTHS[i + 1]), tl.constexpr(PADS[i]), tl.constexpr(ACTS[i]),
                tl.constexpr(FROM_OUTPUT[i]), i > 0 or NEEDS_DX, BLOCK_M, BLOCK_C,
                ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
        elif ROLES[i] == "consumer":
            da = _dgrad_consumer(
                da, w_ptrs[i], act_in_ptrs[i], d_ptrs[i], w_ptrs[i - 1], act_in_ptrs[i - 1], d_ptrs[i - 1],
                rows, mask_rows,
                tl.constexpr(WIDTHS[i - 1]), tl.constexpr(WIDTHS[i]), tl.constexpr(WIDTHS[i + 1]),
                tl.constexpr(PADS[i - 1]), tl.constexpr(PADS[i + 1]), tl.constexpr(ACTS[i]),
                tl.constexpr(FROM_OUTPUT[i]), tl.constexpr(ACTS[i - 1]), tl.constexpr(FROM_OUTPUT[i - 1]),
                i > 1 or NEEDS_DX, BLOCK_M, BLOCK_C, ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
        # a "streamed" layer was handled by its consumer's step
    if NEEDS_DX:
        _store_block(dx_ptr, da, rows, mask_rows, tl.arange(0, tl.constexpr(PADS[0])), tl.constexpr(WIDTHS[0]),
                     UPCAST)


@triton.jit
def _wgrad_tile(
    out_ptr, d_ptr, a_ptr, b_offset, tile_n, tile_k, row_begin, row_end, stride_am, stride_ak,
    N: tl.constexpr, K: tl.constexpr, K_READ: tl.constexpr, A_ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``dW[n, k] = sum_r d[r, n] a[r, k]`` over rows [row_begin, row_end) into ``out_ptr``
    (``[N, K]`` row-major, then the ``[N]`` bias gradient at ``b_offset``, tile_k == 0 only).
    ``A_ACT``: the saved tensor is z, and a = act(z) is formed on load ("identity": a as saved).
    a's rows are read ``K_READ >= K`` columns wide: past K only columns of dW that are not
    stored depend on them, and a width of whole 16-byte units lets the loads be vectors (a mask
    of 367 columns splits every load of the tile into 2-byte ones)."""
    n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tile_k * BLOCK_K + tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=ACC_DTYPE)
    db = tl.zeros((BLOCK_N,), dtype=ACC_DTYPE)
    for r_start in range(row_begin, row_end, BLOCK_R):
        r = r_start + tl.arange(0, BLOCK_R).to(tl.int64)
        mask_r = r < row_end
        d = tl.load(d_ptr + r[:, None] * N + n[None, :], mask=mask_r[:, None] & (n[None, :] < N), other=0.0)
        a = tl.load(a_ptr + r[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=mask_r[:, None] & (k[None, :] < K_READ), other=0.0)
        if A_ACT != "identity":
            a = round_operand(activation(a.to(ACC_DTYPE), A_ACT), a_ptr.dtype.element_ty, UPCAST)
        if HAS_BIAS:
            db += tl.sum(d.to(ACC_DTYPE), axis=0)
        if UPCAST:
            d = d.to(tl.float32)
            a = a.to(tl.float32)
        acc = tl.dot(tl.trans(d), a, acc, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    mask_n = n < N
    tl.store(out_ptr + n[:, None] * K + k[None, :], round_operand(acc, out_ptr.dtype.element_ty, UPCAST),
             mask=mask_n[:, None] & (k[None, :] < K))
    if HAS_BIAS:
        if tile_k == 0:
            tl.store(out_ptr + b_offset + n, round_operand(db, out_ptr.dtype.element_ty, UPCAST), mask=mask_n)


@triton.jit
def mlp_wgrad_kernel(
    x_ptr, d_ptrs, a_ptrs, out_ptr,   # a[i]: the saved tensor giving layer i+1's input; out: see below
    M, rows_per_slice, stride_xm, stride_xk, SLICE_STRIDE,
    WIDTHS: tl.constexpr, X_COLS: tl.constexpr, A_ACTS: tl.constexpr, HAS_BIAS: tl.constexpr, OFFSETS: tl.constexpr,
    TILE_N: tl.constexpr, TILE_K: tl.constexpr, BLOCK_R: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """All weight and bias gradients in one launch; grid = (tiles of every dW_i, row slices).

    Layer i's tiles are ``TILE_N[i] x TILE_K[i]`` (ops/mlp.py picks them): a narrow layer
    (DLRM's 13 inputs, its 16 outputs) gets narrow tiles instead of dots mostly of padding.

    ``out`` holds, for each layer at ``tl.constexpr(OFFSETS[i])``, ``dW_i`` row-major then ``db_i``: the
    gradients themselves with one slice, fp32 partials (slice s at ``s * SLICE_STRIDE``) otherwise.
    ``X_COLS``: how many columns of each x row are read (``WIDTHS[0]``, or more where the rows
    have room: ``_wgrad_tile``'s K_READ).
    """
    LAYERS: tl.constexpr = len(A_ACTS)
    tile = tl.program_id(0)
    row_begin = tl.program_id(1).to(tl.int64) * rows_per_slice
    row_end = tl.minimum(row_begin + rows_per_slice, M)
    out_ptr += tl.program_id(1).to(tl.int64) * SLICE_STRIDE
    first_tile = 0
    for i in tl.static_range(LAYERS):
        TILES_K = (tl.constexpr(WIDTHS[i]) + tl.constexpr(TILE_K[i]) - 1) // tl.constexpr(TILE_K[i])
        TILES = (tl.constexpr(WIDTHS[i + 1]) + tl.constexpr(TILE_N[i]) - 1) // tl.constexpr(TILE_N[i]) * TILES_K
        if (tile >= first_tile) & (tile < first_tile + TILES):
            local = tile - first_tile
            if i == 0:
                a_ptr, stride_am, stride_ak = x_ptr, stride_xm, stride_xk
            else:
                a_ptr, stride_am, stride_ak = a_ptrs[i - 1], tl.constexpr(WIDTHS[i]), 1
            _wgrad_tile(
                out_ptr + tl.constexpr(OFFSETS[i]), d_ptrs[i], a_ptr, tl.constexpr(WIDTHS[i + 1]) * tl.constexpr(WIDTHS[i]), local // TILES_K, local % TILES_K,
                row_begin, row_end, stride_am, stride_ak, tl.constexpr(WIDTHS[i + 1]), tl.constexpr(WIDTHS[i]),
                X_COLS if i == 0 else tl.constexpr(WIDTHS[i]), tl.constexpr(A_ACTS[i]), tl.constexpr(HAS_BIAS[i]),
                tl.constexpr(TILE_N[i]), tl.constexpr(TILE_K[i]), BLOCK_R, ACC_DTYPE, DOT_PRECISION, UPCAST,
            )
        first_tile = first_tile + TILES


@triton.jit
def mlp_reduce_kernel(partial_ptr, out_ptr, TOTAL, SLICES, BLOCK: tl.constexpr, UPCAST: tl.constexpr):
    """``out[e] = sum_s partial[s, e]``, slices in order (deterministic), rounded to out's dtype."""
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = e < TOTAL
    acc = tl.load(partial_ptr + e, mask=mask, other=0.0)
    for s in range(1, SLICES):
        acc += tl.load(partial_ptr + s * TOTAL + e, mask=mask, other=0.0)
    tl.store(out_ptr + e, round_operand(acc, out_ptr.dtype.element_ty, UPCAST), mask=mask)


@triton.jit
def _pad_rows_block(src_ptr, out_ptr, block, M, stride_m, stride_k, COLS: tl.constexpr, WIDTH: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr):
    """Rows ``block * BLOCK_M ...`` of ``out[:, :COLS] = src``, ``out[:, COLS:] = 0``."""
    rows = block.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_W).to(tl.int64)  # a column-major source has a column stride of M
    mask_rows = rows[:, None] < M
    for start in tl.static_range(0, WIDTH, BLOCK_W):
        col = start + cols[None, :]
        tile = tl.load(src_ptr + rows[:, None] * stride_m + col * stride_k, mask=mask_rows & (col < COLS), other=0.0)
        tl.store(out_ptr + rows[:, None] * WIDTH + col, tile, mask=mask_rows & (col < WIDTH))


@triton.jit
def mlp_pad_rows_kernel(a_ptr, a_out_ptr, M_A, stride_am, stride_ak, b_ptr, b_out_ptr, M_B, stride_bm, stride_bk,
                        COLS: tl.constexpr, WIDTH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr):
    """``out[:, :COLS] = src`` and ``out[:, COLS:] = 0`` for two sources (a, then b; M_B = 0 for
    one), each [M, COLS] with any strides, into the contiguous ``[M, WIDTH]`` rows the forward
    kernels read in vectors: x and W_0 in one launch (launches cost host time where steps are
    host-bound). ``BLOCK_M`` rows per program, ``BLOCK_W`` columns at a time: 28 us for
    65536 x 367 -> 368 in bf16 on an H200 (16 x 512), against 57 us for PyTorch's copy into
    the strided view and 74 us for F.pad."""
    block = tl.program_id(0)
    a_blocks = tl.cdiv(M_A, BLOCK_M)
    if block < a_blocks:
        _pad_rows_block(a_ptr, a_out_ptr, block, M_A, stride_am, stride_ak, COLS, WIDTH, BLOCK_M, BLOCK_W)
    else:
        _pad_rows_block(b_ptr, b_out_ptr, block - a_blocks, M_B, stride_bm, stride_bk, COLS, WIDTH, BLOCK_M, BLOCK_W)
