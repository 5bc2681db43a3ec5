"""lora_merge_kernel's tile shape: the merged weight W + s * B @ A alone and the merged forward.

    PYTHONPATH=src python3 benchmarks/lora_merge_tiles.py [--rounds 3]

For each weight (1024 x 1024 and 4096 x 4096, bf16) and rank (8, 16, 64), every tile
configuration below forms the merged weight with ``lora_merge_kernel`` (launched as
``ops/lora.py``'s ``_merged_weight`` launches it, with the block sizes and warps replaced);
each is checked against ``torch.addmm`` and captured in a CUDA graph, alone ("merge") and
followed by ``F.linear(x, merged, b)`` over 8192 rows ("forward"), beside the bare
``x @ W.T`` ("gemm"). Timed by ``interleaved_ms`` (L2 flushed before each replay; rounds
alternate the order), medians in us. Prints a table and writes lora_merge_tiles.json to $OUT."""

import argparse

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.kernels.launch import launch
from fusedmlp.ops._common import cdiv, dot_meta

# (BLOCK_N, BLOCK_K, num_warps); the first is the library's for 16-bit weights
TILES = [(64, 128, 4), (32, 128, 4), (32, 128, 2), (16, 128, 2), (32, 64, 2), (64, 64, 4), (16, 256, 4), (128, 128, 8)]
SHAPES = [(1024, 8), (1024, 16), (1024, 64), (4096, 16)]
ROWS = 8192


def merge(weight, lora_b, lora_a, scale, merged, tile):
    n, k = weight.shape
    block_n, block_k, warps = tile
    scale_hi, scale_lo = lora_ops._split_scale(scale)
    launch(lora_ops.lora_merge_kernel, (cdiv(n, block_n), cdiv(k, block_k)), weight, lora_b, lora_a, merged,
           n, k, lora_a.shape[0], scale_hi, scale_lo, weight.stride(0), weight.stride(1), lora_b.stride(0),
           lora_b.stride(1), lora_a.stride(0), lora_a.stride(1), merged.stride(0),
           RANK_BLOCK=min(lora_ops._rank_block(lora_a.shape[0]), 64), BLOCK_N=block_n, BLOCK_K=block_k,
           **dot_meta(weight.dtype), num_warps=warps)
    return merged


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for d, r in SHAPES:
        dtype, scale = torch.bfloat16, 2.0
        weight = (torch.randn(d, d, device="cuda") / d**0.5).to(dtype)
        lora_a = (torch.randn(r, d, device="cuda") / d**0.5).to(dtype)
        lora_b = (torch.randn(d, r, device="cuda") / r**0.5).to(dtype)
        bias = torch.randn(d, device="cuda", dtype=dtype)
        x = torch.randn(ROWS, d, device="cuda", dtype=dtype)
        want = torch.addmm(weight.float(), lora_b.float(), lora_a.float(), alpha=scale)
        replays = {"gemm": capture_cuda_graph(lambda: torch.mm(x, weight.t()))[0].replay}
        for tile in TILES:
            merged = torch.empty_like(weight)
            got = merge(weight, lora_b, lora_a, scale, merged, tile).float()
            assert ((got - want).norm() / want.norm()).item() < 1e-2, tile
            name = "x".join(map(str, tile))
            replays[f"merge {name}"] = capture_cuda_graph(
                lambda tile=tile, merged=merged: merge(weight, lora_b, lora_a, scale, merged, tile))[0].replay
            replays[f"forward {name}"] = capture_cuda_graph(
                lambda tile=tile, merged=merged: torch.nn.functional.linear(
                    x, merge(weight, lora_b, lora_a, scale, merged, tile), bias))[0].replay
        rows.append(interleaved_us_row(replays, args.rounds, d=d, r=r))
    write_record("lora_merge_tiles", rows=rows)
    names = ["x".join(map(str, tile)) for tile in TILES]
    print(f"\nmerge alone / merged forward over {ROWS} rows, us (gemm = bare x @ W.T)")
    print("| d, r | gemm | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for row in rows:
        cells = [f"{row[f'merge {n}']:.1f} / {row[f'forward {n}']:.1f}" for n in names]
        print(f"| {row['d']}, r {row['r']} | {row['gemm']:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
