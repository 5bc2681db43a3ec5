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
def tile_indices(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """One program per output tile: int64 row and column indices, their masks, and the row-tile index."""
    tile_m, tile_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = tile_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    return rows, cols, rows < M, cols < N, tile_m


@triton.jit
def stream_row_block(N, BLOCK_N: tl.constexpr):
    """Elementwise streams: the program's row block and its int64 columns (with their mask).

    The column blocks of a row block go to consecutive programs, so programs running at the
    same time read and write neighbouring memory. A stream kernel walks its row block in
    ``SUB_M``-row steps (``tile_m * BLOCK_M + ...``): BLOCK_M is the row block of the per-block
    partial sums the host sizes, SUB_M is what one step holds in registers.
    """
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m = tl.program_id(0) // num_tiles_n
    cols = (tl.program_id(0) % num_tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    return tile_m, cols, cols < N


@triton.jit
def persistent_tile(tile_id, num_tiles_m, num_tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    GROUP_M: tl.constexpr):
    """Persistent kernels: (row-tile index, first row, first column) of the ``tile_id``-th tile.

    Descriptor coordinates are int32, which is what TMA takes; the copy engine clips the tiles.
    """
    tile_m, tile_n = grouped_tile(tile_id, num_tiles_m, num_tiles_n, GROUP_M)
    return tile_m, tile_m * BLOCK_M, tile_n * BLOCK_N


@triton.jit
def round_operand(x, dtype: tl.constexpr, UPCAST: tl.constexpr):
    """``x`` rounded to ``dtype`` to-nearest-even, as PyTorch rounds a product it keeps in memory.

    A plain ``.to(bfloat16)`` truncates under the interpreter (UPCAST); there the rounding is
    done on the fp32 bits first, which makes the cast exact.
    """
    if UPCAST and dtype == tl.bfloat16:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def xwT_mainloop(
    x_ptr, wa_ptr, wb_ptr,
    rows, mask_rows,              # [BLOCK_M] int64 row indices of x, and which are in range
    w_rows, mask_w,               # [BLOCK_N] int64 row indices of Wa, and which are in range
    wb_rows, mask_wb,             # [BLOCK_NB] the same for Wb (a GLU: w_rows; LoRA: the rank rows of A)
    K, stride_xm, stride_xk, stride_wan, stride_wak, stride_wbn, stride_wbk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_NB: tl.constexpr, BLOCK_K: tl.constexpr,
    PAIRED: tl.constexpr,         # also accumulate x @ Wb[wb_rows].T (GLU: both halves; LoRA: x @ A.T)
    ACC_DTYPE: tl.constexpr,      # fp32, or fp64 for fp64 inputs
    DOT_PRECISION: tl.constexpr,  # "ieee" or "tf32" (fp32 inputs only; ignored otherwise)
    UPCAST: tl.constexpr,         # interpreter: its bf16/fp16 dots are wrong or slow
):
    """acc_a = x[rows] @ Wa[w_rows].T and, if PAIRED, acc_b = x[rows] @ Wb[wb_rows].T.

    The x tile is loaded once per K step and feeds both dots: for a GLU this is the fusion
    that reads x once for both weights, for LoRA the one that reads it once for W and A
    (``acc_b`` is then the narrow ``[BLOCK_M, BLOCK_NB]`` rank-r product). Out-of-range rows and the K tail are masked to zero,
    so any M, N, K works (no padding by the caller). Any strides: a transposed weight view
    (``W.T`` of a ``[K, N]`` matrix) is read in place.
    """
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16 on GPUs")
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
    # W tiles are read as [BLOCK_K, BLOCK_N] (W transposed) so the dot needs no tl.trans.
    wa_ptrs = wa_ptr + w_rows[None, :] * stride_wan + offs_k[:, None] * stride_wak
    wb_ptrs = wb_ptr + wb_rows[None, :] * stride_wbn + offs_k[:, None] * stride_wbk
    acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    acc_b = tl.zeros((BLOCK_M, BLOCK_NB), dtype=ACC_DTYPE)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        x_tile = tl.load(x_ptrs, mask=mask_rows[:, None] & mask_k[None, :], other=0.0)
        wa_tile = tl.load(wa_ptrs, mask=mask_k[:, None] & mask_w[None, :], other=0.0)
        if UPCAST:
            x_tile = x_tile.to(tl.float32)
            wa_tile = wa_tile.to(tl.float32)
        acc_a = tl.dot(x_tile, wa_tile, acc_a, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        if PAIRED:
            wb_tile = tl.load(wb_ptrs, mask=mask_k[:, None] & mask_wb[None, :], other=0.0)
            if UPCAST:
                wb_tile = wb_tile.to(tl.float32)
            acc_b = tl.dot(x_tile, wb_tile, acc_b, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
            wb_ptrs += BLOCK_K * stride_wbk
        x_ptrs += BLOCK_K * stride_xk
        wa_ptrs += BLOCK_K * stride_wak
    return acc_a, acc_b


@triton.jit
def xwT_mainloop_tma(
    x_desc, wa_desc, wb_desc,     # descriptors of x [M, K] and of Wa, Wb, each [N, K] (or [K, N]: W_KN)
    row_start, col_start,         # the tile's first row of x and first row of Wa
    wb_start,                     # first row of Wb (a GLU: col_start; LoRA: 0, all r rows of A)
    K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_NB: tl.constexpr, BLOCK_K: tl.constexpr,
    PAIRED: tl.constexpr, ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    W_KN: tl.constexpr,           # Wa is given as the row-major [K, N] matrix W.T (tiles [BLOCK_K, BLOCK_N])
):
    """acc_a = x[rows] @ Wa[cols].T and, if PAIRED, acc_b = x[rows] @ Wb[wb rows].T, via descriptors.

    ``wa_desc`` / ``wb_desc`` describe separate weights or separate row ranges of one (for a
    packed GLU weight, its two halves), so a tile past the end of one reads zeros, not the
    other. ``W_KN`` (unpaired only) serves ``g @ W`` products, where the weight is stored
    ``[K, N]``: its tiles are already the dot's right operand. Same contract as
    ``xwT_mainloop`` otherwise.
    """
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16 on GPUs")
    tl.static_assert(not (PAIRED and W_KN), "W_KN is for unpaired products")
    acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    acc_b = tl.zeros((BLOCK_M, BLOCK_NB), dtype=ACC_DTYPE)
    for k_start in range(0, K, BLOCK_K):
        x_tile = x_desc.load([row_start, k_start])
        if W_KN:
            wa_tile = wa_desc.load([k_start, col_start])
        else:
            wa_tile = wa_desc.load([col_start, k_start]).T
        if UPCAST:
            x_tile = x_tile.to(tl.float32)
            wa_tile = wa_tile.to(tl.float32)
        acc_a = tl.dot(x_tile, wa_tile, acc_a, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        if PAIRED:
            wb_tile = wb_desc.load([wb_start, k_start])
            if UPCAST:
                wb_tile = wb_tile.to(tl.float32)
            acc_b = tl.dot(x_tile, wb_tile.T, acc_b, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    return acc_a, acc_b
