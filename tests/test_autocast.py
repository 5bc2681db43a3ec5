"""Every op under torch.autocast: inputs cast as autocast casts F.linear's and bmm's (fp16 / bf16 /
fp32 tensors to the autocast dtype, fp64 left alone), the op run in that dtype, and gradients
back in the callers' dtypes. Checked against the same op on explicitly cast inputs (bit for
bit), against float64 on the cast values, and as a drop-in for eager layers under autocast."""

import copy

import pytest
import torch
from helpers import TOLERANCE, GatedMLP, assert_close, eager_bound, rel_err
from torch import nn

import fusedmlp
from fusedmlp.ops.glu import geglu_reference
from fusedmlp.ops.interaction import dot_interaction_reference
from fusedmlp.ops.linear_act import linear_act_reference
from fusedmlp.ops.lora import lora_linear_reference
from fusedmlp.ops.mlp import mlp_reference
from fusedmlp.ops.swiglu import swiglu_reference

AUTOCAST_DTYPES = [torch.bfloat16, torch.float16]


def _randn(*shape, device, scale=1.0):
    return torch.randn(*shape, device=device) * scale


def _case(name, device):
    """(op, reference, tensors, kwargs): fp32 tensors of odd sizes, the op's positional tensor
    arguments in order (lists stand for MLP weight / bias lists), everything else as kwargs.
    Smooth activations: at a ReLU's kink 16-bit rounding can flip a derivative against float64."""
    if name == "linear_act":
        tensors = [_randn(3, 7, 40, device=device), _randn(24, 40, device=device, scale=40**-0.5),
                   _randn(24, device=device)]
        return fusedmlp.linear_act, linear_act_reference, tensors, {"activation": "gelu_tanh"}
    if name == "geglu":
        tensors = [_randn(2, 9, 40, device=device), _randn(2 * 24, 40, device=device, scale=40**-0.5),
                   _randn(2 * 24, device=device)]
        return fusedmlp.geglu, geglu_reference, tensors, {}
    if name == "swiglu":
        tensors = [_randn(2, 9, 40, device=device), _randn(56, 40, device=device, scale=40**-0.5),
                   _randn(56, 40, device=device, scale=40**-0.5), _randn(40, 56, device=device, scale=56**-0.5)]
        return fusedmlp.swiglu, swiglu_reference, tensors, {}
    if name == "swiglu_packed":
        tensors = [_randn(2, 9, 40, device=device), _randn(2 * 56, 40, device=device, scale=40**-0.5),
                   _randn(40, 56, device=device, scale=56**-0.5)]
        return (fusedmlp.swiglu_packed, lambda x, w, wd, **kw: swiglu_reference(x, w[:56], w[56:], wd, **kw),
                tensors, {"activation": "gelu_tanh"})
    if name == "lora_linear":
        tensors = [_randn(21, 40, device=device), _randn(24, 40, device=device, scale=40**-0.5),
                   _randn(24, device=device), _randn(3, 40, device=device, scale=40**-0.5),
                   _randn(24, 3, device=device)]
        return fusedmlp.lora_linear, lora_linear_reference, tensors, {"scale": 0.5, "activation": "silu"}
    if name == "mlp":
        widths = (13, 40, 24, 5)
        weights = [_randn(n_out, n_in, device=device, scale=n_in**-0.5) for n_in, n_out in zip(widths, widths[1:])]
        biases = [_randn(n_out, device=device) for n_out in widths[1:]]
        return fusedmlp.mlp, mlp_reference, [_randn(37, 13, device=device), weights, biases], {"activation": "silu"}
    if name == "dot_interaction":
        tensors = [_randn(19, 16, device=device), _randn(19, 5, 16, device=device)]
        return fusedmlp.dot_interaction, dot_interaction_reference, tensors, {}
    raise ValueError(name)


def _leaves(tensors, convert):
    """``convert(t)`` of every tensor (and of every tensor in a list), as new autograd leaves."""
    def leaf(t):
        return t.detach().to(convert(t)).requires_grad_() if t is not None else None
    return [[leaf(t) for t in item] if isinstance(item, list) else leaf(item) for item in tensors]


def _flat(tensors):
    return [t for item in tensors for t in (item if isinstance(item, list) else [item])]


def _run(op, tensors, kwargs, g):
    y = op(*tensors, **kwargs)
    y.backward(g)
    return y.detach(), [t.grad for t in _flat(tensors)]


OPS = ["linear_act", "geglu", "swiglu", "swiglu_packed", "lora_linear", "mlp", "dot_interaction"]


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped-casts", "cast-each"])
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_op_under_autocast(monkeypatch, device, name, dtype, grouped):
    if not grouped:  # every tensor above the size that shares one multi-tensor copy
        monkeypatch.setattr(fusedmlp.ops._common, "GROUPED_CAST_MAX_NUMEL", 0)
    op, reference, tensors, kwargs = _case(name, device)
    masters = _leaves(tensors, lambda t: torch.float32)
    with torch.autocast(device, dtype=dtype):
        y = op(*masters, **kwargs)
    assert y.dtype == dtype, (name, y.dtype)
    g = torch.randn_like(y)
    y.backward(g)
    grads = [t.grad for t in _flat(masters)]
    assert all(grad is not None and grad.dtype == torch.float32 for grad in grads), [
        None if grad is None else grad.dtype for grad in grads]

    # the same op on inputs cast by hand, autocast off: the same bits, output and gradients
    cast = _leaves(tensors, lambda t: dtype)
    y_cast, grads_cast = _run(op, cast, kwargs, g)
    assert torch.equal(y, y_cast), name
    for i, (grad, grad_cast) in enumerate(zip(grads, grads_cast)):
        assert torch.equal(grad, grad_cast.float()), (name, i)

    # against float64 on the values the op computed with
    exact = _leaves(cast, lambda t: torch.float64)
    ref = reference(*exact, **kwargs)
    ref.backward(g.double())
    with torch.no_grad():  # eager PyTorch's own rounding of the intermediates, for the bound
        eager = reference(*_leaves(cast, lambda t: dtype), **kwargs)
    bound = eager_bound(dtype, eager, ref)
    assert rel_err(y, ref) < bound, (name, rel_err(y, ref), bound)
    for i, (grad, leaf) in enumerate(zip(grads, _flat(exact))):
        assert rel_err(grad, leaf.grad) < max(bound, TOLERANCE[dtype]), (name, i, rel_err(grad, leaf.grad))


@pytest.mark.parametrize("name", OPS)
def test_float64_is_not_cast(device, name):
    """Autocast casts no fp64 tensor; the op then runs in fp64, as eager layers do."""
    op, reference, tensors, kwargs = _case(name, device)
    exact = _leaves(tensors, lambda t: torch.float64)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = op(*exact, **kwargs)
    assert y.dtype == torch.float64
    assert_close(y, reference(*exact, **kwargs), torch.float64, name)


def test_mixed_inputs_only_under_autocast(device):
    """16-bit activations with fp32 weights (a layer after an autocast one): autocast runs them;
    outside it the dtype check still names the mismatch."""
    x = torch.randn(5, 40, device=device, dtype=torch.bfloat16)
    w, b = torch.randn(24, 40, device=device) / 40**0.5, torch.randn(24, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = fusedmlp.linear_act(x, w, b, "silu")
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, fusedmlp.linear_act(x, w.bfloat16(), b.bfloat16(), "silu"))
    with pytest.raises(TypeError, match="weight has dtype torch.float32 but x has torch.bfloat16"):
        fusedmlp.linear_act(x, w, b, "silu")


def test_patched_model_under_autocast(device):
    """An fp32 model run under autocast, eager and patched: the same output dtype, fp32
    gradients, and the patched model's output and every gradient within twice eager autocast's
    own error against the float64 model (or the bf16 tolerance where that is larger)."""
    model = nn.Sequential(
        nn.Linear(40, 64), nn.GELU(approximate="tanh"), GatedMLP(64, 96, nn.SiLU()),
        nn.Sequential(nn.Linear(64, 48), nn.SiLU(), nn.Linear(48, 8)),
    ).to(device)
    replaced = fusedmlp.patch(model, copy=True)
    assert {"FusedLinear", "SwiGLU", "FusedMLP"} <= {r.new_type for r in replaced}, replaced
    x = torch.randn(4, 5, 40, device=device)
    g = torch.randn(4, 5, 8, device=device)
    runs = []
    for m in (model, replaced.model):
        with torch.autocast(device, dtype=torch.bfloat16):
            y = m(x)
        y.float().backward(g)
        runs.append((y, [p.grad for p in m.parameters()]))
    model64 = copy.deepcopy(model).double()
    y64 = model64(x.double())
    y64.backward(g.double())
    (y_eager, grads_eager), (y_fused, grads_fused) = runs
    assert y_fused.dtype == y_eager.dtype == torch.bfloat16
    assert len(grads_fused) == len(grads_eager)
    named = [("output", y_fused, y_eager, y64)] + [
        (f"grad {i}", gf, ge, p.grad) for i, (gf, ge, p) in enumerate(zip(grads_fused, grads_eager, model64.parameters()))]
    for what, fused_value, eager_value, exact in named:
        assert fused_value.dtype == (torch.bfloat16 if what == "output" else torch.float32), what
        bound = max(TOLERANCE[torch.bfloat16], 2 * rel_err(eager_value, exact))
        assert rel_err(fused_value, exact) < bound, (what, rel_err(fused_value, exact), bound)


def test_compiled_under_autocast(device):
    """torch.compile(fullgraph=True) traces the casts: the compiled call under autocast gives
    the eager call's dtypes and values."""
    op, reference, tensors, kwargs = _case("linear_act", device)
    masters = _leaves(tensors, lambda t: torch.float32)
    compiled = torch.compile(lambda *ts: op(*ts, **kwargs), fullgraph=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        y_compiled = compiled(*masters)
        y_eager = op(*masters, **kwargs)
    assert y_compiled.dtype == torch.bfloat16
    assert_close(y_compiled, y_eager, torch.bfloat16, "compiled against eager")
    y_compiled.backward(torch.ones_like(y_compiled))
    assert all(t.grad.dtype == torch.float32 for t in masters)


@pytest.mark.gpu
def test_step_captured_under_autocast_reads_the_current_weights():
    """``fusedmlp.capture_cuda_graph`` called inside an autocast block: its replays cast the
    weights as they are at replay time, for eager layers (whose cast autocast would otherwise
    cache from the warm-up and free when the block exits) and for fused ones."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48).cuda()
    fused = fusedmlp.FusedLinear(64, 48, activation="relu").cuda()
    fused.load_state_dict(linear.state_dict())
    x = torch.randn(32, 64, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        eager_graph, y_eager = fusedmlp.capture_cuda_graph(lambda: torch.relu(linear(x)))
        fused_graph, y_fused = fusedmlp.capture_cuda_graph(lambda: fused(x))
    torch.cuda.empty_cache()
    junk = torch.full((1 << 24,), float("nan"), device="cuda")  # takes memory a freed cast held
    with torch.no_grad():
        for module in (linear, fused):
            module.weight.mul_(-2.0)
            module.bias.add_(1.0)
    eager_graph.replay()
    fused_graph.replay()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = torch.relu(linear(x))
    assert torch.equal(y_eager, want)
    assert y_fused.dtype == torch.bfloat16
    assert_close(y_fused, want, torch.bfloat16, "fused replay")
    del junk
