"""fusedmlp.dot_interaction against float64 loops: output and both gradients."""

import pytest
import torch

import fusedmlp
from conftest import DEVICE
from fusedmlp.ops.interaction import dot_interaction_reference

TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _loops(dense, embedded):
    """The definition, written out: dense, then <v_i, v_j> for i > j, row by row."""
    vectors = [dense] + [embedded[:, f] for f in range(embedded.shape[1])]
    pairs = [(vectors[i] * vectors[j]).sum(1) for i in range(len(vectors)) for j in range(i)]
    return torch.cat([dense, torch.stack(pairs, 1)], 1)


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def _check(batch, features, dim, dtype, strided=False):
    dense64 = torch.randn(batch, dim, dtype=torch.float64, device=DEVICE)
    emb64 = torch.randn(batch, features, dim, dtype=torch.float64, device=DEVICE)
    if strided:  # views with row and vector strides that are not the packed ones
        dense = torch.randn(batch, dim + 5, dtype=dtype, device=DEVICE)[:, 2:2 + dim]
        emb = torch.randn(batch, features + 3, dim + 4, dtype=dtype, device=DEVICE)[:, 1:1 + features, :dim]
        dense.copy_(dense64)
        emb.copy_(emb64)
        dense, emb = dense.requires_grad_(), emb.requires_grad_()
        dense.retain_grad()
        emb.retain_grad()
    else:
        dense, emb = dense64.to(dtype).requires_grad_(), emb64.to(dtype).requires_grad_()
    ref_dense, ref_emb = dense64.requires_grad_(), emb64.requires_grad_()
    out = fusedmlp.dot_interaction(dense, emb)
    ref = _loops(ref_dense, ref_emb)
    assert out.shape == (batch, dim + (features + 1) * features // 2) and out.dtype == dtype
    g = torch.randn_like(ref)
    out.backward(g.to(dtype))
    ref.backward(g)
    if batch == 0:
        return
    tol = TOL[dtype]
    assert _rel(out, ref.detach()) < tol
    assert _rel(dense.grad, ref_dense.grad) < tol
    assert _rel(emb.grad, ref_emb.grad) < tol


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch, features, dim", [(37, 26, 16), (5, 3, 8), (19, 26, 32), (1, 1, 16), (33, 40, 13)])
def test_matches_float64(batch, features, dim, dtype):
    _check(batch, features, dim, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_inputs(dtype):
    _check(21, 26, 16, dtype, strided=True)


def test_empty_batch():
    _check(0, 26, 16, torch.float32)


def test_reference_matches_loops():
    dense, emb = torch.randn(6, 8, dtype=torch.float64), torch.randn(6, 5, 8, dtype=torch.float64)
    assert torch.allclose(dot_interaction_reference(dense, emb), _loops(dense, emb), rtol=1e-13, atol=1e-13)


def test_bad_inputs():
    dense, emb = torch.randn(4, 16, device=DEVICE), torch.randn(4, 26, 16, device=DEVICE)
    with pytest.raises(ValueError, match="embedded"):
        fusedmlp.dot_interaction(dense, emb[:3])
    with pytest.raises(ValueError, match="embedded"):
        fusedmlp.dot_interaction(dense, emb[..., :8])
    with pytest.raises(ValueError, match="3-D"):
        fusedmlp.dot_interaction(dense, emb[:, 0])
    with pytest.raises(TypeError, match="dtype"):
        fusedmlp.dot_interaction(dense, emb.double())
    with pytest.raises(TypeError):
        fusedmlp.dot_interaction(dense.long(), emb.long())


def test_compile_fullgraph():
    dense = torch.randn(9, 16, device=DEVICE, requires_grad=True)
    emb = torch.randn(9, 26, 16, device=DEVICE, requires_grad=True)
    compiled = torch.compile(fusedmlp.dot_interaction, fullgraph=True, backend="eager" if DEVICE == "cpu" else "inductor")
    out = compiled(dense, emb)
    out.sum().backward()
    ref_dense, ref_emb = dense.detach().double().requires_grad_(), emb.detach().double().requires_grad_()
    _loops(ref_dense, ref_emb).sum().backward()
    assert _rel(out, _loops(ref_dense.detach(), ref_emb.detach())) < 1e-5
    assert _rel(dense.grad, ref_dense.grad) < 1e-5 and _rel(emb.grad, ref_emb.grad) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dlrm_batch_on_gpu(dtype):
    _check(65536 + 7, 26, 16, dtype)
