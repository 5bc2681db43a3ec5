"""Host side of each fused op: validation, launch, autograd, torch.library registration, reference."""

from .activations import ACTIVATIONS, activation_grad_reference, activation_reference
from .glu import geglu, geglu_reference

__all__ = ["ACTIVATIONS", "activation_reference", "activation_grad_reference", "geglu", "geglu_reference"]
