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
