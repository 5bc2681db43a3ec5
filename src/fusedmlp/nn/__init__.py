"""Drop-in ``nn.Module`` layers built on the fused ops, and ``patch`` for existing models."""

from .embedding import TableBatchedEmbedding
from .glu import GEGLU
from .linear_act import FusedLinear
from .lora import LoRALinear
from .mlp import FusedMLP
from .patch import patch, unpatch
from .swiglu import PackedSwiGLU, SwiGLU
from .tensor_parallel import tensor_parallel

__all__ = ["GEGLU", "FusedLinear", "FusedMLP", "LoRALinear", "PackedSwiGLU", "SwiGLU", "TableBatchedEmbedding",
           "patch", "tensor_parallel", "unpatch"]
