"""GEGLU's store-mode dh stream with TMA copies, against the library's pointer kernel.

    PYTHONPATH=src python3 benchmarks/glu_stream_tma_probe.py [--rounds 3] [--shapes 1024x32768,2048x16384,4096x8192]

The store mode's backward reads h = [x1 | x2] ([N, 8d]) and g ([N, 4d]) and writes
dh = [g * act(x2) | g * x1 * act'(x2)] over h, with the bias's db partials: 20 d values a row,
bound by memory bandwidth. The library's ``glu_bwd_stream_kernel`` (pointer loads and stores,
16 rows of 128 columns a step, 2 warps, one row block per program) moves them at about 2.5 TB/s
on an H100 (benchmarks/NOTES.md, "Step ratios under the power cap"), where a copy reaches 3.0.
Here a persistent Triton kernel moves the same tiles with tensor descriptors (TMA loads and
stores), in a few tile shapes, warps and programs per SM; each is checked against the
library's dh and db on the same inputs, then all are timed in place (dh over h, as the backward
runs) in CUDA-graph replays, do_bench with the L2 flushed, interleaved rounds; "copy" is a
``copy_`` of the same bytes (10 d elements a row read and written). Medians, us, and TB/s.
"""

import argparse

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import fusedmlp.ops.glu as glu_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.kernels.activations import activation_value_and_grad


@triton.jit
def glu_stream_tma_kernel(g_desc, x1_desc, x2_desc, dh1_desc, dh2_desc, db_partial_ptr, M, OUT,
                          ACT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """dh1 = g * act(x2), dh2 = g * x1 * act'(x2) over [BLOCK_M, BLOCK_N] tiles (column tiles of a
    row block on consecutive steps of the grid), the db partials one row per row block."""
    tiles_n = tl.cdiv(OUT, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, tl.num_programs(0), num_stages=STAGES):
        tile_m = tile // tiles_n
        row_start = tile_m * BLOCK_M
        col_start = (tile % tiles_n) * BLOCK_N
        x1 = x1_desc.load([row_start, col_start]).to(tl.float32)
        x2 = x2_desc.load([row_start, col_start]).to(tl.float32)
        g = g_desc.load([row_start, col_start]).to(tl.float32)
        act_x2, act_grad_x2 = activation_value_and_grad(x2, ACT)
        dh1 = g * act_x2
        dh2 = g * x1 * act_grad_x2
        dh1_desc.store([row_start, col_start], dh1.to(dh1_desc.dtype))
        dh2_desc.store([row_start, col_start], dh2.to(dh2_desc.dtype))
        if HAS_BIAS:  # rows past M read g = 0
            cols = col_start + tl.arange(0, BLOCK_N)
            partials = db_partial_ptr + tile_m.to(tl.int64) * (2 * OUT) + cols
            tl.store(partials, tl.sum(dh1, axis=0), mask=cols < OUT)
            tl.store(partials + OUT, tl.sum(dh2, axis=0), mask=cols < OUT)


CONFIGS = [  # (BLOCK_M, BLOCK_N, num_warps, programs per SM, STAGES)
    (16, 128, 2, 8, 1), (32, 128, 4, 4, 1), (32, 128, 4, 4, 2), (64, 128, 4, 4, 2),
    (32, 256, 4, 4, 2), (64, 128, 8, 2, 3), (16, 256, 4, 8, 2), (64, 64, 4, 4, 2),
]


def tma_stream(g, h, out, config):
    """(dh over h, db) of the TMA kernel in ``config``."""
    block_m, block_n, warps, per_sm, stages = config
    m = h.shape[0]
    descs = [TensorDescriptor.from_tensor(t, [block_m, block_n]) for t in (g, h[:, :out], h[:, out:])]
    partials = torch.empty((triton.cdiv(m, block_m), 2 * out), dtype=torch.float32, device=h.device)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(out, block_n)
    grid = (min(tiles, per_sm * torch.cuda.get_device_properties(h.device).multi_processor_count),)
    glu_stream_tma_kernel[grid](descs[0], descs[1], descs[2], descs[1], descs[2], partials, m, out,
                                ACT="gelu_tanh", HAS_BIAS=True, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages,
                                num_warps=warps)
    return h, partials.sum(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="1024x32768,2048x16384,4096x8192")
    args = parser.parse_args()
    rows = []
    for text in args.shapes.split(","):
        d, n = (int(v) for v in text.split("x"))
        out = 4 * d
        x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(2 * out, d, device="cuda", dtype=torch.bfloat16) / d**0.5
        b = torch.randn(2 * out, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(n, out, device="cuda", dtype=torch.bfloat16)
        h0 = torch.randn(n, 2 * out, device="cuda", dtype=torch.bfloat16)
        halves = (w[:out], w[out:], b[:out], b[out:])

        def library(h):
            dh, db, _ = glu_ops.glu_backward_dh_impl(g, x, *halves, h, "gelu_tanh", in_place=True)
            return dh, db

        ref_dh, ref_db = library(h0.clone())
        errors, configs = {}, []
        for config in CONFIGS:
            try:
                dh, db = tma_stream(g, h0.clone(), out, config)
            except Exception as error:  # a tile shape the compiler refuses: reported, left out
                errors[str(config)] = repr(error)[:200]
                continue
            errors[str(config)] = [(dh.float() - ref_dh.float()).abs().max().item(),
                                   ((db - ref_db).abs().max() / ref_db.abs().max()).item()]
            configs.append(config)
        print(text, "max |dh - library's|, db relative:", errors, flush=True)
        h = h0.clone()
        calls = {"library": capture_cuda_graph(lambda: library(h))[0].replay}
        for config in configs:
            calls[f"tma {config}"] = capture_cuda_graph(lambda config=config: tma_stream(g, h, out, config))[0].replay
        src = torch.randn(n, 10 * d, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        calls["copy"] = capture_cuda_graph(lambda: dst.copy_(src))[0].replay
        row = interleaved_us_row(calls, args.rounds, shape=text)
        moved = n * 20 * d * 2
        row["TB/s"] = {name: moved / (row[name] * 1e-6) / 1e12 for name in calls}
        row["errors"] = errors
        print("   TB/s", {k: round(v, 2) for k, v in row["TB/s"].items()}, flush=True)
        rows.append(row)
        del calls
        torch.cuda.empty_cache()
    write_record("glu_stream_tma_probe", configs=[str(c) for c in CONFIGS], rows=rows)


if __name__ == "__main__":
    main()
