"""The pointwise LoRA epilogue act(out + bias + s * lora_out): Triton kernel and CUDA C++ twin vs float64."""

import pytest
import torch
from helpers import assert_close, every_other

import fusedmlp
from fusedmlp.ops.add_mul_act import add_mul_act_reference


def run_check(shape, dtype, activation, bias, backend, device, multiplier=0.625, transpose=False, bias_step=False):
    n = shape[-1]
    out64 = torch.randn(*shape, dtype=torch.float64, device=device)
    lora64 = torch.randn(*shape, dtype=torch.float64, device=device)
    if transpose:  # a strided view: [cols, rows] storage read as [rows, cols]
        out64 = torch.randn(n, shape[0], dtype=torch.float64, device=device).t()
    bias64 = torch.randn(n, dtype=torch.float64, device=device) if bias else None
    g64 = torch.randn(*shape, dtype=torch.float64, device=device)
    leaves = [None if t is None else t.to(dtype).requires_grad_() for t in (out64, bias64, lora64)]
    if bias_step:  # a bias with stride 2 (the kernels read it with unit stride: it is copied)
        leaves[1] = every_other(leaves[1].detach()).requires_grad_()
    leaves64 = [None if t is None else t.detach().double().requires_grad_() for t in leaves]
    y = fusedmlp.fused_add_mul_activation(leaves[0], leaves[1], leaves[2], multiplier, activation, backend=backend)
    ref = add_mul_act_reference(*leaves64[:2], leaves64[2], multiplier, activation)
    assert y.dtype == dtype and y.shape == ref.shape
    assert_close(y, ref, dtype, f"{backend} {activation} output")
    y.backward(g64.to(dtype))
    ref.backward(g64)
    for name, leaf, leaf64 in zip(("out", "bias", "lora_out"), leaves, leaves64):
        if leaf is not None:
            assert_close(leaf.grad, leaf64.grad, dtype, f"{backend} {activation} grad of {name}")


@pytest.mark.parametrize("activation", fusedmlp.ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_triton(device, activation, dtype):
    run_check((37, 45), dtype, activation, True, "triton", device)


@pytest.mark.parametrize("shape", [(1, 8), (3, 7, 33), (0, 16), (5, 0), (2, 0, 3)],
                         ids=["N=1", "3d", "empty", "no-cols", "empty-3d"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_triton_shapes(device, shape, bias):
    run_check(shape, torch.float32, "sigmoid", bias, "triton", device)


def test_triton_strided(device):
    run_check((40, 24), torch.float32, "relu", True, "triton", device, transpose=True)
    run_check((40, 24), torch.float32, "gelu", True, "triton", device, bias_step=True)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PyTorch's forward-AD setup scripts functions
def test_forward_mode_ad_is_refused(device):
    """No forward-mode derivative: a tangent on any input is refused, not dropped."""
    import torch.autograd.forward_ad as forward_ad

    out, lora = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(out, torch.randn_like(out))
        with pytest.raises(NotImplementedError, match="jvp"):
            fusedmlp.fused_add_mul_activation(dual, None, lora, 0.5, "gelu")
        plain = fusedmlp.fused_add_mul_activation(out, None, lora, 0.5, "gelu")  # no tangent: runs
    assert_close(plain, add_mul_act_reference(out.double(), None, lora.double(), 0.5, "gelu"), torch.float32, "plain")
    with pytest.raises(NotImplementedError, match="jvp"):
        torch.func.jvp(lambda o: fusedmlp.fused_add_mul_activation(o, None, lora, 0.5), (out,), (torch.ones_like(out),))


@pytest.mark.gpu
@pytest.mark.parametrize("activation", fusedmlp.ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(37, 45), (256, 1024), (3, 5, 24)], ids=["odd-scalar", "vectorised", "3d"])
def test_cuda_twin(activation, dtype, shape):
    """The nvcc-built kernel (vectorised when rows are 16-byte aligned, scalar otherwise)."""
    run_check(shape, dtype, activation, True, "cuda", "cuda")
    run_check(shape, dtype, activation, False, "cuda", "cuda", transpose=len(shape) == 2)


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("shape", ValueError, "lora_out must have out's shape"),
        ("bias", ValueError, "bias must have 12 elements"),
        ("multiplier", TypeError, "multiplier must be a finite Python number"),
        ("backend", ValueError, "backend must be one of"),
        ("activation", ValueError, "activation must be one of"),
        ("dtype", TypeError, "lora_out has dtype"),
        ("cuda_fp64", TypeError, "backend='cuda' takes float16"),
    ],
)
def test_bad_inputs(device, case, exc, match):
    out, lora, bias = torch.randn(5, 12, device=device), torch.randn(5, 12, device=device), torch.randn(12, device=device)
    kwargs = dict(multiplier=2.0, activation="relu")
    if case == "shape":
        lora = torch.randn(5, 13, device=device)
    elif case == "bias":
        bias = torch.randn(13, device=device)
    elif case == "multiplier":
        kwargs["multiplier"] = torch.tensor(2.0)
    elif case == "backend":
        kwargs["backend"] = "cutlass"
    elif case == "activation":
        kwargs["activation"] = "tanh"
    elif case == "dtype":
        lora = lora.double()
    elif case == "cuda_fp64":
        out, lora, bias = out.double(), lora.double(), bias.double()
        kwargs["backend"] = "cuda"
    with pytest.raises(exc, match=match):
        fusedmlp.fused_add_mul_activation(out, bias, lora, **kwargs)


def test_cuda_backend_without_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        fusedmlp.fused_add_mul_activation(torch.randn(2, 8), None, torch.randn(2, 8), 1.0, backend="cuda")
    from fusedmlp.ops.add_mul_act import cuda_extension

    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        cuda_extension()
