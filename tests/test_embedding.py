"""fusedmlp.embedding_lookup and TableBatchedEmbedding: the gather and the update fused into the
backward (SGD, Adagrad) against float64 references; long runs of one row across blocks; indices
outside their table; bad inputs; state dicts shared with nn.ModuleList of nn.Embedding."""

import pytest
import torch
import torch.nn as nn

import fusedmlp.ops.embedding as embedding_ops
from conftest import DEVICE
from fusedmlp.nn.embedding import TableBatchedEmbedding
from fusedmlp.ops.embedding import (SparseOptimizer, embedding_lookup, embedding_lookup_reference,
                                    sparse_update_reference)
from helpers import assert_close, rel_err


def _offsets(sizes):
    return torch.tensor([0] + list(sizes), device=DEVICE).cumsum(0)


def _indices(batch, sizes, hot=False):
    """Uniform per table; ``hot``: every other table draws from its first 2 rows (long runs)."""
    cols = [torch.randint(0, min(n, 2) if hot and t % 2 else n, (batch,), device=DEVICE) for t, n in enumerate(sizes)]
    return torch.stack(cols, 1)


@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("batch,sizes,dim,hot", [(5, (7, 1, 30), 16, False), (150, (9, 200, 3, 40), 12, True)])
def test_lookup_and_update_match_float64(kind, dtype, batch, sizes, dim, hot, monkeypatch):
    # small blocks, so the hot rows' runs cross many blocks and several windows of blocks
    monkeypatch.setattr(embedding_ops, "_BLOCK_P", 16)
    monkeypatch.setattr(embedding_ops, "_W_BLOCKS", 4)
    offsets, indices = _offsets(sizes), _indices(batch, sizes, hot)
    weight64 = torch.randn(int(offsets[-1]), dim, dtype=torch.float64, device=DEVICE)
    state64 = torch.rand_like(weight64) if kind == "adagrad" else None
    lr = 0.4

    reference = weight64.clone().requires_grad_()
    out_ref = embedding_lookup_reference(reference, offsets, indices)
    grad_out = torch.randn_like(out_ref)
    (out_ref * grad_out).sum().backward()
    expected = weight64.clone()
    ref_optimizer = SparseOptimizer(kind, lr, state=None if state64 is None else state64.clone())
    sparse_update_reference(expected, reference.grad, ref_optimizer)

    weight = weight64.to(dtype).requires_grad_()
    start = weight.detach().double().clone()
    optimizer = SparseOptimizer(kind, lr, state=None if state64 is None else state64.to(dtype))
    out = embedding_lookup(weight, offsets, indices, optimizer=optimizer)
    assert out.shape == (batch, len(sizes), dim) and out.dtype == dtype
    assert torch.equal(out.detach(), out_ref.detach().to(dtype))  # a gather: exact
    out.backward(grad_out.to(dtype))
    assert weight.grad is None
    touched = reference.grad.ne(0).any(1)
    assert torch.equal(weight.detach()[~touched].double(), start[~touched])  # untouched rows unchanged
    assert_close(weight.detach().double() - start, expected - start, dtype, f"{kind} update")
    if kind == "adagrad":
        assert_close(optimizer.state, ref_optimizer.state, dtype, "adagrad state")


def test_one_hot_row_filling_the_batch():
    """Every lookup of a table on one row: one run over all blocks (the carried path alone)."""
    sizes = (3, 5)
    offsets = _offsets(sizes)
    indices = torch.stack([torch.full((700,), 2, device=DEVICE), torch.randint(0, 5, (700,), device=DEVICE)], 1)
    weight = torch.randn(8, 16, dtype=torch.float64, device=DEVICE, requires_grad=True)
    start = weight.detach().clone()
    grad_out = torch.randn(700, 2, 16, dtype=torch.float64, device=DEVICE)
    embedding_lookup(weight, offsets, indices, optimizer=SparseOptimizer("sgd", 1.0)).backward(grad_out)
    assert_close(start[2] - weight.detach()[2], grad_out[:, 0].sum(0), torch.float64, "row 2")


def test_indices_outside_their_table():
    sizes = (4, 6)
    offsets = _offsets(sizes)
    indices = torch.tensor([[1, 5], [4, 0], [-1, 2]], device=DEVICE)
    weight = torch.randn(10, 8, device=DEVICE, requires_grad=True)
    with pytest.raises(IndexError, match=r"indices\[1, 0\] = 4 is outside table 0 \(4 rows\)"):
        embedding_lookup(weight, offsets, indices)
    start = weight.detach().clone()
    out = embedding_lookup(weight, offsets, indices, optimizer=SparseOptimizer("sgd", 1.0), check_bounds=False)
    assert torch.equal(out[1, 0], torch.zeros(8, device=DEVICE)) and torch.equal(out[2, 0], out[1, 0])
    assert torch.equal(out[0, 1], start[4 + 5]) and torch.equal(out[1, 1], start[4])
    out.backward(torch.ones_like(out))
    changed = (weight.detach() != start).any(1).nonzero().flatten().tolist()
    assert changed == [1, 4, 6, 9]  # the valid lookups' rows only
    # offsets past weight's rows, unchecked: those lookups read zeros and update nothing
    wrong = torch.tensor([0, 4, 12], device=DEVICE)  # table 1 claims rows 4-11 of 10
    start = weight.detach().clone()
    out = embedding_lookup(weight, wrong, torch.tensor([[1, 5], [2, 7]], device=DEVICE),
                           optimizer=SparseOptimizer("sgd", 1.0), check_bounds=False)
    assert torch.equal(out[0, 1], start[9]) and torch.equal(out[1, 1], torch.zeros(8, device=DEVICE))
    out.backward(torch.ones_like(out))
    assert (weight.detach() != start).any(1).nonzero().flatten().tolist() == [1, 2, 9]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_sums_per_row_for_the_exchange(dtype):
    """The per-rank (row, sum) lists the data-parallel backward exchanges: one entry per distinct
    key (the out-of-table key included), sums against float64, the tail padded with that key;
    runs of a hot row cross the update kernel's 128-lookup blocks and the distinct-keys
    kernel's 1024-lookup blocks."""
    rows, dim, lookups = 50, 5, 2500
    keys = torch.randint(0, 12, (lookups,), device=DEVICE)
    keys[::9] = rows  # lookups outside their table
    keys[:300] = 3  # a hot row
    keys[1000:1100] = 4  # a row whose lookups sort across a distinct-keys block boundary
    keys = keys.to(torch.int32)
    grad = torch.randn(lookups, dim, device=DEVICE).to(dtype)
    bound = 20
    out_keys, sums = embedding_ops._sums_per_row(grad, keys, rows, bound)
    distinct = torch.unique(keys)
    assert out_keys.shape == (bound,) and sums.shape == (bound, dim) and sums.dtype == dtype
    assert sorted(out_keys[:len(distinct)].tolist()) == distinct.tolist()
    assert (out_keys[len(distinct):] == rows).all() and (sums[len(distinct):] == 0).all()
    want = torch.zeros(rows + 1, dim, dtype=torch.float64, device=DEVICE).index_add_(0, keys.long(), grad.double())
    got = torch.zeros_like(want).index_add_(0, out_keys.long(), sums.double())
    # summed in fp32, rounded once to bf16: to nearest (2^-8; under the interpreter through
    # conftest.py, whose Triton alone truncates: up to 2^-7)
    assert rel_err(got, want) < (8e-3 if dtype == torch.bfloat16 else 1e-6)
    # a rank without rows in a short last batch sends only padding
    out_keys, sums = embedding_ops._sums_per_row(grad[:0], keys[:0], rows, 1)
    assert out_keys.tolist() == [rows] and (sums == 0).all()


@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, bound, lookups", [(300, 160, 150), (6000, 900, 1000)])
def test_merged_update_of_the_ranks_lists(kind, world, dtype, rows, bound, lookups):
    """The update from the gathered (row, sum) lists of ``world`` ranks (what each rank runs
    after the exchange): rows held by one rank, by some, by all; lookups outside their table;
    lists of different lengths padded; against float64 on the union of every rank's lookups.
    The larger lists span several programs of the links and update kernels."""
    dim = 12
    base = lookups
    weight64 = torch.randn(rows, dim, dtype=torch.float64, device=DEVICE) * 0.1  # updates of about 0.1
    state64 = torch.rand_like(weight64) + 0.5 if kind == "adagrad" else None
    lists, all_keys, all_grads = [], [], []
    for rank in range(world):
        lookups = base + 40 * rank
        keys = torch.randint(0, rows, (lookups,), device=DEVICE)
        keys[:30] = 7  # a row every rank holds
        keys[30:40] = 100 + rank  # rows of one rank each
        keys[::11] = rows  # outside their table
        keys = keys.to(torch.int32)
        grad = torch.randn(lookups, dim, device=DEVICE).to(dtype)
        out_keys, sums = embedding_ops._sums_per_row(grad, keys, rows, bound)
        lists.append((out_keys, sums))
        all_keys.append(keys)
        all_grads.append(grad)
    keys = torch.cat([k for k, _ in lists])
    sums = torch.cat([g for _, g in lists])
    start = weight64.to(dtype)
    weight = start.clone()
    start_state = None if state64 is None else state64.float()
    optimizer = SparseOptimizer(kind, 0.1, state=None if start_state is None else start_state.clone())
    if embedding_ops.use_triton(weight):
        embedding_ops._merged_update(keys, sums, weight, optimizer, world)
    else:  # CPU without the interpreter: the PyTorch path of the same update
        pytest.skip("the merged update is a Triton kernel")
    keys64 = torch.cat(all_keys).long()
    inside = keys64 < rows
    dense = torch.zeros(rows, dim, dtype=torch.float64, device=DEVICE)
    dense.index_add_(0, keys64[inside], torch.cat(all_grads).double()[inside])
    expected = start.double()
    sparse_update_reference(expected, dense, SparseOptimizer(kind, 0.1, state=state64))
    change, expected_change = weight.double() - start.double(), expected - start.double()
    assert rel_err(change, expected_change) < (2e-2 if dtype == torch.bfloat16 else 1e-5)
    untouched = torch.ones(rows, dtype=torch.bool, device=DEVICE)
    untouched[keys64[inside]] = False
    assert torch.equal(weight[untouched], start[untouched])
    if kind == "adagrad":
        assert rel_err(optimizer.state.double(), state64) < (2e-2 if dtype == torch.bfloat16 else 1e-5)
    # in two parts, as a rank does while the others' sums arrive: the rows rank `own` alone
    # holds (from its own sums only: the others' read as NaN here), then the rest; bit for bit
    for own in range(world) if world > 1 else ():
        parted = start.clone()
        parted_optimizer = SparseOptimizer(kind, 0.1, state=None if start_state is None else start_state.clone())
        others_unknown = sums.clone()
        others_unknown[torch.arange(len(sums), device=DEVICE) // (len(sums) // world) != own] = float("nan")
        embedding_ops._merged_update(keys, others_unknown, parted, parted_optimizer, world,
                                     part=embedding_ops.MERGED_OWN_ONLY, own=own)
        embedding_ops._merged_update(keys, sums, parted, parted_optimizer, world, part=embedding_ops.MERGED_REST,
                                     own=own)
        assert torch.equal(parted, weight), own
        if kind == "adagrad":
            assert torch.equal(parted_optimizer.state, optimizer.state), own


def test_frozen_and_no_grad_lookups_are_plain_gathers():
    offsets, indices = _offsets((5, 7)), _indices(9, (5, 7))
    weight = torch.randn(12, 4, device=DEVICE, requires_grad=True)
    out = embedding_lookup(weight, offsets, indices)  # no optimizer: no gradient for the tables
    assert not out.requires_grad
    with torch.no_grad():
        inference = embedding_lookup(weight, offsets, indices, optimizer=SparseOptimizer("sgd", 0.1))
    assert torch.equal(out, inference) and torch.equal(out, embedding_lookup_reference(weight, offsets, indices))


def test_bad_inputs_are_named():
    offsets, indices = _offsets((5, 7)), _indices(3, (5, 7))
    weight = torch.randn(12, 4, device=DEVICE)
    with pytest.raises(TypeError, match="weight"):
        embedding_lookup(weight.long(), offsets, indices)
    with pytest.raises(ValueError, match="contiguous"):
        embedding_lookup(torch.randn(4, 12, device=DEVICE).t(), offsets, indices)
    with pytest.raises(TypeError, match="indices"):
        embedding_lookup(weight, offsets, indices.float())
    with pytest.raises(ValueError, match="tables \\+ 1 = 3"):
        embedding_lookup(weight, offsets[:2], indices)
    with pytest.raises(ValueError, match="indices must be"):
        embedding_lookup(weight, offsets, indices[:, 0])
    for wrong in ([0, 5, 13], [0, 8, 5], [-1, 5, 12]):  # past weight's 12 rows, falling, negative
        with pytest.raises(ValueError, match="table_offsets must rise"):
            embedding_lookup(weight, torch.tensor(wrong, device=DEVICE), indices)
    with pytest.raises(ValueError, match="kind"):
        embedding_lookup(weight, offsets, indices, optimizer=SparseOptimizer("adam", 0.1))
    with pytest.raises(ValueError, match="state"):
        embedding_lookup(weight, offsets, indices, optimizer=SparseOptimizer("adagrad", 0.1))
    with pytest.raises(ValueError, match="lr"):
        embedding_lookup(weight, offsets, indices, optimizer=SparseOptimizer("sgd", float("nan")))


def test_module_built_on_meta_then_materialised():
    """Large tables are built on the meta device, given memory by to_empty(), then loaded: the
    table offsets (not in the state dict) are formed again, so lookups read the right rows."""
    sizes = (5, 7, 3)
    reference = TableBatchedEmbedding(sizes, 4, device=DEVICE)
    with torch.device("meta"):
        built = TableBatchedEmbedding(sizes, 4)
    assert built.weight.is_meta and [tuple(built.table(t).shape) for t in range(3)] == [(5, 4), (7, 4), (3, 4)]
    built.to_empty(device=DEVICE)
    built.load_state_dict(reference.state_dict())
    indices = _indices(6, sizes)
    assert built.table_offsets.tolist() == [0, 5, 12, 15]
    assert torch.equal(built(indices), reference(indices))
    with pytest.raises(IndexError):
        built.table(3)


def test_optimizer_state_of_another_shape_is_refused():
    """copy_ would broadcast a state of the wrong shape over the tables' whole state."""
    tables = TableBatchedEmbedding([5, 7], 4, optimizer="adagrad", device=DEVICE)
    with pytest.raises(ValueError, match="optimizer state of shape"):
        tables.load_optimizer_state_dict({"kind": "adagrad", "state": torch.zeros(2, device=DEVICE)})


def test_module_state_dict_is_a_modulelist_of_embeddings():
    sizes = (3, 8, 5)
    tables = nn.ModuleList(nn.Embedding(n, 6) for n in sizes).to(DEVICE)
    batched = TableBatchedEmbedding(sizes, 6, optimizer="adagrad", lr=0.1, device=DEVICE)
    assert batched.state_dict().keys() == tables.state_dict().keys()
    batched.load_state_dict(tables.state_dict())
    indices = _indices(11, sizes)
    expected = torch.stack([table(indices[:, t]) for t, table in enumerate(tables)], 1)
    assert torch.equal(batched(indices).detach(), expected.detach())
    for t in range(3):
        assert torch.equal(batched.table(t), tables[t].weight.detach())

    batched(indices).square().sum().backward()  # an Adagrad step on the touched rows
    tables.load_state_dict(batched.state_dict())
    assert torch.equal(tables[1].weight, batched.table(1))
    saved = batched.optimizer_state_dict()
    assert saved["kind"] == "adagrad" and saved["state"].abs().sum() > 0
    other = TableBatchedEmbedding(sizes, 6, optimizer="adagrad", device=DEVICE).double()
    other.load_optimizer_state_dict(saved)
    assert other.optimizer.state is other.optimizer_state and other.optimizer_state.dtype == torch.float64
    assert torch.equal(other.optimizer_state, saved["state"].double())
    with pytest.raises(ValueError, match="adagrad"):
        TableBatchedEmbedding(sizes, 6, optimizer="sgd", device=DEVICE).load_optimizer_state_dict(saved)
    with pytest.raises(ValueError, match="positive"):
        TableBatchedEmbedding((3, 0), 6)


def test_under_torch_compile():
    """The lookup runs outside the compiled graph (its backward updates parameters) and gives
    the same update as without torch.compile."""
    torch._dynamo.reset()
    sizes = (6, 9)
    indices = _indices(13, sizes)
    modules = [TableBatchedEmbedding(sizes, 8, optimizer="sgd", lr=0.5, device=DEVICE) for _ in range(2)]
    modules[1].load_state_dict(modules[0].state_dict())
    start = modules[0].weight.detach().clone()
    backend = "inductor" if DEVICE == "cuda" else "aot_eager"
    compiled = torch.compile(lambda idx: modules[1](idx).tanh().sum(), backend=backend)
    modules[0](indices).tanh().sum().backward()
    compiled(indices).backward()
    assert not torch.equal(modules[0].weight.detach(), start)
    assert_close(modules[1].weight.detach() - start, modules[0].weight.detach() - start, torch.float32,
                 "compiled update")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
def test_kaggle_sized_batch_with_hot_rows(kind):
    """26 tables, batch 65536, Zipf-like indices (a few rows take a large share of each table:
    runs over hundreds of blocks), the default block sizes; fp32 tables against float64."""
    sizes = [1000, 50_000, 3, 200_000] * 6 + [10, 7]
    offsets = _offsets(sizes)
    batch = 65536
    ranks = torch.distributions.Pareto(torch.tensor(1.0), torch.tensor(1.2)).sample((batch, len(sizes)))
    indices = (ranks.to(DEVICE).long() - 1) % torch.tensor(sizes, device=DEVICE)
    weight64 = torch.randn(int(offsets[-1]), 16, dtype=torch.float64, device=DEVICE)
    state64 = torch.rand_like(weight64) if kind == "adagrad" else None
    reference = weight64.clone().requires_grad_()
    out_ref = embedding_lookup_reference(reference, offsets, indices)
    grad_out = torch.randn_like(out_ref) * 1e-2
    (out_ref * grad_out).sum().backward()
    expected = weight64.clone()
    sparse_update_reference(expected, reference.grad, SparseOptimizer(kind, 0.1, state=None if state64 is None
                                                                      else state64.clone()))
    weight = weight64.float().requires_grad_()
    optimizer = SparseOptimizer(kind, 0.1, state=None if state64 is None else state64.float())
    embedding_lookup(weight, offsets, indices, optimizer=optimizer).backward(grad_out.float())
    assert (indices[:, 0] == 0).float().mean() > 0.2  # a hot row indeed
    # the hot rows' updates are fp32 sums of 10^4+ terms: a looser bound than one product's
    change, expected_change = weight.detach().double() - weight64, expected - weight64
    assert rel_err(change, expected_change) < 1e-4


def test_a_new_lr_takes_effect():
    """lr lives in a device tensor rewritten in place: a changed lr is used by the next step."""
    offsets, indices = _offsets((4,)), torch.tensor([[1], [3], [1]], device=DEVICE)
    weight = torch.zeros(4, 2, dtype=torch.float64, device=DEVICE, requires_grad=True)
    optimizer = SparseOptimizer("sgd", 1.0)
    grad_out = torch.ones(3, 1, 2, dtype=torch.float64, device=DEVICE)
    embedding_lookup(weight, offsets, indices, optimizer=optimizer).backward(grad_out)
    optimizer.lr = 0.25
    embedding_lookup(weight, offsets, indices, optimizer=optimizer).backward(grad_out)
    assert weight.detach()[:, 0].tolist() == [0.0, -2.5, 0.0, -1.25]



@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
def test_overlapped_update_matches_the_serial_one(kind):
    """overlap=True runs the update on a side stream while the main stream goes on (here: long
    matmuls queued behind each backward, then the next lookup, which must wait for it); after
    3 steps the tables are the same bits as with the update on the main stream, and match the
    float64 reference."""
    sizes = [5000, 3, 70_000, 800]
    offsets = _offsets(sizes)
    start = torch.randn(int(offsets[-1]), 16, dtype=torch.float64, device=DEVICE)
    steps = [(_indices(4096, sizes, hot=True), torch.randn(4096, len(sizes), 16, device=DEVICE) * 1e-2)
             for _ in range(3)]
    busy = torch.randn(2048, 2048, device=DEVICE) / 50
    results = []
    for overlap in (False, True):
        weight = start.float().requires_grad_()
        optimizer = SparseOptimizer(kind, 0.1, state=torch.full_like(weight, 0.5).detach() if kind == "adagrad"
                                    else None, overlap=overlap)
        for indices, grad_out in steps:
            embedding_lookup(weight, offsets, indices, optimizer=optimizer).backward(grad_out)
            assert (optimizer._pending is not None) == overlap
            for _ in range(4):  # main-stream work the side stream's update runs alongside
                busy = torch.tanh(busy @ busy)
        optimizer.wait()
        assert optimizer._pending is None
        results.append(weight.detach().clone())
    assert torch.equal(results[0], results[1])
    expected = start.clone()
    state64 = torch.full_like(start, 0.5) if kind == "adagrad" else None
    for indices, grad_out in steps:
        reference = expected.clone().requires_grad_()
        (embedding_lookup_reference(reference, offsets, indices) * grad_out.double()).sum().backward()
        sparse_update_reference(expected, reference.grad, SparseOptimizer(kind, 0.1, state=state64))
    assert rel_err(results[1].double() - start, expected - start) < 1e-4
