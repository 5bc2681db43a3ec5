"""``LoRALinear``: a linear layer with a LoRA adapter, base and low-rank path in one kernel."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..ops._common import autocast_dtype, call_autocast
from ..ops.activations import check_activation
from ..ops.linear_act import linear_act
from ..ops.lora import lora_linear


class LoRALinear(nn.Module):
    """``act(x @ W.T + b + scaling * (dropout(x) @ A.T) @ B.T)`` through ``fusedmlp.lora_linear``.

    Laid out like a PEFT LoRA ``Linear``, so its state-dict keys are PEFT's: ``base_layer``
    (an ``nn.Linear``, frozen: weight and bias do not require grad unless you switch them
    on), ``lora_A[adapter_name]`` (``nn.Linear(in, r)``, Kaiming-uniform init) and
    ``lora_B[adapter_name]`` (``nn.Linear(r, out)``, zero init, so a new adapter starts as the
    identity update). ``scaling = alpha / r`` (``alpha / sqrt(r)`` with ``use_rslora``).

    ``merge()`` folds ``scaling * B @ A`` into the base weight and the forward then runs the
    base layer alone (``merged`` is True), as PEFT's ``merge``; ``unmerge()`` takes it out
    again. ``dropout`` applies in training mode only.

    Adapters in fp32 on a 16-bit base layer (PEFT's default, ``autocast_adapter_dtype=True``)
    are cast to the base's dtype for the fused kernel, as ``torch.autocast`` casts weights:
    their gradients come back in fp32. ``merge(safe_merge, adapter_names)`` and
    ``get_base_layer()`` are PEFT's names, so PEFT's ``merge_and_unload`` also unloads a
    patched model.
    """

    def __init__(self, in_features: int, out_features: int, r: int, alpha: float, bias: bool = True,
                 activation: Optional[str] = None, dropout: float = 0.0, *, use_rslora: bool = False,
                 adapter_name: str = "default", save_preact: bool = False, device=None, dtype=None):
        super().__init__()
        if not isinstance(r, int) or isinstance(r, bool) or r < 1:
            raise ValueError(f"r must be a positive int, got {r!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout!r}")
        factory = dict(device=device, dtype=dtype)
        self.base_layer = nn.Linear(in_features, out_features, bias=bias, **factory)
        self.base_layer.requires_grad_(False)
        self.lora_A = nn.ModuleDict({adapter_name: nn.Linear(in_features, r, bias=False, **factory)})
        self.lora_B = nn.ModuleDict({adapter_name: nn.Linear(r, out_features, bias=False, **factory)})
        nn.init.kaiming_uniform_(self.lora_A[adapter_name].weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B[adapter_name].weight)
        self.adapter_name = adapter_name
        self.in_features, self.out_features, self.r, self.lora_alpha = in_features, out_features, r, alpha
        self.scaling = alpha / (math.sqrt(r) if use_rslora else r)
        self.activation = check_activation(activation)
        self.dropout = float(dropout)
        self.save_preact = save_preact
        self.merged = False

    @classmethod
    def from_modules(cls, base_layer: nn.Linear, lora_a: nn.ModuleDict, lora_b: nn.ModuleDict, adapter_name: str,
                     scaling: float, dropout: float = 0.0, activation: Optional[str] = None,
                     merged: bool = False, save_preact: bool = False,
                     lora_alpha: Optional[float] = None) -> "LoRALinear":
        """A LoRALinear around existing modules (shared, not copied): what ``fusedmlp.patch``
        builds from a PEFT layer. ``merged`` says the base weight already holds the update;
        ``lora_alpha`` is reported as given (None: ``scaling * r``, right unless rsLoRA)."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.base_layer, layer.lora_A, layer.lora_B = base_layer, lora_a, lora_b
        layer.adapter_name = adapter_name
        layer.in_features, layer.out_features = base_layer.in_features, base_layer.out_features
        layer.r = lora_a[adapter_name].out_features
        layer.scaling = float(scaling)
        layer.lora_alpha = layer.scaling * layer.r if lora_alpha is None else lora_alpha
        layer.activation = check_activation(activation)
        layer.dropout = float(dropout)
        layer.save_preact = save_preact
        layer.merged = merged
        return layer

    @property
    def lora_a(self) -> torch.Tensor:
        """A ``[r, in]`` of the adapter."""
        return self.lora_A[self.adapter_name].weight

    @property
    def lora_b(self) -> torch.Tensor:
        """B ``[out, r]`` of the adapter."""
        return self.lora_B[self.adapter_name].weight

    def delta_weight(self) -> torch.Tensor:
        """``scaling * B @ A`` ([out, in]), computed in fp32 at least."""
        dtype = torch.promote_types(self.lora_b.dtype, torch.float32)
        return (self.lora_b.to(dtype) @ self.lora_a.to(dtype)) * self.scaling

    @torch.no_grad()
    def merge(self, safe_merge: bool = False, adapter_names: Optional[list] = None) -> None:
        """Fold the adapter into the base weight; the forward then runs the base layer alone.
        ``safe_merge``: raise ValueError, leaving the weight as it was, where the merged weight
        would hold a NaN or an infinity. ``adapter_names``: merge only if this layer's adapter
        is named there (PEFT's arguments)."""
        if self.merged or (adapter_names is not None and self.adapter_name not in adapter_names):
            return
        weight, delta = self.base_layer.weight, self.delta_weight()
        merged = (weight.to(delta.dtype) + delta).to(weight.dtype)
        if safe_merge and not torch.isfinite(merged).all():
            raise ValueError(f"LoRALinear.merge: adapter {self.adapter_name!r} would put NaN or inf in the base weight")
        weight.copy_(merged)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the adapter back out of the base weight."""
        if self.merged:
            weight, delta = self.base_layer.weight, self.delta_weight()
            weight.copy_((weight.to(delta.dtype) - delta).to(weight.dtype))
            self.merged = False

    def get_base_layer(self) -> nn.Linear:
        """The base layer (PEFT's name; its ``merge_and_unload`` puts it in this layer's place)."""
        if self.activation != "identity":
            raise ValueError(f"LoRALinear with activation={self.activation}: the base layer alone would drop "
                             "the activation")
        return self.base_layer

    def _base_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The base layer and the activation alone (merged: the update is in the weight)."""
        return linear_act(x, self.base_layer.weight, self.base_layer.bias, self.activation, self.save_preact)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            return self._base_forward(x)
        weight, bias = self.base_layer.weight, self.base_layer.bias
        lora_a, lora_b = self.lora_a, self.lora_b
        args = (x, weight, bias, lora_a, lora_b, self.scaling, self.activation,
                self.dropout if self.training else 0.0, self.save_preact)
        adapters_differ = lora_a.dtype != weight.dtype or lora_b.dtype != weight.dtype
        if adapters_differ and x.dtype == weight.dtype and autocast_dtype(x) is None:
            # fp32 adapters on a 16-bit base, cast to it as autocast casts (inside an autocast
            # region lora_linear casts everything to that region's dtype itself)
            return call_autocast(lora_linear, weight.dtype, *args)
        return lora_linear(*args)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"scaling={self.scaling:g}, activation={self.activation}, dropout={self.dropout}, "
                f"merged={self.merged}")
