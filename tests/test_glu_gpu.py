"""GEGLU at scale on a GPU: bf16 at LLM widths, and a tensor past 2^31 elements (int64 offsets).

The float64 reference is computed in row chunks (y, dx per chunk; dW, db summed over chunks)
so that it fits beside the tensors under test.
"""

import pytest
import torch

import fusedmlp
from fusedmlp.ops.glu import geglu_reference

pytestmark = pytest.mark.gpu


class _ChunkedError:
    """Accumulates ||out - ref||^2 and ||ref||^2 over chunks: the global relative error."""

    def __init__(self):
        self.diff = 0.0
        self.ref = 0.0

    def add(self, out, ref):
        self.diff += (out.double() - ref).square().sum().item()
        self.ref += ref.square().sum().item()

    @property
    def value(self):
        return (self.diff / self.ref) ** 0.5


def _check_chunked(x, w, b, g, y, dx, dw, db, tol, chunk=4096):
    w64 = w.double().requires_grad_()
    b64 = b.double().requires_grad_()
    err_y, err_dx = _ChunkedError(), _ChunkedError()
    for start in range(0, x.shape[0], chunk):
        rows = slice(start, start + chunk)
        x64 = x[rows].double().requires_grad_()
        ref = geglu_reference(x64, w64, b64)
        ref.backward(g[rows].double())
        err_y.add(y[rows], ref.detach())
        err_dx.add(dx[rows], x64.grad)
        del ref, x64
    errors = {
        "y": err_y.value,
        "dx": err_dx.value,
        "dW": ((dw.double() - w64.grad).norm() / w64.grad.norm()).item(),
        "db": ((db.double() - b64.grad).norm() / b64.grad.norm()).item(),
    }
    assert all(e < tol for e in errors.values()), errors
    return errors


def _run(n, d_in, out, recompute, dtype=torch.bfloat16):
    x = torch.randn(n, d_in, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(2 * out, d_in, device="cuda") / d_in**0.5).to(dtype).requires_grad_()
    b = torch.randn(2 * out, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(n, out, device="cuda", dtype=dtype)
    y = fusedmlp.geglu(x, w, b, recompute=recompute)
    y.backward(g)
    return x, w, b, g, y


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
@pytest.mark.parametrize("d,n", [(1024, 8192), (1024, 32768), (4096, 8192), (4096, 32768)])
def test_bf16_llm_widths(d, n, recompute):
    """GEGLU of the mission: d -> 8d packed (out = 4d), bf16."""
    x, w, b, g, y = _run(n, d, 4 * d, recompute)
    _check_chunked(x.detach(), w.detach(), b.detach(), g, y.detach(), x.grad, w.grad, b.grad, tol=2e-2)


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "store"])
def test_beyond_int32_offsets(recompute):
    """N x 2*out > 2^31 elements: dh (and h in store mode) need int64 offsets."""
    d_in, out = 64, 4096
    n = (1 << 31) // (2 * out) + 1000
    assert n * 2 * out > 2**31
    x, w, b, g, y = _run(n, d_in, out, recompute)
    _check_chunked(x.detach(), w.detach(), b.detach(), g, y.detach(), x.grad, w.grad, b.grad, tol=2e-2, chunk=32768)
