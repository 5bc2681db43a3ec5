"""``PeftLoRALinear``: the ``LoRALinear`` that ``fusedmlp.patch`` puts in place of a PEFT LoRA
``Linear``, and also one of PEFT's tuner layers. Imported by ``patch`` only once it finds a PEFT
layer (this module imports ``peft``, an optional dependency)."""

from __future__ import annotations

import torch
from peft.tuners.tuners_utils import BaseTunerLayer

from .lora import LoRALinear


class PeftLoRALinear(LoRALinear, BaseTunerLayer):
    """A ``LoRALinear`` that PEFT's model-level helpers see as a LoRA layer of theirs.

    Those helpers walk the model's ``BaseTunerLayer`` modules: as a plain ``LoRALinear`` a
    patched layer was missed, and ``save_pretrained`` saved an empty adapter. As a tuner layer
    it is found: ``save_pretrained`` saves its ``lora_A`` / ``lora_B`` under PEFT's keys,
    ``disable_adapter()`` / ``enable_adapter_layers`` switch it off and on, ``merge_adapter`` /
    ``unmerge_adapter`` fold the update in and out. The switches keep PEFT's own state
    (``_disable_adapters``, ``_active_adapter``, ``merged_adapters``, with PEFT's methods), and
    the forward runs the base layer alone wherever PEFT's layer would: adapters disabled (a
    merged layer unmerges first, as PEFT's does), or this layer's adapter not active.
    """

    adapter_layer_names = ("lora_A", "lora_B")
    other_param_names = ()  # r, lora_alpha and scaling are numbers here, not per-adapter dicts

    @classmethod
    def from_peft(cls, peft_layer, adapter_name: str, dropout: float, merged: bool) -> "PeftLoRALinear":
        """The layer standing in for ``peft_layer`` (its one adapter ``adapter_name``, active and
        enabled), sharing its modules."""
        layer = cls.from_modules(peft_layer.base_layer, peft_layer.lora_A, peft_layer.lora_B, adapter_name,
                                 peft_layer.scaling[adapter_name], dropout=dropout, merged=merged,
                                 lora_alpha=peft_layer.lora_alpha.get(adapter_name))
        layer._active_adapter = adapter_name
        layer._disable_adapters = False
        return layer

    def hand_back(self, peft_layer) -> None:
        """Give ``peft_layer`` (the layer this one stood in for) the state changed since:
        merged or not, which adapter is active, whether adapters are disabled."""
        peft_layer.merged_adapters = list(self.merged_adapters)
        peft_layer._active_adapter = self._active_adapter
        peft_layer._disable_adapters = self._disable_adapters

    @property
    def merged(self) -> bool:
        return bool(self.merged_adapters)

    @merged.setter
    def merged(self, value: bool) -> None:  # LoRALinear's merge state, kept as PEFT keeps it
        self.merged_adapters = [self.adapter_name] if value else []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.disable_adapters and self.merged:
            self.unmerge()
        if self.disable_adapters or (not self.merged and self.adapter_name not in self.active_adapters):
            return self._base_forward(x)
        return super().forward(x)
