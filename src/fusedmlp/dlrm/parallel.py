"""Data-parallel DLRM training: every rank holds a replica of the whole model and trains on its
share of each global batch (``torchrun --nproc-per-node N -m fusedmlp.dlrm.train`` or
``fusedmlp dlrm train --nproc N``).

One global step: the global batch (``world x --batch-size`` rows of the epoch's permutation)
is split into ``world`` contiguous, near-equal shares, one per rank. Each rank's loss is
``sum of its rows' BCE / global rows``, so the ranks' losses add up to the global mean and
gradients are summed, never averaged:
    dense parameters    an all-reduce (sum) of their gradients: with ``reduce_early``, one per
                        module, started by the backward as soon as the module's gradients
                        are all there (in place, when they lie back to back in one buffer: the
                        fused MLP's), the rest flattened into one after the backward
    fused tables        the embedding backward sums each rank's gradients per row, gathers
                        every rank's (row, sum) lists and each rank applies the same update
                        (``SparseOptimizer.group``): the replicas stay identical without ever
                        forming a table gradient
    eager tables        dense gradients join the all-reduce; sparse ones are gathered and summed
The result is the update of one process training on the global batch, up to the order of
floating-point additions. Validation splits its rows the same way and gathers the predictions.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .._distributed import gather_padded, world_size


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def one_buffer(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """A flat view of the memory ``tensors`` fill when they lie back to back in one buffer
    (contiguous, one dtype, no gap or overlap, in any order), else None."""
    first = tensors[0]
    storage = first.untyped_storage()
    for t in tensors:
        if (t.untyped_storage().data_ptr() != storage.data_ptr() or t.dtype != first.dtype
                or not t.is_contiguous()):
            return None
    spans = sorted((t.storage_offset(), t.numel()) for t in tensors)
    start = end = spans[0][0]
    for offset, numel in spans:
        if offset != end:
            return None
        end += numel
    return first.new_empty((0,)).set_(storage, start, (end - start,), (1,))


@dataclass(eq=False)
class _EarlyGroup:
    """One module's dense parameters, whose gradients are all-reduced once all have arrived."""

    params: list
    arrived: int = 0
    work: object = None


class DataParallel:
    """The rank's place in the process group and the collectives of a data-parallel step; with
    one process (``world == 1``) every method is the single-process computation."""

    def __init__(self, group=None):
        initialised = dist.is_available() and dist.is_initialized()
        self.group = (group or dist.group.WORLD) if initialised else None
        self.world = world_size(self.group)
        self.rank = dist.get_rank(self.group) if initialised else 0
        self._table_group = None
        self._early: dict[int, list[_EarlyGroup]] = {}  # id(model) -> its modules' groups

    @property
    def table_group(self):
        """The process group of the fused tables' exchange: the same ranks with a communicator of
        their own, so that the exchange's all-gathers (issued from the tables' side stream in
        the backward) and the dense all-reduce do not queue behind each other in one NCCL
        stream but run side by side. Made on first use (every rank builds its optimizer at
        the same point); None with one process."""
        if self.world > 1 and self._table_group is None:
            self._table_group = dist.new_group(dist.get_process_group_ranks(self.group))
        return self._table_group

    @classmethod
    def from_environment(cls, device_name: str) -> tuple["DataParallel", str]:
        """Join the process group torchrun describes (NCCL on GPUs, gloo on CPUs) and pick this
        rank's device; a single process when not launched by torchrun."""
        if not launched_by_torchrun():
            return cls(), device_name
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = device_name in ("auto", "cuda") and torch.cuda.is_available()
        if device_name.startswith("cuda") and not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA GPU here")
        if cuda:
            torch.cuda.set_device(local_rank)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(minutes=30),
                                    device_id=torch.device("cuda", local_rank) if cuda else None)
        return cls(), (f"cuda:{local_rank}" if cuda else "cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous share of ``rows`` (shares differ by at most one row)."""
        return rows if self.world == 1 else torch.tensor_split(rows, self.world)[self.rank]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, global_rows: int) -> torch.Tensor:
        """The rank's part of the global mean BCE loss (the ranks' parts sum to it)."""
        if self.world == 1:
            return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="sum") / global_rows

    def total(self, value: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (a copy; e.g. the global loss from the ranks' parts)."""
        value = value.detach().clone()
        if self.world > 1:
            dist.all_reduce(value, group=self.group)
        return value

    def broadcast_model(self, model: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank (replicas start identical)."""
        if self.world == 1:
            return
        with torch.no_grad():
            for tensor in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(tensor, 0, group=self.group)

    def reduce_early(self, model: torch.nn.Module) -> None:
        """From the next backward on, start each child module's all-reduce as soon as the
        backward has accumulated all of its dense gradients (a post-accumulate-grad hook per
        parameter), so that it runs while the backward goes on with the other modules (DLRM:
        the top MLP's, during the interaction's and the bottom MLP's backward). Only gradients
        that lie back to back in one buffer (``one_buffer``: the fused MLP's, views of one
        flat buffer) are reduced so, in place; others wait for ``reduce_gradients``, which
        must follow every backward (gradients accumulated over two backwards before it would
        be reduced twice: an error). No-op with one process."""
        if self.world == 1 or id(model) in self._early:
            return
        groups = self._early[id(model)] = []
        for child in model.children():
            params = [p for p in child.parameters() if p.requires_grad]
            if params:
                group = _EarlyGroup(params)
                for p in params:
                    p.register_post_accumulate_grad_hook(functools.partial(self._arrived, group))
                groups.append(group)

    def _arrived(self, group: _EarlyGroup, param: torch.Tensor) -> None:
        if group.work is not None:
            raise RuntimeError("a backward accumulated into gradients that an earlier backward's all-reduce "
                               "already started on: call reduce_gradients after every backward")
        if param.grad is None:  # (the fused tables' weight: updated in the backward, no gradient)
            return
        group.arrived += 1
        if group.arrived == len(group.params) and not any(p.grad.is_sparse for p in group.params):
            flat = one_buffer([p.grad for p in group.params])
            if flat is not None:
                group.work = dist.all_reduce(flat, group=self.group, async_op=True)

    def reduce_gradients(self, model: torch.nn.Module) -> None:
        """Sum every gradient over the ranks: wait for the all-reduces the backward started
        (``reduce_early``), then the other dense gradients in one flat all-reduce."""
        if self.world == 1:
            return
        reduced = set()
        for group in self._early.get(id(model), ()):
            if group.work is not None:
                group.work.wait()  # the current stream waits; the host does not
                reduced.update(id(p) for p in group.params)
            group.work, group.arrived = None, 0
        dense = [p.grad for p in model.parameters()
                 if p.grad is not None and not p.grad.is_sparse and id(p) not in reduced]
        if dense:
            flat = torch.cat([g.reshape(-1) for g in dense])
            dist.all_reduce(flat, group=self.group)
            # one copy kernel back into every gradient (a captured step had one node per tensor)
            parts = flat.split([g.numel() for g in dense])
            torch._foreach_copy_(dense, [part.view_as(g) for part, g in zip(parts, dense)])
        for p in model.parameters():
            if p.grad is not None and p.grad.is_sparse:
                p.grad = self._sum_sparse(p.grad)

    def _sum_sparse(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.coalesce()
        rows, longest = gather_padded(grad.indices()[0], 0, self.group)
        values = gather_padded(grad.values(), 0, self.group, longest)[0]  # padding: row 0 + 0
        return torch.sparse_coo_tensor(rows.unsqueeze(0), values, grad.shape).coalesce()

    def gather_predictions(self, labels: torch.Tensor, probabilities: torch.Tensor):
        """Every rank's (labels, probabilities), concatenated in rank order (1-D each)."""
        if self.world == 1:
            return labels, probabilities
        pairs = torch.stack([labels.double(), probabilities.double()], dim=1)
        pairs = gather_padded(pairs, -1.0, self.group)[0]
        pairs = pairs[pairs[:, 0] >= 0]  # padding carries the label -1
        return pairs[:, 0], pairs[:, 1]

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier(group=self.group)

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
