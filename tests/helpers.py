"""Shared test helpers: the error metric and per-dtype tolerances."""

import torch

# ||out - ref|| / ||ref|| bounds against a float64 reference (DESIGN.md, Tests).
TOLERANCE = {
    torch.float64: 1e-10,
    torch.float32: 2e-5,
    torch.float16: 5e-3,
    torch.bfloat16: 3e-2,
}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.detach().to(torch.float64).cpu()
    ref = ref.detach().to(torch.float64).cpu()
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert torch.isfinite(out).all(), "non-finite values in output"
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def assert_close(out, ref, dtype, what=""):
    err = rel_err(out, ref)
    assert err < TOLERANCE[dtype], (
        f"{what}: relative error {err:.3e} >= {TOLERANCE[dtype]:.1e} ({dtype}, seed {torch.initial_seed()})"
    )


def check_against_float64(fused, reference, tensors, tensors64, g, g64, what=""):
    """Run ``fused(*tensors)`` and ``reference(*tensors64)`` (float64), backpropagate ``g`` /
    ``g64``, and compare the output and the gradient of every tensor that requires one.

    ``tensors`` may hold None (an absent bias) and strided views (kept as they are); a tensor
    takes part in the backward when its float64 master requires grad.
    """
    dtype = g.dtype
    leaves = [None if t is None else t.detach().requires_grad_(t64.requires_grad) for t, t64 in zip(tensors, tensors64)]
    leaves64 = [None if t is None else t.detach().clone().requires_grad_(t.requires_grad) for t in tensors64]
    out = fused(*leaves)
    ref = reference(*leaves64)
    assert out.dtype == dtype and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    assert_close(out, ref, dtype, f"{what} output")
    out.backward(g)
    ref.backward(g64)
    for i, (leaf, leaf64) in enumerate(zip(leaves, leaves64)):
        if leaf is None or not leaf64.requires_grad:
            continue
        assert leaf.grad is not None and leaf.grad.dtype == dtype and leaf.grad.shape == leaf.shape, f"{what} grad {i}"
        assert_close(leaf.grad, leaf64.grad, dtype, f"{what} grad of input {i}")
