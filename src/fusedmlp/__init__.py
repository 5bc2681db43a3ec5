"""fusedmlp: fused Triton kernels for MLP blocks, forward and backward.

Set ``TRITON_INTERPRET=1`` before the first use to run the kernels on CPU tensors through
Triton's interpreter; without it CPU tensors take the plain-PyTorch reference path. The
public names are loaded on first access, so ``import fusedmlp`` (and the CLI, which sets
the interpreter flag itself on machines without a GPU) imports no kernel module yet.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "geglu": "fusedmlp.ops.glu",
    "geglu_reference": "fusedmlp.ops.glu",
    "linear_act": "fusedmlp.ops.linear_act",
    "linear_act_reference": "fusedmlp.ops.linear_act",
    "swiglu": "fusedmlp.ops.swiglu",
    "swiglu_packed": "fusedmlp.ops.swiglu",
    "swiglu_reference": "fusedmlp.ops.swiglu",
    "lora_linear": "fusedmlp.ops.lora",
    "lora_linear_reference": "fusedmlp.ops.lora",
    "fused_add_mul_activation": "fusedmlp.ops.add_mul_act",
    "mlp": "fusedmlp.ops.mlp",
    "mlp_reference": "fusedmlp.ops.mlp",
    "dot_interaction": "fusedmlp.ops.interaction",
    "dot_interaction_reference": "fusedmlp.ops.interaction",
    "embedding_lookup": "fusedmlp.ops.embedding",
    "embedding_lookup_reference": "fusedmlp.ops.embedding",
    "SparseOptimizer": "fusedmlp.ops.embedding",
    "ACTIVATIONS": "fusedmlp.ops.activations",
    "GEGLU": "fusedmlp.nn.glu",
    "FusedLinear": "fusedmlp.nn.linear_act",
    "SwiGLU": "fusedmlp.nn.swiglu",
    "PackedSwiGLU": "fusedmlp.nn.swiglu",
    "LoRALinear": "fusedmlp.nn.lora",
    "FusedMLP": "fusedmlp.nn.mlp",
    "TableBatchedEmbedding": "fusedmlp.nn.embedding",
    "patch": "fusedmlp.nn.patch",
    "unpatch": "fusedmlp.nn.patch",
    "tensor_parallel": "fusedmlp.nn.tensor_parallel",
    "graph_capture_mode": "fusedmlp._cuda_graph",
    "capture_cuda_graph": "fusedmlp._cuda_graph",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fusedmlp' has no attribute {name!r}")


def __dir__():
    return __all__
