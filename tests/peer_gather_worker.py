"""One rank of tests/test_distributed.py's check of the copy-engine all-gather
(fusedmlp._distributed.PeerGather), on GPUs with NCCL:

    torchrun --nproc-per-node N tests/peer_gather_worker.py

- gathers of fresh random lists (int32 keys, bf16 rows) equal NCCL's all_gather, three times
  over (stale data would show), and a busy object is not handed out twice;
- the same inside a captured CUDA graph, replayed on new data; none is made during a capture;
- ``FUSEDMLP_EXCHANGE=nccl`` turns it off;
- the fused table update of a data-parallel embedding lookup takes this path (its optimizer's
  cache holds the keys' and the sums' exchanges) and leaves the same tables on every rank as
  the NCCL path does, bit for bit.

Failures are raised, so torchrun's exit status is the verdict.
"""

import os
import sys

import torch
import torch.distributed as dist

import fusedmlp
from fusedmlp._distributed import exit_rank, peer_gather, release


def fresh(length, row_shape, dtype, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(0, 1 << 30, (length, *row_shape), generator=generator, device="cuda", dtype=dtype)
    return torch.randn((length, *row_shape), generator=generator, device="cuda").to(dtype)


def nccl_gather(tensor):
    out = tensor.new_empty((dist.get_world_size() * tensor.shape[0],) + tuple(tensor.shape[1:]))
    dist.all_gather_into_tensor(out, tensor)
    return out


def check_gathers(rank, group):
    cache = {}
    for tag, length, row_shape, dtype in (("keys", 1001, (), torch.int32), ("sums", 777, (16,), torch.bfloat16)):
        exchange = peer_gather(cache, tag, group, length, row_shape, dtype, "cuda")
        assert exchange is not None, "no symmetric-memory exchange on one host's GPUs"
        assert peer_gather(cache, tag, group, length, row_shape, dtype, "cuda") is None, "busy object handed out"
        for round_ in range(3):
            mine = fresh(length, row_shape, dtype, seed=100 * round_ + rank)
            exchange.writable().copy_(mine)
            got = exchange.gather().clone()
            assert torch.equal(got, nccl_gather(mine)), (tag, round_)
        release(exchange)
        assert peer_gather(cache, tag, group, length, row_shape, dtype, "cuda") is exchange
        # captured: the slot filled from `source`, the gather, a copy out; replayed on new data
        source = fresh(length, row_shape, dtype, seed=7 + rank)
        out = exchange.gathered.clone()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            exchange.writable().copy_(source)
            out.copy_(exchange.gather())
            assert peer_gather(cache, tag, group, length + 1, row_shape, dtype, "cuda") is None, \
                "allocated during a capture"
        for round_ in range(3):
            source.copy_(fresh(length, row_shape, dtype, seed=1000 + 100 * round_ + rank))
            graph.replay()
            assert torch.equal(out, nccl_gather(source)), (tag, "graph", round_)
        release(exchange)


def train_tables(group, seed_offset):
    """Three fused SGD steps of a data-parallel lookup (each rank its own indices); the tables."""
    torch.manual_seed(0)
    rows, dim, tables, batch = 5000, 16, 4, 512
    weight = torch.randn(rows * tables, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    offsets = torch.arange(tables + 1, device="cuda", dtype=torch.int64) * rows
    optimizer = fusedmlp.SparseOptimizer("sgd", 0.1, group=group, table_rows=(rows,) * tables, overlap=True)
    for step in range(3):
        generator = torch.Generator(device="cuda").manual_seed(10 * step + seed_offset)
        indices = torch.randint(0, rows, (batch, tables), generator=generator, device="cuda")
        out = fusedmlp.embedding_lookup(weight, offsets, indices, optimizer=optimizer)
        (out.float() * (step + 1)).sum().backward()
    optimizer.wait()
    torch.cuda.synchronize()
    return weight.detach(), optimizer


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    group = dist.group.WORLD
    check_gathers(rank, group)
    os.environ["FUSEDMLP_EXCHANGE"] = "nccl"
    assert peer_gather({}, "keys", group, 10, (), torch.int32, "cuda") is None
    nccl_tables, nccl_optimizer = train_tables(group, rank)
    assert not nccl_optimizer._exchanges
    del os.environ["FUSEDMLP_EXCHANGE"]
    tables, optimizer = train_tables(group, rank)
    assert sorted(key[0] for key in optimizer._exchanges) == ["keys", "sums"], optimizer._exchanges.keys()
    assert torch.equal(tables, nccl_tables), "the copy-engine exchange changed the update"
    assert torch.equal(nccl_gather(tables[None])[0], nccl_gather(tables[None])[-1]), "the replicas differ"
    if rank == 0:
        print("peer gather: exchanges, graphs and the table update checked on", dist.get_world_size(), "GPUs")
    dist.barrier()
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    sys.exit(main())
