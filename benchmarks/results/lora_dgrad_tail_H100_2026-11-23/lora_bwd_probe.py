"""Probe: LoRA backward pieces on Hopper. Kernel time in CUDA graphs (us).

dx options (M >= out): cuBLAS g @ W (floor), merged weight by addmm + cuBLAS (current),
merged weight by one Triton pass + cuBLAS, ping-pong g @ W (W_KN), ping-pong with d_xa @ A as
tail K steps. Rank products: d_xa and dB by cuBLAS (current) vs one Triton kernel.
"""
import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

from fusedmlp.bench.harness import graph_us
from fusedmlp.kernels.configs import LINEAR_PINGPONG_CONFIG, LINEAR_WIDE_COOPERATIVE_CONFIG
from fusedmlp.kernels.pingpong import (accumulator_layout, pingpong_loader, pingpong_mainloop, pingpong_setup,
                                       program_tiles, tile_start, tma_store_tile)
from fusedmlp.ops._common import launch_pingpong, num_sms


@gluon.jit
def _dgrad_consumer(c_bufs, a_bufs, b_bufs, ready, empty, turn, dx_desc, M, N, K, tail_k,
                    CONSUMER: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                    COOPERATIVE: gl.constexpr):
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    ROWS: gl.constexpr = dx_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K) + gl.cdiv(tail_k, BLOCK_K)
    for i in range(0 if COOPERATIVE else CONSUMER, program_tiles(M, N, TILE_M, BLOCK_N), 1 if COOPERATIVE else 2):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        if COOPERATIVE:
            row_start += CONSUMER * ROWS
        acc = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, True,
                                acc_layout, COOPERATIVE)
        tma_store_tile(dx_desc, c_buf, acc, row_start, col_start)
    tma.store_wait(0)


@gluon.jit
def dgrad_pingpong_kernel(g_desc, w_desc, dxa_desc, a_desc, dx_desc, M, N, K, R,
                          GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
                          CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    """dx [M, N] = g [M, K] @ W [K, N] + d_xa [M, R] @ A [R, N] (R = 0: no tail)."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(g_desc, w_desc, dx_desc, STAGES, False, 1,
                                                                COOPERATIVE)
    gl.warp_specialize([
        (_dgrad_consumer, (c_bufs, a_bufs, b_bufs, ready, empty, turn, dx_desc, M, N, K, R, 0, GROUP_M, STAGES,
                           COOPERATIVE)),
        (_dgrad_consumer, (c_bufs, a_bufs, b_bufs, ready, empty, turn, dx_desc, M, N, K, R, 1, GROUP_M, STAGES,
                           COOPERATIVE)),
        (pingpong_loader, (g_desc, w_desc, w_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES,
                           False, True, dxa_desc, a_desc, R)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@triton.jit
def merge_kernel(w_ptr, b_ptr, a_ptr, out_ptr, N, K, R, SCALE, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 R_PAD: tl.constexpr):
    """out = W + s * B @ A, W [N, K], B [N, R], A [R, K], contiguous."""
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    ranks = tl.arange(0, R_PAD)
    b = tl.load(b_ptr + rows[:, None] * R + ranks[None, :], mask=(rows[:, None] < N) & (ranks[None, :] < R), other=0.0)
    a = tl.load(a_ptr + ranks[:, None] * K + cols[None, :], mask=(ranks[:, None] < R) & (cols[None, :] < K), other=0.0)
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=mask, other=0.0)
    out = w.to(tl.float32) + SCALE * tl.dot(b, a)
    tl.store(out_ptr + rows[:, None] * K + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rank_products_kernel(g_ptr, lb_ptr, xs_ptr, dxa_ptr, dbp_ptr, M, N, R, SCALE,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, R_PAD: tl.constexpr):
    """d_xa[rows] = s * g[rows] @ B (bf16 out); dB partial [pid, N, R] = g[rows].T @ xs[rows] (fp32)."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    ranks = tl.arange(0, R_PAD)
    rmask = rows < M
    xs = tl.load(xs_ptr + rows[:, None] * R + ranks[None, :], mask=rmask[:, None] & (ranks[None, :] < R), other=0.0)
    acc = tl.zeros((BLOCK_M, R_PAD), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        g = tl.load(g_ptr + rows[:, None] * N + cols[None, :], mask=rmask[:, None] & (cols[None, :] < N), other=0.0)
        lb = tl.load(lb_ptr + cols[:, None] * R + ranks[None, :], mask=(cols[:, None] < N) & (ranks[None, :] < R),
                     other=0.0)
        acc = tl.dot(g, lb, acc)
        part = tl.dot(tl.trans(g), xs)
        tl.store(dbp_ptr + pid * N * R_PAD + cols[:, None] * R_PAD + ranks[None, :], part)
    tl.store(dxa_ptr + rows[:, None] * R + ranks[None, :], (acc * SCALE).to(dxa_ptr.dtype.element_ty),
             mask=rmask[:, None] & (ranks[None, :] < R))


def main():
    shapes = [(8192, 4096, 16), (32768, 4096, 16), (8192, 4096, 64), (32768, 1024, 16)]
    if len(sys.argv) > 1:
        shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]]
    rows = []
    dt = torch.bfloat16
    for m, d, r in shapes:
        torch.manual_seed(0)
        g = torch.randn(m, d, device="cuda", dtype=dt)
        w = torch.randn(d, d, device="cuda", dtype=dt) / d ** 0.5
        a = torch.randn(r, d, device="cuda", dtype=dt) / d ** 0.5
        b = torch.randn(d, r, device="cuda", dtype=dt) * 0.1
        xs = torch.randn(m, r, device="cuda", dtype=dt)
        s = 2.0
        d_xa = (s * (g.float() @ b.float())).to(dt)
        dx = torch.empty(m, d, device="cuda", dtype=dt)
        ref = (g.double() @ w.double() + d_xa.double() @ a.double())
        sms = num_sms(g)

        def pp(config, tail):
            launch_pingpong(dgrad_pingpong_kernel, config, m, d, sms,
                            {"g_desc": g, "dxa_desc": d_xa}, {}, {"dx_desc": dx}, {"w_desc": w, "a_desc": a},
                            M=m, N=d, K=d, R=r if tail else 0)

        merged = torch.empty_like(w)

        def merge_triton():
            merge_kernel[(triton.cdiv(d, 64), triton.cdiv(d, 128))](w, b, a, merged, d, d, r, s, BLOCK_N=64,
                                                                   BLOCK_K=128, R_PAD=max(16, r), num_warps=4)

        row = dict(m=m, d=d, r=r)
        # correctness of the tail forms
        for name, cfg in (("pp", LINEAR_PINGPONG_CONFIG), ("pp_wide", LINEAR_WIDE_COOPERATIVE_CONFIG)):
            pp(cfg, True)
            torch.cuda.synchronize()
            row[name + "_err"] = float(((dx.double() - ref).abs().max() / ref.abs().max()).item())
        merge_triton()
        mref = w.double() + s * b.double() @ a.double()
        row["merge_err"] = float(((merged.double() - mref).abs().max() / mref.abs().max()).item())
        dbp_rows = 128 if m >= 16384 else 64
        parts = torch.empty(triton.cdiv(m, dbp_rows), d, max(16, r), device="cuda", dtype=torch.float32)
        dxa_out = torch.empty(m, r, device="cuda", dtype=dt)

        def fused_rank():
            rank_products_kernel[(triton.cdiv(m, dbp_rows),)](g, b, xs, dxa_out, parts, m, d, r, s, BLOCK_M=dbp_rows,
                                                            BLOCK_N=64, R_PAD=max(16, r), num_warps=4, num_stages=3)
            return parts.sum(0)[:, :r].to(dt)

        db = fused_rank()
        db_ref = g.double().t() @ xs.double()
        row["rank_db_err"] = float(((db.double() - db_ref).abs().max() / db_ref.abs().max()).item())
        row["rank_dxa_err"] = float(((dxa_out.double() - s * g.double() @ b.double()).abs().max()
                                     / (s * g.double() @ b.double()).abs().max()).item())
        times = {
            "cublas_gW": lambda: torch.mm(g, w, out=dx),
            "addmm_merged_mm": lambda: torch.mm(g, torch.addmm(w, b, a, alpha=s), out=dx),
            "triton_merged_mm": lambda: (merge_triton(), torch.mm(g, merged, out=dx)),
            "merge_addmm_only": lambda: torch.addmm(w, b, a, alpha=s),
            "merge_triton_only": merge_triton,
            "pp_plain": lambda: pp(LINEAR_PINGPONG_CONFIG, False),
            "pp_tail": lambda: pp(LINEAR_PINGPONG_CONFIG, True),
            "pp_wide_plain": lambda: pp(LINEAR_WIDE_COOPERATIVE_CONFIG, False),
            "pp_wide_tail": lambda: pp(LINEAR_WIDE_COOPERATIVE_CONFIG, True),
            "rank_cublas": lambda: (torch.empty(m, r, device="cuda", dtype=dt).addmm_(g, b, beta=0, alpha=s),
                                    g.t() @ xs),
            "rank_fused": fused_rank,
        }
        for rnd in range(2):
            for name, fn in (times.items() if rnd == 0 else reversed(list(times.items()))):
                row.setdefault(name, []).append(round(graph_us(fn), 1))
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(os.path.join(os.environ.get("OUT", "."), "lora_bwd_probe.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                       rows=rows), f, indent=1)
    print(f"{'shape':>18} " + " ".join(f"{k:>16}" for k in times))
    for row in rows:
        print(f"{row['m']}x{row['d']}x{row['r']:>4} " + " ".join(f"{min(row[k]):>16.1f}" for k in times))


if __name__ == "__main__":
    main()
