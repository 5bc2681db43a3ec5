"""Table-batched embedding lookup with the optimizer fused into the backward (kernels/embedding.py).

    fusedmlp.embedding_lookup(weight, table_offsets, indices, optimizer=None) -> [B, T, D]
        weight [R, D] (every table stacked), table_offsets [T + 1] int64 (table t owns rows
        table_offsets[t] .. table_offsets[t + 1] - 1), indices [B, T] integer (row within its table).

With a ``SparseOptimizer`` (SGD or Adagrad) and autograd recording, the backward applies the
update to the rows the batch touched, in place, and gives ``weight`` no gradient: the dense
gradient of the tables (R x D, mostly zeros) is never formed. This is how FBGEMM's
table-batched embeddings train recommendation models. Without an optimizer the lookup is a
plain gather (no gradient for the tables).

Under torch.compile the lookup runs outside the graph (a graph break): its backward updates
parameters in place, which compiled graphs do not express.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..kernels.embedding import (MERGED_ALL, MERGED_OWN_ONLY, MERGED_REST, OPTIMIZER_ADAGRAD, OPTIMIZER_SGD,
                                 embedding_carried_update_kernel,
                                 embedding_distinct_keys_kernel, embedding_gather_kernel,
                                 embedding_merge_links_kernel, embedding_merged_update_kernel,
                                 embedding_segment_update_kernel)
from .._distributed import agreed_length, gather_padded, peer_gather, release, world_size
from ..kernels.launch import launch
from ._common import acc_dtypes, cdiv, check_tensor, kernel_backward, next_power_of_2, use_triton

__all__ = ["SparseOptimizer", "embedding_lookup", "embedding_lookup_reference", "sparse_update_reference"]

_KINDS = {"sgd": OPTIMIZER_SGD.value, "adagrad": OPTIMIZER_ADAGRAD.value}
_GATHER_ELEMENTS = 4096  # elements of the [lookups, D_PAD] tile of a gather program
_BLOCK_P = 128           # sorted lookups per program of the update
_W_BLOCKS = 64           # earlier blocks read at once when finishing a run that crosses blocks
_DISTINCT_BLOCK = 1024   # sorted lookups per program of the distinct-keys listing


@dataclass
class SparseOptimizer:
    """The update applied to the touched rows in the backward.

    kind: "sgd" (w -= lr g) or "adagrad" (s += g * g; w -= lr g / (sqrt(s) + eps), elementwise
        like torch.optim.Adagrad without lr decay or weight decay). The update is applied by
        each lookup's backward, with that lookup's gradient: one lookup per optimizer step
        (look several features' tables up in one call). Two lookups before one backward (or a
        second backward of a retained graph) update twice; for SGD that is the step of the
        summed gradient, for Adagrad two steps, not torch.optim's one step of the sum.
    state: Adagrad's sum of squares, a tensor shaped like the weight (updated in place).
    group: a ``torch.distributed`` process group (or ``dist.group.WORLD``) for data-parallel
        training with replicated tables: each rank sums its lookups' gradients per row, the
        ranks gather each other's (row, sum) lists, and each rank applies the update of their
        total, in rank order, so the replicas stay identical (scale each rank's loss so that
        the sum is the global loss).
    table_rows: the row count of each table (host ints), optional: with ``group`` it bounds
        the rows one batch can touch (the sum over tables of min(batch, rows)), which is the
        length of the exchanged lists; without it the bound is the number of lookups.
    overlap: on a GPU, run the update (and the ranks' exchange) on a side stream, so that it
        overlaps whatever the backward does after it (DLRM: the bottom MLP's backward, the
        dense all-reduce, the dense optimizer step); its part that needs the keys alone (the
        sort, the ranks' key exchange) runs there during the forward, alongside the rest of
        the forward and the backward before the lookup's. The tables are then final only after
        ``wait()``, which makes the current stream wait for the update; the next lookup
        through this optimizer waits by itself. Call ``wait()`` before reading the tables in
        any other way, and before the end of a CUDA-graph capture.
    """

    kind: str
    lr: float
    eps: float = 1e-10
    state: torch.Tensor | None = None
    group: object = None
    table_rows: tuple | None = None
    overlap: bool = False
    _hyper: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _streams: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _pending: object = field(default=None, init=False, repr=False, compare=False)
    _exchanges: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # _distributed.peer_gather

    def side_stream(self, device, role: str = "update") -> torch.cuda.Stream:
        """The stream an overlapped update runs on (one per device); ``role="exchange"``: the
        update's second stream, where the rows only this rank holds are updated while the
        other ranks' sums arrive."""
        key = (role, torch.device(device))
        if key not in self._streams:
            self._streams[key] = torch.cuda.Stream(device)
        return self._streams[key]

    def wait(self) -> None:
        """Make the current stream wait for an update still running on the side stream."""
        if self._pending is not None:
            torch.cuda.current_stream(self._pending.device).wait_stream(self._pending)
            self._pending = None

    def hyper(self, dtype: torch.dtype, device) -> torch.Tensor:
        """[lr, eps] as a device tensor of ``dtype``, one per (dtype, device), rewritten in place
        when lr or eps change: later steps copy nothing from the host, and a step captured in a
        CUDA graph replays with the current values."""
        key = (dtype, torch.device(device))
        values = (float(self.lr), float(self.eps))
        cached = self._hyper.get(key)
        if cached is None:
            cached = self._hyper[key] = [values, torch.tensor(values, dtype=dtype, device=device)]
        elif cached[0] != values:
            cached[1].copy_(torch.tensor(values, dtype=dtype))
            cached[0] = values
        return cached[1]

    def check(self, weight: torch.Tensor) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"optimizer kind must be one of {sorted(_KINDS)}, got {self.kind!r}")
        for name in ("lr", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"optimizer {name} must be a finite number >= 0, got {value!r}")
        if self.kind == "adagrad":
            if not isinstance(self.state, torch.Tensor) or self.state.shape != weight.shape:
                raise ValueError(f"adagrad needs a state tensor shaped like the weight {tuple(weight.shape)}")
            if self.state.device != weight.device or not self.state.is_floating_point():
                raise ValueError("the adagrad state must be a floating tensor on the weight's device")
            if not self.state.is_contiguous():
                raise ValueError("the adagrad state must be contiguous")


def embedding_lookup_reference(weight: torch.Tensor, table_offsets: torch.Tensor, indices: torch.Tensor):
    """Plain PyTorch: one gather with the table offsets added (weight gets a dense gradient)."""
    return F.embedding(indices.long() + table_offsets[:-1].to(indices.device), weight)


def _apply_rows(weight, rows, grad, optimizer: SparseOptimizer) -> None:
    """The optimizer on weight[rows] (distinct rows) with their summed gradients ``grad``."""
    grad = grad.to(torch.promote_types(grad.dtype, torch.float32))
    if optimizer.kind == "adagrad":
        state = optimizer.state[rows].to(grad.dtype) + grad * grad
        optimizer.state[rows] = state.to(optimizer.state.dtype)
        step = grad / (optimizer.state[rows].to(grad.dtype).sqrt() + optimizer.eps)
    else:
        step = grad
    weight[rows] = (weight[rows].to(grad.dtype) - optimizer.lr * step).to(weight.dtype)


@torch.no_grad()
def sparse_update_reference(weight, grad_weight, optimizer: SparseOptimizer) -> None:
    """The kernels' update from a dense gradient of the tables (rows with a zero gradient left alone)."""
    rows = grad_weight.ne(0).any(dim=1).nonzero().squeeze(1)
    _apply_rows(weight, rows, grad_weight[rows], optimizer)


def _pad(dim: int) -> int:
    return next_power_of_2(dim)


def _gather(weight, table_offsets, indices, want_keys: bool):
    batch, tables = indices.shape
    rows, dim = weight.shape
    lookups = batch * tables
    out = weight.new_empty((batch, tables, dim))
    key_dtype = torch.int32 if rows < 2**31 - 1 else torch.int64
    keys = torch.empty(lookups if want_keys else 0, dtype=key_dtype, device=weight.device)
    if lookups == 0:
        return out, keys
    if not use_triton(weight):  # CPU without the interpreter: the same in PyTorch
        flat = indices.long() + table_offsets[:-1].long()
        outside = _out_of_table(table_offsets, indices) | (flat < 0) | (flat >= rows)
        flat = torch.where(outside, rows, flat)
        out.copy_(weight[flat.clamp(max=rows - 1)].masked_fill(outside.unsqueeze(-1), 0))
        keys.copy_(flat.flatten()[:keys.numel()])
        return out, keys
    d_pad = _pad(dim)
    block_n = max(1, min(256, _GATHER_ELEMENTS // d_pad))
    launch(embedding_gather_kernel, (cdiv(lookups, block_n),), weight, table_offsets, indices, out,
           keys if want_keys else out, lookups, tables, rows, indices.stride(0), indices.stride(1), weight.stride(0),
           D=dim, D_PAD=d_pad, BLOCK_N=block_n, WRITE_KEYS=want_keys, num_warps=4)
    return out, keys


def _segment_launches(sorted_keys, order, grad, weight, state, rows, hyper, kind: str) -> None:
    """Steps 2 and 3 of the backward (kernels/embedding.py) on sorted keys and their lookups'
    gradient rows (``order``: the sort's permutation into ``grad``)."""
    lookups, dim = grad.shape
    d_pad = _pad(dim)
    blocks = cdiv(lookups, _BLOCK_P)
    acc_tl, acc_torch = acc_dtypes(weight.dtype)
    tail = torch.empty((blocks, d_pad), dtype=acc_torch, device=weight.device)
    head = torch.empty_like(tail)
    last_key = torch.empty(blocks, dtype=torch.int64, device=weight.device)
    common = (rows, hyper, weight.stride(0), state.stride(0))
    meta = dict(D=dim, D_PAD=d_pad, BLOCK_P=_BLOCK_P, OPTIMIZER=_KINDS[kind], ACC_DTYPE=acc_tl, num_warps=4)
    launch(embedding_segment_update_kernel, (blocks,), sorted_keys, order, grad, weight, state, tail, head, last_key,
           lookups, *common, **meta)
    launch(embedding_carried_update_kernel, (blocks,), sorted_keys, tail, head, last_key, weight, state,
           lookups, *common, W_BLOCKS=_W_BLOCKS, **meta)


def _row_bound(lookups: int, batch: int, optimizer: SparseOptimizer) -> int:
    """Most distinct keys ``lookups`` lookups of ``batch`` rows can hold, plus one for the
    out-of-table key: a fixed length for the exchanged lists (a captured step has fixed shapes)."""
    if optimizer.table_rows is None:
        return lookups + 1
    return min(lookups, sum(min(batch, rows) for rows in optimizer.table_rows)) + 1


def _distinct_runs(keys, rows: int, distinct):
    """The keys' stable sort as runs: ``(run [L], order [L])``; ``run`` numbers each sorted
    lookup's key among the distinct keys, ``order`` is the sort's permutation of the lookups.
    Writes the ascending distinct keys into ``distinct`` [bound] (contiguous, the keys' dtype),
    its unused tail padded with the out-of-table key ``rows``."""
    sorted_keys, order = torch.sort(keys, stable=True)  # stable: a fixed order of additions
    starts = torch.ones_like(sorted_keys, dtype=torch.bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    run = torch.cumsum(starts, 0, dtype=torch.int32) - 1
    distinct.fill_(rows)
    if keys.numel():
        launch(embedding_distinct_keys_kernel, (cdiv(keys.numel(), _DISTINCT_BLOCK),), sorted_keys, run,
               distinct, keys.numel(), BLOCK=_DISTINCT_BLOCK, num_warps=4)
    return run, order


def _sum_runs(grad, run, order, sums) -> None:
    """The gradients summed per run into ``sums`` [bound, D] (zeros, grad's dtype), added in
    the accumulation dtype and rounded once. The update kernels do
    the summing, deterministically: SGD with lr = -1 into the zeros (each run's row written once)."""
    if run.numel():
        minus_one = grad.new_full((2,), -1.0, dtype=acc_dtypes(grad.dtype)[1])  # [lr, eps]; a fill, no host copy
        _segment_launches(run, order, grad, sums, sums, sums.shape[0], minus_one, "sgd")


def _sums_per_row(grad, keys, rows: int, bound: int):
    """This rank's gradients summed per key: ``(keys [bound], sums [bound, D])``, the sums
    added in the accumulation dtype and rounded once to grad's dtype (what the ranks send), the
    unused tail padded with the out-of-table key ``rows``."""
    out_keys = keys.new_empty((bound,))
    if not use_triton(grad):
        out_keys.fill_(rows)
        distinct, inverse = torch.unique(keys, return_inverse=True)
        out_keys[:len(distinct)] = distinct
        acc_torch = acc_dtypes(grad.dtype)[1]
        sums = grad.new_zeros((bound, grad.shape[1]), dtype=acc_torch).index_add_(0, inverse, grad.to(acc_torch))
        return out_keys, sums.to(grad.dtype)
    run, order = _distinct_runs(keys, rows, out_keys)
    sums = grad.new_zeros((bound, grad.shape[1]))
    _sum_runs(grad, run, order, sums)
    return out_keys, sums


@dataclass
class _UpdatePlan:
    """What the update needs from the keys alone, made by the forward: on the side stream when
    the update overlaps, where it runs alongside the dense forward, so that the backward's
    update starts from the gradients (the sort of 1.7M keys took 120 us of DLRM's backward).
    One rank: ``segment_keys`` are the sorted keys. Several: the runs of ``_distinct_runs``,
    the ranks' distinct keys, already gathered (``exchanged_keys`` [world * longest]), where
    each other rank holds each of their rows (``links``: ``_merge_links``), and the zeroed
    buffer of this rank's sums (``sums`` [longest, D], the table's dtype). ``keys_exchange`` /
    ``sums_exchange``: the ``PeerGather`` the keys went through and whose slot ``sums`` is
    (None where NCCL carries them); released when the plan is dropped, once the update that
    reads them is queued."""

    order: torch.Tensor
    segment_keys: torch.Tensor
    exchanged_keys: torch.Tensor | None = None
    links: torch.Tensor | None = None
    sums: torch.Tensor | None = None
    keys_exchange: object = None
    sums_exchange: object = None

    def __del__(self):
        release(self.keys_exchange, self.sums_exchange)


def _update_plan(keys, weight, batch: int, optimizer: SparseOptimizer) -> _UpdatePlan | None:
    """The plan of the Triton path (None on PyTorch's, which does it all in the backward)."""
    if not use_triton(keys):
        return None
    if world_size(optimizer.group) == 1:
        sorted_keys, order = torch.sort(keys, stable=True)  # stable: a fixed order of additions
        return _UpdatePlan(order, sorted_keys)
    # each rank sends one (row, sum) per distinct key, not one per lookup (a third as much at
    # DLRM's Kaggle table sizes and 65536 rows per rank); the out-of-table key pads the list.
    # Through symmetric memory where it can (each rank writes its list into its slot of the
    # gathered array: _distributed.PeerGather), else NCCL.
    rows, dim = weight.shape
    group, cache = optimizer.group, optimizer._exchanges
    longest = agreed_length(_row_bound(keys.numel(), batch, optimizer), keys.device, group)
    keys_exchange = peer_gather(cache, "keys", group, longest, (), keys.dtype, keys.device)
    if keys_exchange is not None:
        run, order = _distinct_runs(keys, rows, keys_exchange.writable())
        exchanged = keys_exchange.gather()
    else:
        distinct = keys.new_empty((longest,))
        run, order = _distinct_runs(keys, rows, distinct)
        exchanged = gather_padded(distinct, rows, group, longest)[0]
    sums_exchange = peer_gather(cache, "sums", group, longest, (dim,), weight.dtype, weight.device)
    sums = sums_exchange.writable().zero_() if sums_exchange is not None else weight.new_zeros((longest, dim))
    world = world_size(group)
    return _UpdatePlan(order, run, exchanged, _merge_links(exchanged, rows, world), sums, keys_exchange,
                       sums_exchange)


def _state_and_hyper(weight, optimizer: SparseOptimizer):
    """What the update kernels take besides the weight: the optimizer state (the weight itself
    stands in for SGD, which has none) and the [lr, eps] device tensor."""
    state = optimizer.state if optimizer.kind == "adagrad" else weight
    return state, optimizer.hyper(acc_dtypes(weight.dtype)[1], weight.device)


def _merge_links(keys, rows: int, world: int) -> torch.Tensor:
    """Where each rank holds the row of every entry of the gathered lists keys [world * L]
    (each rank's L ascending and unique but for the padding key ``rows``): links
    [world, world * L] int32, a position in that rank's list or -1 (kernels/embedding.py).
    It needs the keys alone: the forward makes it, so that the backward's update does not search."""
    length = keys.numel() // world
    links = torch.empty((world, keys.numel()), dtype=torch.int32, device=keys.device)
    if length:
        launch(embedding_merge_links_kernel, (world * cdiv(length, _BLOCK_P),), keys, links, length, rows,
               WORLD=world, SEARCH_STEPS=max(1, length.bit_length()), BLOCK_P=_BLOCK_P, num_warps=4)
    return links


def _merged_update(keys, sums, weight, optimizer: SparseOptimizer, world: int, links=None, part=MERGED_ALL,
                   own: int = 0) -> None:
    """The update from the ranks' gathered (row, sum) lists: keys [world * L], each rank's L
    ascending and unique but for the padding key R; sums [world * L, D] (kernels/embedding.py);
    ``links``: ``_merge_links`` of the keys, made here when not given. ``part``: all of it, or
    the rows rank ``own`` alone holds (MERGED_OWN_ONLY: only its sums are read), or the rest."""
    rows, dim = weight.shape
    length = keys.numel() // world
    if length == 0:
        return
    if links is None:
        links = _merge_links(keys, rows, world)
    state, hyper = _state_and_hyper(weight, optimizer)
    lists = 1 if part == MERGED_OWN_ONLY else world
    launch(embedding_merged_update_kernel, (lists * cdiv(length, _BLOCK_P),), keys, links, sums.contiguous(),
           weight, state, length, rows, hyper, weight.stride(0), state.stride(0), own,
           WORLD=world, D=dim, D_PAD=_pad(dim), BLOCK_P=_BLOCK_P, OPTIMIZER=_KINDS[optimizer.kind],
           ACC_DTYPE=acc_dtypes(weight.dtype)[0], PART=part, num_warps=4)


def _sparse_update(grad_out, keys, weight, optimizer: SparseOptimizer, plan: _UpdatePlan | None = None) -> None:
    """The optimizer step of the lookups ``keys`` [B * T] with gradients ``grad_out`` [B, T, D]
    (``plan``: the forward's ``_update_plan`` of these keys, made here when not given)."""
    rows, dim = weight.shape
    grad = grad_out.reshape(keys.numel(), dim)
    if grad.dtype != weight.dtype:
        grad = grad.to(weight.dtype)
    if use_triton(weight):
        plan = plan or _update_plan(keys, weight, grad_out.shape[0], optimizer)
        state, hyper = _state_and_hyper(weight, optimizer)
        if plan.exchanged_keys is None:
            if keys.numel():
                _segment_launches(plan.segment_keys, plan.order, grad.contiguous(), weight, state, rows, hyper,
                                  optimizer.kind)
            return
        # the sums come in the table's dtype: for bf16 tables half the bytes of fp32 sums, at the
        # cost of one rounding of each rank's sum (eager PyTorch sums bf16 sparse gradients in bf16)
        _sum_runs(grad.contiguous(), plan.segment_keys, plan.order, plan.sums)
        # the ranks' lists are sorted: merged as they are, no second sort
        world = world_size(optimizer.group)
        if plan.sums_exchange is None:  # as long as the longest rank's list already: no padding, no lengths exchanged
            sums = gather_padded(plan.sums, 0, optimizer.group, longest=plan.sums.shape[0])[0]
            _merged_update(plan.exchanged_keys, sums, weight, optimizer, world, plan.links)
            return
        # the copy engines bring the other ranks' sums in while the SMs update the rows no other
        # rank holds, which need this rank's sums alone; then the rest
        exchange = plan.sums_exchange
        current, aside = torch.cuda.current_stream(weight.device), optimizer.side_stream(weight.device, "exchange")
        aside.wait_stream(current)
        with torch.cuda.stream(aside):
            _merged_update(plan.exchanged_keys, exchange.gathered, weight, optimizer, world, plan.links,
                           MERGED_OWN_ONLY, exchange.rank)
        sums = exchange.gather()
        current.wait_stream(aside)
        _merged_update(plan.exchanged_keys, sums, weight, optimizer, world, plan.links, MERGED_REST, exchange.rank)
        return
    world = world_size(optimizer.group)
    if world > 1:
        keys, grad = _sums_per_row(grad, keys, rows, _row_bound(keys.numel(), grad_out.shape[0], optimizer))
        keys, longest = gather_padded(keys, rows, optimizer.group)
        grad = gather_padded(grad, 0, optimizer.group, longest)[0]
    if keys.numel() == 0:
        return
    touched = keys < rows
    rows_hit, inverse = torch.unique(keys[touched].long(), return_inverse=True)
    summed = grad.new_zeros((len(rows_hit), dim), dtype=acc_dtypes(weight.dtype)[1])
    _apply_rows(weight, rows_hit, summed.index_add_(0, inverse, grad[touched].to(summed.dtype)), optimizer)


def _aside(optimizer: SparseOptimizer, device, work, *used: torch.Tensor):
    """``work()`` on the optimizer's side stream, after what the current stream has queued;
    ``used``: tensors of the current stream that it reads. The side stream is left pending
    (joined by ``optimizer.wait()``: the next lookup, or the caller's)."""
    side = optimizer.side_stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        result = work()
    # made on the current stream and freed there once autograd lets go of them: the allocator
    # must not hand their memory out again before the side stream is done with them
    for tensor in used:
        tensor.record_stream(side)
    optimizer._pending = side
    return result


class _LookupFunction(torch.autograd.Function):
    """Forward: the gather, the keys and the update's plan. Backward: the fused update; no
    gradient flows back."""

    @staticmethod
    def forward(ctx, weight, table_offsets, indices, optimizer):
        out, keys = _gather(weight, table_offsets, indices, want_keys=True)
        ctx.save_for_backward(keys)
        # the weight is updated in place by the backward, so it is held, not saved (no version check)
        ctx.weight, ctx.optimizer = weight, optimizer
        plan = lambda: _update_plan(keys, weight, indices.shape[0], optimizer)  # noqa: E731
        ctx.plan = _aside(optimizer, keys.device, plan, keys) if _overlaps(optimizer, keys) else plan()
        return out

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_out):
        (keys,) = ctx.saved_tensors
        optimizer, plan = ctx.optimizer, ctx.plan
        update = lambda: _sparse_update(grad_out, keys, ctx.weight, optimizer, plan)  # noqa: E731
        # a previous backward's update (two backwards without a lookup between), or this plan
        optimizer.wait()
        if _overlaps(optimizer, grad_out):
            _aside(optimizer, grad_out.device, update, grad_out, keys)
        else:
            update()
        ctx.plan = None
        return None, None, None, None


def _overlaps(optimizer: SparseOptimizer, t: torch.Tensor) -> bool:
    return optimizer.overlap and t.is_cuda


def _check(weight, table_offsets, indices, optimizer, check_bounds: bool):
    check_tensor(weight, "weight", ndim=2)
    if not weight.is_contiguous():
        raise ValueError("weight must be contiguous (the tables stacked row after row)")
    for name, t in (("table_offsets", table_offsets), ("indices", indices)):
        if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name} must be an int32 or int64 tensor, got "
                            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.device != weight.device:
            raise ValueError(f"{name} is on {t.device} but weight is on {weight.device}")
    if indices.dim() != 2:
        raise ValueError(f"indices must be [batch, tables], got shape {tuple(indices.shape)}")
    if table_offsets.dim() != 1 or table_offsets.numel() != indices.shape[1] + 1:
        raise ValueError(f"table_offsets must hold tables + 1 = {indices.shape[1] + 1} offsets, "
                         f"got shape {tuple(table_offsets.shape)}")
    if optimizer is not None:
        if not isinstance(optimizer, SparseOptimizer):
            raise TypeError(f"optimizer must be a SparseOptimizer or None, got {type(optimizer).__name__}")
        optimizer.check(weight)
    if check_bounds and indices.numel():  # (one host sync for both checks)
        bad = _out_of_table(table_offsets, indices)
        offsets_wrong = ((table_offsets[0] < 0) | (table_offsets[-1] != weight.shape[0])
                         | (table_offsets[1:] < table_offsets[:-1]).any())
        offsets_wrong, outside = torch.stack([offsets_wrong, bad.any()]).tolist()
        if offsets_wrong:
            raise ValueError(f"table_offsets must rise from >= 0 to the rows of weight ({weight.shape[0]}), got "
                             f"{table_offsets.tolist()}")
        if outside:
            row, table = (int(v) for v in bad.nonzero()[0])
            rows = int(table_offsets[table + 1] - table_offsets[table])
            raise IndexError(f"indices[{row}, {table}] = {int(indices[row, table])} is outside table {table} "
                             f"({rows} rows)")


def embedding_lookup(weight: torch.Tensor, table_offsets: torch.Tensor, indices: torch.Tensor, *,
                     optimizer: SparseOptimizer | None = None, check_bounds: bool = True) -> torch.Tensor:
    """One lookup per (row, table) from stacked tables, in one kernel.

    Args:
        weight: ``[R, D]`` contiguous, every table's rows stacked; fp16, bf16, fp32 or fp64.
        table_offsets: ``[T + 1]`` int64 (or int32), the first row of each table, then R.
        indices: ``[B, T]`` int32/int64, the row of each lookup within its table.
        optimizer: a ``SparseOptimizer``: when autograd records (grad mode on and
            ``weight.requires_grad``), the backward updates the touched rows of ``weight`` in
            place with it and ``weight`` gets no ``.grad``. None: a gather without a gradient
            for the tables.
        check_bounds: raise IndexError for an index outside its table, and ValueError for
            ``table_offsets`` that do not rise from >= 0 to R (costs one host sync).
            Off, such a lookup reads zeros and its gradient is dropped; memory outside the
            table is never touched.

    Returns:
        ``[B, T, D]``: ``out[b, t] = weight[table_offsets[t] + indices[b, t]]``.
    """
    _check(weight, table_offsets, indices, optimizer, check_bounds)
    if optimizer is not None:
        optimizer.wait()  # an overlapped update of the previous step must land before the gather
    trains = optimizer is not None and weight.requires_grad and torch.is_grad_enabled()
    if trains:
        return _lookup_function(weight, table_offsets, indices, optimizer)
    with torch.no_grad():
        return _gather(weight, table_offsets, indices, want_keys=False)[0]


@torch.compiler.disable
def _lookup_function(weight, table_offsets, indices, optimizer):
    return _LookupFunction.apply(weight, table_offsets, indices, optimizer)


def _out_of_table(table_offsets, indices):
    sizes = (table_offsets[1:] - table_offsets[:-1]).to(indices.dtype)
    return (indices < 0) | (indices >= sizes)
