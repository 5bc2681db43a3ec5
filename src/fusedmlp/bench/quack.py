"""QuACK (the ``quack-kernels`` package: GEMMs with fused activation epilogues written in
CuTe DSL, for Hopper and Blackwell) as a bench peer, where it is installed.

Two facts about QuACK shape how it is benchmarked:
- A gated projection keeps its two halves interleaved row by row in one weight (gate row 0,
  up row 0, gate row 1, ...; the bias likewise), and its gated activations are
  ``act(gate) * up``. The suites' weights are packed into that layout once per shape, outside
  the timings (``harness.peer_forward``), as a model built on QuACK stores them.
- Its Linear + activation forward returns the pre-activation as the differentiable output:
  the activation's backward is fused into the next layer's dgrad (its two-layer MLP). So the
  ``swiglu`` suite runs QuACK's whole MLP forward and backward (``quack.mlp.mlp_func``; h kept,
  or recomputed from x), while ``geglu`` and ``linear_act`` run its forward alone (y is all it
  writes, as in the fused ops' forwards that keep x only): QuACK has no backward for a
  standalone GEGLU projection or Linear + activation.
QuACK tunes its GEMM configs on each shape's first call (the suites' warm-up calls). It is not
replayed from CUDA graphs: its GEMMs allocate scratch per call (the Hopper tile scheduler's
semaphore) and its own notes leave CUDA-graph support for later; a captured QuACK step hit an
illegal memory access on its second capture in a bench run on an H100.
"""

from __future__ import annotations

import torch

from .harness import peer_forward

MODULE = "quack.mlp"  # the suites offer QuACK where this imports

# fusedmlp's activation names -> QuACK's epilogues (it has no erf gelu and no sigmoid)
ACTIVATIONS = {"identity": None, "relu": "relu", "squared_relu": "relu_sq", "gelu_tanh": "gelu_tanh_approx",
               "silu": "silu"}


def interleaved(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """A new leaf holding ``gate`` and ``up`` ([hidden, ...] each) interleaved along dim 0
    (gate[0], up[0], gate[1], ...): QuACK's packed gated weight [2 * hidden, in] or bias
    [2 * hidden]; it requires grad where ``gate`` does."""
    packed = torch.stack((gate.detach(), up.detach()), dim=1).reshape(2 * gate.shape[0], *gate.shape[1:])
    return packed.requires_grad_(gate.requires_grad)


def swiglu_forward(recompute: bool):
    """``down(silu(gate(x)) * up(x))`` through QuACK's MLP (``mlp_func``, activation "swiglu"),
    h kept (its default) or recomputed from x in the backward; takes the suite's
    (x, w_gate, w_up, w_down)."""
    def forward(x, w_gate_up, w_down):
        from quack.mlp import mlp_func

        return mlp_func(x, w_gate_up, w_down, "swiglu", recompute=recompute)

    def adapt(inputs):
        x, w_gate, w_up, w_down = inputs
        return x, interleaved(w_gate, w_up), w_down

    return peer_forward(forward, adapt_inputs=adapt)


def geglu_forward():
    """``x1 * gelu_tanh(x2)`` of a packed [2 * out, in] weight (rows [:out] give x1, [out:]
    give x2, as ``fusedmlp.geglu``) through QuACK's gated forward (activation "geglu",
    ``gelu_tanh(gate) * up``: x2 is its gate), the pre-activation not kept; forward only."""
    def forward(x, weight, bias):
        from quack.linear import linear_gated_func

        return linear_gated_func(x, weight, "geglu", bias=bias, store_preact=False)[1]

    def adapt(inputs):
        x, weight, bias = inputs
        out = weight.shape[0] // 2
        packed_bias = None if bias is None else interleaved(bias[out:], bias[:out])
        return x, interleaved(weight[out:], weight[:out]), packed_bias

    return peer_forward(forward, adapt_inputs=adapt, modes=("fwd",))


def linear_act_forward(activation: str):
    """``act(x @ W.T + b)`` through QuACK's Linear + activation forward, the pre-activation
    not kept; forward only. An activation QuACK lacks fails when called (the run records it)."""
    def forward(x, weight, bias):
        if activation not in ACTIVATIONS:
            raise ValueError(f"QuACK has no {activation} epilogue (it has {', '.join(ACTIVATIONS)})")
        from quack.linear import linear_act_func

        return linear_act_func(x, weight, ACTIVATIONS[activation], bias=bias, store_preact=False)[1]

    return peer_forward(forward, modes=("fwd",))
