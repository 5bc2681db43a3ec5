"""The ranks' all-gather of DLRM's table exchange, two ways, measured on one host's GPUs:

    torchrun --nproc-per-node 2 benchmarks/exchange_paths.py [--rows 562000] [--out DIR]

nccl         ``all_gather_into_tensor`` (NCCL's ring kernel: it runs on SMs)
copy_engine  fusedmlp._distributed.PeerGather: each rank's list already in its slot of a
             symmetric-memory buffer laid out as the gathered array; a barrier (the others are
             done reading the slot's last list), a barrier (every slot written), each rank
             pulls the other ranks' slots from their buffers with device-to-device copies (the
             copy engines over NVLink, no SMs); copy_engine_sN: the copies split over N streams

for the two lists the data-parallel DLRM step exchanges at 65536 rows per GPU: the distinct
keys (int32, --rows per rank) and their gradient sums (bf16, --rows x 16). Times are medians
of CUDA-event-timed calls, each way eager and replayed from a CUDA graph; "beside a GEMM" is
the time of 8 exchanges issued together with 8 bf16 8192^3 GEMMs on a second stream, against
the GEMMs alone: what an exchange takes from a step whose SMs are busy. Every result is
checked against the expected gathered array. Rank 0 prints the table and writes
DIR/exchange_paths.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist
from scaling import _median_step_ms  # benchmarks/scaling.py, beside this script


def _graphed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay


def _beside_gemm(fn) -> tuple[float, float]:
    """(ms of 8 GEMMs alone, ms of the same 8 GEMMs with 8 exchanges issued beside them)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def gemms():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(8):
                a @ a
        torch.cuda.current_stream().wait_stream(side)

    def both():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(8):
                a @ a
        for _ in range(8):
            fn()
        torch.cuda.current_stream().wait_stream(side)

    return _median_step_ms(gemms, 10), _median_step_ms(both, 10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=562000, help="list length per rank")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    import torch.distributed._symmetric_memory as symm_mem

    from fusedmlp import _distributed

    rows = []
    for name, dtype, tail in (("keys", torch.int32, ()), ("sums", torch.bfloat16, (16,))):
        length = args.rows
        shape = (world * length,) + tail
        expected = torch.arange(world * length, device="cuda").reshape(world * length, *([1] * len(tail)))
        expected = (expected % 1000 + 1).expand(shape).to(dtype).contiguous()
        mine = expected[rank * length:(rank + 1) * length].clone()

        out = torch.empty(shape, device="cuda", dtype=dtype)

        def nccl():
            dist.all_gather_into_tensor(out, mine)

        ways = [("nccl", nccl, out)]
        for push in (False, True):
            _distributed.PUSH = push
            exchange = _distributed.PeerGather(dist.group.WORLD, length, tail, dtype, torch.device("cuda"))
            exchange.writable().copy_(mine)

            def copy_engine(exchange=exchange, push=push):
                _distributed.PUSH = push
                exchange.writable()
                exchange.gather()

            ways.append(("copy_engine_push" if push else "copy_engine_pull", copy_engine, exchange.gathered))
        results = {}
        def clear(result):  # the other ranks' rows, so that stale data would show
            torch.cuda.synchronize()
            dist.barrier()  # nobody writes into them now (a push)
            for peer in range(world):
                if peer != rank:
                    result[peer * length:(peer + 1) * length].zero_()
            torch.cuda.synchronize()
            dist.barrier()

        for way, fn, result in ways:
            clear(result)
            fn()
            torch.cuda.synchronize()
            ok = bool(torch.equal(result, expected))
            eager = _median_step_ms(fn)
            graph = _graphed(fn)
            clear(result)
            graph()
            torch.cuda.synchronize()
            ok = ok and bool(torch.equal(result, expected))
            replay = _median_step_ms(graph)
            alone, beside = _beside_gemm(graph)
            results[way] = {"correct": ok, "eager_ms": eager, "graph_ms": replay, "gemms_alone_ms": alone,
                            "gemms_with_exchanges_ms": beside}
        flags = torch.tensor([r["correct"] for r in results.values()], device="cuda", dtype=torch.int32)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        for way, r in zip(results, flags.tolist()):
            results[way]["correct_on_every_rank"] = bool(r)
        mb = mine.numel() * mine.element_size() / 1e6
        rows.append({"list": name, "dtype": str(dtype), "per_rank_mb": mb, "world": world, **results})
    if rank == 0:
        print(f"{torch.cuda.get_device_name()} x {world}, PyTorch {torch.__version__}, NCCL "
              f"{'.'.join(map(str, torch.cuda.nccl.version()))}, symmetric memory backend "
              f"{symm_mem.get_backend('cuda') if hasattr(symm_mem, 'get_backend') else '?'}")
        print("list  MB/rank  way          correct  eager ms  graph ms  8 GEMMs alone  with 8 exchanges")
        for row in rows:
            for way in [key for key in row if key.startswith(("nccl", "copy_engine"))]:
                r = row[way]
                print(f"{row['list']:5} {row['per_rank_mb']:7.2f}  {way:12} {r['correct_on_every_rank']!s:7}  "
                      f"{r['eager_ms']:8.4f}  {r['graph_ms']:8.4f}  {r['gemms_alone_ms']:13.3f}  "
                      f"{r['gemms_with_exchanges_ms']:16.3f}")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "exchange_paths.json").write_text(json.dumps(
                {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
