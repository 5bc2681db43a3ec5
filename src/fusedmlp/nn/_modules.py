"""What a stack of PyTorch modules computes, established from the modules themselves.

Shared by ``fusedmlp.patch`` (which replaces a block only where it can establish the block's
computation exactly) and by the fused modules' forwards, which run the fused op only while
their children still are what it computes: a child swapped afterwards (a PEFT LoRA layer
wrapped around a projection, ``seq[1] = nn.Tanh()``) or a hook put on one (which the fused op
would never call) sends the forward through the children themselves, so the result stays the
children's and their hooks run.
"""

from __future__ import annotations

import itertools
from typing import Iterable, List, Optional, Tuple

import torch
from torch import nn


class SquaredReLU(nn.Module):
    """``relu(x) ** 2`` (PyTorch has no module for it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


GELU_APPROXIMATE = {"none": "gelu", "tanh": "gelu_tanh"}
_ACTIVATION_MODULES = {nn.ReLU: "relu", nn.SiLU: "silu", nn.Sigmoid: "sigmoid", SquaredReLU: "squared_relu",
                       nn.Identity: "identity"}


def _all_plain(modules: tuple) -> bool:
    """No hooks and no per-instance forward on any of ``modules``: calling each runs exactly its
    class's forward (the fused modules ask on every call: a loop with no call per module)."""
    for m in modules:
        if (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                or "forward" in m.__dict__):
            return False
    return True


def is_plain(module: nn.Module) -> bool:
    """No hooks and no per-instance forward: calling it runs exactly its class's forward."""
    return _all_plain((module,))


def is_plain_linear(module) -> bool:
    """An ``nn.Linear`` itself (not a subclass: a quantised or wrapped layer computes something
    else from its ``weight``) with nothing hooked on it."""
    return type(module) is nn.Linear and is_plain(module)


def module_activation(module) -> Optional[str]:
    """The fused activation name a plain activation module computes (``nn.ReLU``, ``nn.GELU``
    with ``approximate`` "none" or "tanh", ``nn.SiLU``, ``nn.Sigmoid``, ``SquaredReLU``,
    ``nn.Identity``), or None."""
    if type(module) is nn.GELU:
        activation = GELU_APPROXIMATE.get(module.approximate)
    else:
        activation = _ACTIVATION_MODULES.get(type(module))
    return activation if activation is not None and is_plain(module) else None


def linear_stack(children: Iterable[nn.Module]) -> Optional[Tuple[List[nn.Linear], Optional[str], str]]:
    """``(linears, activation, last_activation)`` where ``children`` run in order compute a
    stack of plain ``nn.Linear`` layers, each followed by at most one activation module, the
    same one after every layer but the last (``activation`` None for a single layer), with
    chaining shapes and one dtype and device; else None."""
    linears, after = [], []  # after[i]: the activation following linears[i] (None: none)
    for child in children:
        if is_plain_linear(child):
            linears.append(child)
            after.append(None)
            continue
        activation = module_activation(child)
        if activation is None or not linears or after[-1] is not None:
            return None
        after[-1] = activation
    if not linears:
        return None
    hidden = {a or "identity" for a in after[:-1]}
    if len(hidden) > 1 or len({(lin.weight.dtype, lin.weight.device) for lin in linears}) != 1:
        return None
    if any(a.out_features != b.in_features for a, b in itertools.pairwise(linears)):
        return None
    return linears, (hidden.pop() if hidden else None), after[-1] or "identity"


def plain_linears(modules: Iterable[nn.Module], bias_free: bool = False) -> bool:
    """Whether every one of ``modules`` is a plain ``nn.Linear`` (``bias_free``: without a bias)."""
    return all(is_plain_linear(m) and not (bias_free and m.bias is not None) for m in modules)


def established(module: nn.Module, children: tuple, establish):
    """``establish(children)``, kept on ``module`` until its children change: another module in
    their place, or a hook or per-instance ``forward`` put on one of them (or taken off) since,
    which the fused op would bypass (one tuple comparison by identity and a look at each
    child's hook dictionaries per call, about 1.5 us for a 7-module stack)."""
    key = (children, _all_plain(children))
    seen = module.__dict__.get("_established")
    if seen is None or seen[0] != key:
        seen = module.__dict__["_established"] = (key, establish(children))
    return seen[1]
