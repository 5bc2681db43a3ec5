"""The DLRM model: bottom MLP, one embedding table per categorical feature, feature
interaction, top MLP; logits out (train with BCE-with-logits).

    z_dense = bottom(dense)                                   [B, 13] -> [B, D]
    e_f     = tables[f][cats[:, f]]                           26 x [B, D]
    dot:  T = [z_dense, e_0, ..., e_25]  [B, 27, D];  G = T @ T^T  [B, 27, 27]
          inter = concat(z_dense, G[i, j] for i > j (row-major lower triangle))   [B, D + 351]
    cat:  inter = concat(z_dense, e_0, ..., e_25)             [B, 27 D]
    logit = top(inter)                                        [B, 1] -> [B]

The MLPs are ``FusedMLP`` modules (an nn.Sequential of Linear + ReLU: the same state dict as
a plain PyTorch DLRM's); the tables are ``embeddings.{f}.weight`` in the state dict under
every implementation, so checkpoints move between them:
    eager    nn.Sequential forwards, an nn.ModuleList of nn.Embedding (one lookup per table),
             bmm interaction
    fused    the MLPs as single fused kernels (fusedmlp.mlp), the dot interaction as one
             kernel each way (fusedmlp.dot_interaction), the tables as one
             TableBatchedEmbedding: one lookup kernel for all tables, whose backward applies
             the optimizer to the touched rows (set by ``DLRM.set_table_optimizer``; the dense
             optimizer takes ``dense_parameters()``)
``compile`` is the eager model under torch.compile (the trainer applies it).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..nn.embedding import TableBatchedEmbedding
from ..nn.mlp import FusedMLP
from ..ops.interaction import dot_interaction, dot_interaction_reference
from .data import KAGGLE_CARDINALITIES, NUM_CATEGORICAL, NUM_DENSE

IMPLS = ("eager", "fused")


@dataclass
class DLRMConfig:
    """Sizes of a DLRM. ``bottom_mlp`` excludes the 13 dense inputs; ``top_mlp`` excludes its
    input (the interaction's width) and ends in 1 (the logit)."""

    cardinalities: tuple = tuple(min(c, 2_000_000) for c in KAGGLE_CARDINALITIES)
    embedding_dim: int = 16
    bottom_mlp: tuple = (512, 256, 64, 16)
    top_mlp: tuple = (512, 256, 1)
    interaction: str = "dot"
    num_dense: int = NUM_DENSE
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        sizes = (*self.cardinalities, *self.bottom_mlp, *self.top_mlp, self.embedding_dim, self.num_dense)
        if not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in sizes):
            raise ValueError("table sizes, layer widths, embedding_dim and num_dense must be integers")
        self.cardinalities = tuple(int(c) for c in self.cardinalities)
        self.bottom_mlp, self.top_mlp = tuple(self.bottom_mlp), tuple(self.top_mlp)
        if len(self.cardinalities) != NUM_CATEGORICAL or min(self.cardinalities) < 1:
            raise ValueError(f"cardinalities must be {NUM_CATEGORICAL} positive table sizes")
        if self.interaction not in ("dot", "cat"):
            raise ValueError(f"interaction must be 'dot' or 'cat', got {self.interaction!r}")
        if not self.bottom_mlp or self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(f"the bottom MLP must end in embedding_dim={self.embedding_dim} "
                             f"(the interaction pairs it with the embeddings), got {self.bottom_mlp}")
        if not self.top_mlp or self.top_mlp[-1] != 1:
            raise ValueError(f"the top MLP must end in 1 (the logit), got {self.top_mlp}")
        if min(self.bottom_mlp + self.top_mlp) < 1 or self.embedding_dim < 1 or self.num_dense < 1:
            raise ValueError("layer widths, embedding_dim and num_dense must be positive")

    @property
    def interaction_width(self) -> int:
        vectors = NUM_CATEGORICAL + 1
        if self.interaction == "dot":
            return self.embedding_dim + vectors * (vectors - 1) // 2
        return self.embedding_dim * vectors

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict, **overrides) -> "DLRMConfig":
        known = {k: v for k, v in dict(values, **overrides).items() if k in cls.__dataclass_fields__}
        unknown = (set(values) | set(overrides)) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown DLRM config keys: {sorted(unknown)}")
        return cls(**known)

    @classmethod
    def from_json(cls, path, **overrides) -> "DLRMConfig":
        return cls.from_dict(json.loads(Path(path).read_text()), **overrides)


class DLRM(nn.Module):
    """DLRM with a selectable implementation (``impl``: eager or fused; see the module docstring).

    ``forward(dense [B, 13] float, cats [B, 26] int64) -> logits [B]``.
    ``sparse=True`` gives the eager tables sparse gradients (for SGD / Adagrad on touched rows
    only); the fused tables never form a gradient (their update is fused into the backward).
    """

    def __init__(self, config: DLRMConfig, impl: str = "eager", sparse: bool = False):
        super().__init__()
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.config, self.impl, self.sparse = config, impl, sparse
        self.bottom = FusedMLP((config.num_dense,) + config.bottom_mlp, activation="relu", last_activation="relu")
        self.embeddings = self._tables(impl)
        self.top = FusedMLP((config.interaction_width,) + config.top_mlp, activation="relu", last_activation=None)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The reference DLRM's initialisation: tables uniform in +-1/sqrt(rows); Linear weights
        normal with std sqrt(2 / (in + out)), biases normal with std sqrt(1 / out)."""
        for table in self._table_weights():
            table.uniform_(-table.shape[0] ** -0.5, table.shape[0] ** -0.5)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                out_f, in_f = module.weight.shape
                module.weight.normal_(0.0, (2.0 / (in_f + out_f)) ** 0.5)
                module.bias.normal_(0.0, (1.0 / out_f) ** 0.5)

    def _tables(self, impl: str) -> nn.Module:
        config = self.config
        if impl == "fused":
            return TableBatchedEmbedding(config.cardinalities, config.embedding_dim, optimizer=None)
        return nn.ModuleList(nn.Embedding(n, config.embedding_dim, sparse=self.sparse) for n in config.cardinalities)

    def _table_weights(self) -> list[torch.Tensor]:
        if isinstance(self.embeddings, TableBatchedEmbedding):
            return [self.embeddings.table(f) for f in range(len(self.config.cardinalities))]
        return [table.weight for table in self.embeddings]

    def set_impl(self, impl: str) -> "DLRM":
        """Switch implementation, keeping the weights (the tables change storage between eager
        and fused; the fused tables start frozen: see ``set_table_optimizer``)."""
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        if (impl == "fused") != isinstance(self.embeddings, TableBatchedEmbedding):
            old = self.embeddings
            weight = next(old.parameters())
            new = self._tables(impl).to(device=weight.device, dtype=weight.dtype)
            new.load_state_dict(old.state_dict())
            self.embeddings = new
        self.impl = impl
        return self

    def set_table_optimizer(self, optimizer: str | None, lr: float = 0.01, **options) -> None:
        """The fused tables' update, applied in the backward ("sgd", "adagrad" or None: frozen)."""
        if not isinstance(self.embeddings, TableBatchedEmbedding):
            raise RuntimeError("only the fused implementation's tables carry their optimizer")
        self.embeddings.set_optimizer(optimizer, lr=lr, **options)

    def dense_parameters(self) -> list[nn.Parameter]:
        """The parameters a torch optimizer updates: all but the fused tables' (updated in the backward)."""
        fused_tables = isinstance(self.embeddings, TableBatchedEmbedding)
        return [p for name, p in self.named_parameters() if not (fused_tables and name.startswith("embeddings."))]

    def _mlp(self, mlp: FusedMLP, x: torch.Tensor) -> torch.Tensor:
        return mlp(x) if self.impl == "fused" else nn.Sequential.forward(mlp, x)

    def forward(self, dense: torch.Tensor, cats: torch.Tensor) -> torch.Tensor:
        tables = len(self.config.cardinalities)
        if dense.dim() != 2 or dense.shape[1] != self.config.num_dense:
            raise ValueError(f"dense must be [batch, {self.config.num_dense}], got {tuple(dense.shape)}")
        if cats.dim() != 2 or cats.shape != (dense.shape[0], tables):
            raise ValueError(f"cats must be [batch, {tables}] like dense's batch, got {tuple(cats.shape)}")
        z = self._mlp(self.bottom, dense)
        if isinstance(self.embeddings, TableBatchedEmbedding):
            embedded = self.embeddings(cats)
        else:
            embedded = torch.stack([table(cats[:, f]) for f, table in enumerate(self.embeddings)], dim=1)
        if self.config.interaction == "dot":
            inter = (dot_interaction if self.impl == "fused" else dot_interaction_reference)(z, embedded)
        else:
            inter = torch.cat([z, embedded.flatten(1)], dim=1)
        return self._mlp(self.top, inter).squeeze(1)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
