"""``TableBatchedEmbedding``: many embedding tables in one module, one lookup kernel, and the
optimizer fused into the backward (ops/embedding.py)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ..ops.embedding import SparseOptimizer, embedding_lookup

__all__ = ["TableBatchedEmbedding"]


class TableBatchedEmbedding(nn.Module):
    """T embedding tables of one width, stored stacked in one ``[sum(rows), D]`` weight.

    ``forward(indices [B, T]) -> [B, T, D]``: ``out[:, t] = table t at indices[:, t]``.

    Training: the module carries its own optimizer (``optimizer="sgd"`` or ``"adagrad"``, with
    ``lr``, ``eps``): the backward updates the touched rows in place and ``weight.grad`` stays
    None, so leave ``weight`` out of your dense optimizer (``dense_parameters`` helpers do).
    Adagrad's sum of squares is the buffer ``optimizer_state`` (not in the state dict; save it
    with ``optimizer_state_dict()``). ``optimizer=None`` freezes the tables. Each call's
    backward applies its own update: call the module once per optimizer step (two calls before
    one backward take two Adagrad steps; see ``SparseOptimizer``).

    The state dict has one ``{t}.weight`` entry per table, as an ``nn.ModuleList`` of
    ``nn.Embedding`` would: checkpoints load into either.
    """

    def __init__(self, num_embeddings: Sequence[int], embedding_dim: int, *, optimizer: str | None = "sgd",
                 lr: float = 0.01, eps: float = 1e-10, initial_accumulator_value: float = 0.0,
                 check_bounds: bool = False, device=None, dtype=None):
        super().__init__()
        sizes = [int(n) for n in num_embeddings]
        if not sizes or min(sizes) < 1:
            raise ValueError(f"num_embeddings must be a non-empty list of positive table sizes, got {num_embeddings}")
        if int(embedding_dim) < 1:
            raise ValueError(f"embedding_dim must be positive, got {embedding_dim}")
        self.num_embeddings, self.embedding_dim = tuple(sizes), int(embedding_dim)
        self.check_bounds = bool(check_bounds)
        self.weight = nn.Parameter(torch.empty(sum(sizes), self.embedding_dim, device=device, dtype=dtype))
        self.register_buffer("table_offsets", self._offsets(self.weight.device), persistent=False)
        self.register_buffer("optimizer_state", None, persistent=False)
        self.register_state_dict_post_hook(_split_tables)
        self.register_load_state_dict_pre_hook(_join_tables)
        self.reset_parameters()
        self.set_optimizer(optimizer, lr=lr, eps=eps, initial_accumulator_value=initial_accumulator_value)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Each table normal(0, 1), like ``nn.Embedding``."""
        self.weight.normal_()

    def set_optimizer(self, optimizer: str | None, *, lr: float = 0.01, eps: float = 1e-10,
                      initial_accumulator_value: float = 0.0, group=None, overlap: bool = False) -> None:
        """Choose the update the backward applies (None: the tables are frozen); Adagrad's state
        starts at ``initial_accumulator_value`` (kept if it already exists). ``group``: a
        process group whose ranks hold replicas of these tables and train data-parallel; each
        rank's backward then applies the update of every rank's gradients. ``overlap``: on a
        GPU the update runs on a side stream, alongside the rest of the backward; the tables
        are final after ``wait_for_update()`` (or the next forward). See ``SparseOptimizer``."""
        if optimizer is None:
            self.optimizer, self.optimizer_state = None, None
            return
        if optimizer == "adagrad":
            if self.optimizer_state is None or self.optimizer_state.shape != self.weight.shape:
                self.optimizer_state = torch.full_like(self.weight, float(initial_accumulator_value),
                                                       requires_grad=False)
        else:
            self.optimizer_state = None
        self.optimizer = SparseOptimizer(optimizer, lr, eps, self.optimizer_state, group, self.num_embeddings,
                                         overlap=bool(overlap))
        self.optimizer.check(self.weight)

    def _offsets(self, device) -> torch.Tensor:
        """``[T + 1]``: each table's first row, then the total (formed on the CPU: it may be the
        meta device's turn to hold the module)."""
        return torch.tensor([0, *self.num_embeddings], dtype=torch.int64, device="cpu").cumsum(0).to(device)

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)  # .to(): the optimizer must follow the moved state
        if self.optimizer is not None:
            self.optimizer.state = self.optimizer_state
        if self.table_offsets.device.type != "meta":  # (not in the state dict: to_empty() leaves it unset)
            self.table_offsets = self._offsets(self.table_offsets.device)
        return module

    def wait_for_update(self) -> None:
        """Make the current stream wait for an overlapped update (``set_optimizer(overlap=True)``)."""
        if self.optimizer is not None:
            self.optimizer.wait()

    def table(self, t: int) -> torch.Tensor:
        """Table ``t``'s rows: a view of the weight (``t`` indexes the tables as a list does)."""
        rows = self.num_embeddings[t]  # an IndexError names a table that is not there
        start = sum(self.num_embeddings[:t % len(self.num_embeddings)])
        return self.weight[start:start + rows]

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return embedding_lookup(self.weight, self.table_offsets, indices, optimizer=self.optimizer,
                                check_bounds=self.check_bounds)

    def optimizer_state_dict(self) -> dict:
        return {"kind": None if self.optimizer is None else self.optimizer.kind,
                "state": None if self.optimizer_state is None else self.optimizer_state.detach().clone()}

    def load_optimizer_state_dict(self, state: dict) -> None:
        kind = None if self.optimizer is None else self.optimizer.kind
        if state.get("kind") != kind:
            raise ValueError(f"optimizer state for {state.get('kind')!r}, but this module's optimizer is {kind!r}")
        if self.optimizer_state is not None:
            saved = state["state"]
            if tuple(saved.shape) != tuple(self.optimizer_state.shape):  # copy_ would broadcast a wrong shape
                raise ValueError(f"optimizer state of shape {tuple(saved.shape)}, but the tables are "
                                 f"{tuple(self.optimizer_state.shape)}")
            self.optimizer_state.copy_(saved)

    def extra_repr(self) -> str:
        kind = "frozen" if self.optimizer is None else f"{self.optimizer.kind}, lr={self.optimizer.lr}"
        return f"tables={len(self.num_embeddings)}, rows={self.weight.shape[0]}, dim={self.embedding_dim}, {kind}"


def _split_tables(module, state_dict, prefix, local_metadata):
    weight = state_dict.pop(prefix + "weight")
    offsets = [0]
    for n in module.num_embeddings:
        offsets.append(offsets[-1] + n)
    for t in range(len(module.num_embeddings)):
        state_dict[f"{prefix}{t}.weight"] = weight[offsets[t]:offsets[t + 1]]


def _join_tables(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    keys = [f"{prefix}{t}.weight" for t in range(len(module.num_embeddings))]
    if prefix + "weight" in state_dict or not all(k in state_dict for k in keys):
        return  # the stacked form, or entries missing: load_state_dict reports what is wrong
    tables = [state_dict.pop(k) for k in keys]
    for t, (table, rows) in enumerate(zip(tables, module.num_embeddings)):
        if tuple(table.shape) != (rows, module.embedding_dim):
            error_msgs.append(f"{keys[t]}: shape {tuple(table.shape)}, the module's table is "
                              f"{(rows, module.embedding_dim)}")
            return
    state_dict[prefix + "weight"] = torch.cat(tables)
