"""DLRM's dot interaction, forward and backward, one kernel each.

    T    = [z, e_0, ..., e_{F-1}]           [B, V, D], V = F + 1 vectors per row (z: bottom MLP output)
    G    = T @ T^T                          [B, V, V]
    out  = [z | G[i, j] for i > j]          [B, D + V (V - 1) / 2], row-major lower triangle:
                                            G[i, j] lands in column D + i (i - 1) / 2 + j

Backward, with dG[i, j] = d_out[D + i (i - 1) / 2 + j] for i > j and 0 elsewhere:

    dT   = (dG + dG^T) @ T                  (G is symmetric in T: both factors get a share)
    dz   = dT[:, 0] + d_out[:, :D];   de_f = dT[:, 1 + f]

Each program takes BLOCK_B rows and holds their vectors as one [BLOCK_B, V_PAD, D_PAD] tile:
the Gram matrices are one batched tl.dot, the triangle is written straight from registers
(neither T, G nor dG ever exists in memory), and the backward reloads T instead of saving it
(it is as large as the input). dG + dG^T is exact in the input dtype: the two triangles do
not overlap. Rows, vectors and the embedding width are padded to powers of two of at least
16 (the minimum dot size) and masked.
"""

import triton
import triton.language as tl


@triton.jit
def _load_vectors(dense_ptr, emb_ptr, rows, row_mask, stride_dense, stride_emb_b, stride_emb_f,
                  F: tl.constexpr, D: tl.constexpr, V_PAD: tl.constexpr, D_PAD: tl.constexpr):
    """T of BLOCK_B rows: [BLOCK_B, V_PAD, D_PAD], vector 0 = z, vectors 1..F = the embeddings."""
    vec = tl.arange(0, V_PAD)[None, :, None]
    col = tl.arange(0, D_PAD)[None, None, :]
    rows3 = rows.to(tl.int64)[:, None, None]
    in_row = row_mask[:, None, None] & (col < D)
    emb = tl.load(emb_ptr + rows3 * stride_emb_b + (vec - 1).to(tl.int64) * stride_emb_f + col,
                  mask=in_row & (vec >= 1) & (vec <= F), other=0.0)
    z = tl.load(dense_ptr + rows3 * stride_dense + col, mask=in_row & (vec == 0), other=0.0)
    return emb + z


@triton.jit
def dot_interaction_fwd_kernel(
    dense_ptr, emb_ptr, out_ptr, B,
    stride_dense, stride_emb_b, stride_emb_f, stride_out,
    F: tl.constexpr, D: tl.constexpr, V_PAD: tl.constexpr, D_PAD: tl.constexpr, BLOCK_B: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < B
    vectors = _load_vectors(dense_ptr, emb_ptr, rows, row_mask, stride_dense, stride_emb_b, stride_emb_f,
                            F, D, V_PAD, D_PAD)
    operand = vectors.to(tl.float32) if UPCAST else vectors
    gram = tl.dot(operand, tl.permute(operand, (0, 2, 1)), input_precision=DOT_PRECISION)  # [BLOCK_B, V, V]

    rows64 = rows.to(tl.int64)
    col = tl.arange(0, D_PAD)
    z = tl.sum(tl.where(tl.arange(0, V_PAD)[None, :, None] == 0, vectors, 0.0), axis=1)
    tl.store(out_ptr + rows64[:, None] * stride_out + col[None, :], z.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & (col[None, :] < D))
    i = tl.arange(0, V_PAD)[:, None]
    j = tl.arange(0, V_PAD)[None, :]
    lower = (j < i) & (i <= F)
    tri_col = D + i * (i - 1) // 2 + j
    tl.store(out_ptr + rows64[:, None, None] * stride_out + tri_col[None, :, :], gram.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None, None] & lower[None, :, :])


@triton.jit
def dot_interaction_bwd_kernel(
    dense_ptr, emb_ptr, dout_ptr, ddense_ptr, demb_ptr, B,
    stride_dense, stride_emb_b, stride_emb_f, stride_dout, stride_ddense, stride_demb_b, stride_demb_f,
    F: tl.constexpr, D: tl.constexpr, V_PAD: tl.constexpr, D_PAD: tl.constexpr, BLOCK_B: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < B
    rows64 = rows.to(tl.int64)
    vectors = _load_vectors(dense_ptr, emb_ptr, rows, row_mask, stride_dense, stride_emb_b, stride_emb_f,
                            F, D, V_PAD, D_PAD)
    i = tl.arange(0, V_PAD)[:, None]
    j = tl.arange(0, V_PAD)[None, :]
    lower = (j < i) & (i <= F)
    tri_col = D + i * (i - 1) // 2 + j
    d_gram = tl.load(dout_ptr + rows64[:, None, None] * stride_dout + tri_col[None, :, :],
                     mask=row_mask[:, None, None] & lower[None, :, :], other=0.0)
    d_sym = d_gram + tl.permute(d_gram, (0, 2, 1))  # exact: the triangles do not overlap
    if UPCAST:
        d_vectors = tl.dot(d_sym.to(tl.float32), vectors.to(tl.float32), input_precision=DOT_PRECISION)
    else:
        d_vectors = tl.dot(d_sym, vectors, input_precision=DOT_PRECISION)  # [BLOCK_B, V_PAD, D_PAD]

    vec = tl.arange(0, V_PAD)[None, :, None]
    col3 = tl.arange(0, D_PAD)[None, None, :]
    in_row = row_mask[:, None, None] & (col3 < D)
    tl.store(demb_ptr + rows64[:, None, None] * stride_demb_b + (vec - 1).to(tl.int64) * stride_demb_f + col3,
             d_vectors.to(demb_ptr.dtype.element_ty), mask=in_row & (vec >= 1) & (vec <= F))
    col = tl.arange(0, D_PAD)
    d_z = tl.sum(tl.where(vec == 0, d_vectors, 0.0), axis=1)
    d_z += tl.load(dout_ptr + rows64[:, None] * stride_dout + col[None, :],
                   mask=row_mask[:, None] & (col[None, :] < D), other=0.0).to(d_z.dtype)
    tl.store(ddense_ptr + rows64[:, None] * stride_ddense + col[None, :], d_z.to(ddense_ptr.dtype.element_ty),
             mask=row_mask[:, None] & (col[None, :] < D))
