"""Drop-in ``nn.Module`` layers built on the fused ops."""

from .glu import GEGLU

__all__ = ["GEGLU"]
