"""The GEMM pieces every fused kernel shares: tile scheduling and the ``x @ W.T`` main loop.

All fused ops in this package have the shape ``epilogue(x @ W.T)`` with ``x [M, K]`` (rows =
tokens) and ``W [N, K]`` (an ``nn.Linear`` weight), so one main loop serves them, in two forms:

- ``xwT_mainloop``: plain pointers with masks. Any strides and alignment; the interpreter
  and pre-Hopper GPUs. Indices are int64 before they meet a stride: ``M * N`` above 2^31
  elements is a normal size here.
- ``xwT_mainloop_tma``: tensor descriptors (TMA on Hopper): the copy engine moves the tiles
  into shared memory and handles the bounds (out-of-range reads are zero), so the loop has
  no index arithmetic and pipelines deeply. Needs 16-byte aligned bases and row strides
  and a unit last stride; the host checks that and otherwise uses the pointer form.
"""

import triton
import triton.language as tl


@triton.jit
def grouped_tile(tile_id, num_tiles_m, num_tiles_n, GROUP_M: tl.constexpr):
    """Map a linear tile id to (tile_m, tile_n), walking GROUP_M row-tiles per column sweep.

    Consecutive programs then share the same few x row-blocks and W column-blocks, which keeps
    both in L2 instead of streaming all of W once per row-block.
    """
    tiles_per_group = GROUP_M * num_tiles_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_tiles_m - first_m, GROUP_M)
    tile_m = first_m + (tile_id % tiles_per_group) % group_rows
    tile_n = (tile_id % tiles_per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def xwT_mainloop(
    x_ptr, w_ptr,
    rows, mask_rows,              # [BLOCK_M] int64 row indices of x, and which are in range
    w_rows_a, w_rows_b, mask_w,   # [BLOCK_N] int64 row indices of W for the two accumulators
    K, stride_xm, stride_xk, stride_wn, stride_wk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PAIRED: tl.constexpr,         # also accumulate x @ W[w_rows_b].T (GLU: both halves)
    ACC_DTYPE: tl.constexpr,      # fp32, or fp64 for fp64 inputs
    DOT_PRECISION: tl.constexpr,  # "ieee" or "tf32" (fp32 inputs only; ignored otherwise)
    UPCAST: tl.constexpr,         # interpreter: its bf16/fp16 dots are wrong or slow
):
    """acc_a = x[rows] @ W[w_rows_a].T and, if PAIRED, acc_b = x[rows] @ W[w_rows_b].T.

    The x tile is loaded once per K step and feeds both dots: for a GLU this is the fusion
    that reads x once for the two halves of the packed weight. Out-of-range rows and the K
    tail are masked to zero, so any M, N, K works (no padding by the caller).
    """
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16 on GPUs")
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
    # W tiles are read as [BLOCK_K, BLOCK_N] (W transposed) so the dot needs no tl.trans.
    wa_ptrs = w_ptr + w_rows_a[None, :] * stride_wn + offs_k[:, None] * stride_wk
    wb_ptrs = w_ptr + w_rows_b[None, :] * stride_wn + offs_k[:, None] * stride_wk
    acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    step_x = BLOCK_K * stride_xk
    step_w = BLOCK_K * stride_wk
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        x_tile = tl.load(x_ptrs, mask=mask_rows[:, None] & mask_k[None, :], other=0.0)
        wa_tile = tl.load(wa_ptrs, mask=mask_k[:, None] & mask_w[None, :], other=0.0)
        if UPCAST:
            x_tile = x_tile.to(tl.float32)
            wa_tile = wa_tile.to(tl.float32)
        acc_a = tl.dot(x_tile, wa_tile, acc_a, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        if PAIRED:
            wb_tile = tl.load(wb_ptrs, mask=mask_k[:, None] & mask_w[None, :], other=0.0)
            if UPCAST:
                wb_tile = wb_tile.to(tl.float32)
            acc_b = tl.dot(x_tile, wb_tile, acc_b, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
            wb_ptrs += step_w
        x_ptrs += step_x
        wa_ptrs += step_w
    return acc_a, acc_b


@triton.jit
def xwT_mainloop_tma(
    x_desc, wa_desc, wb_desc,     # descriptors of x [M, K] and of two row blocks of W, each [N, K]
    row_start, col_start, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PAIRED: tl.constexpr, ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """acc_a = x[rows] @ Wa[cols].T and, if PAIRED, acc_b = x[rows] @ Wb[cols].T, via descriptors.

    ``wa_desc`` / ``wb_desc`` describe separate row ranges of the weight (for a GLU the two
    halves of the packed weight), so a tile past the end of one half reads zeros, not the
    other half. Same contract as ``xwT_mainloop`` otherwise.
    """
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16 on GPUs")
    acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k_start in range(0, K, BLOCK_K):
        x_tile = x_desc.load([row_start, k_start])
        wa_tile = wa_desc.load([col_start, k_start])
        if UPCAST:
            x_tile = x_tile.to(tl.float32)
            wa_tile = wa_tile.to(tl.float32)
        acc_a = tl.dot(x_tile, wa_tile.T, acc_a, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        if PAIRED:
            wb_tile = wb_desc.load([col_start, k_start])
            if UPCAST:
                wb_tile = wb_tile.to(tl.float32)
            acc_b = tl.dot(x_tile, wb_tile.T, acc_b, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    return acc_a, acc_b
