"""``fusedmlp.patch`` / ``unpatch`` on real Hugging Face Llama and Gemma models, nn.Sequential stacks and
GEGLU blocks.

Every check compares the patched model with an unpatched copy on the same inputs: outputs and
the gradient of every parameter, state-dict keys, and identity of the parameter objects
(patching shares them, it never copies them).
"""

import copy
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from helpers import GatedMLP, rel_err
from torch import nn

import fusedmlp
from fusedmlp.nn.linear_act import PairedActivation
from fusedmlp.nn.patch import PatchedGEGLU

F64 = torch.float64
# The interpreter computes in the parameters' dtype; the rest of the model is PyTorch's.
MODEL_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------
def _tiny_llama(**config):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=101, **config,
    )
    return transformers.LlamaForCausalLM(config).eval()


def _tiny_phi3():
    """A Phi-3 of random weights: its MLPs hold the gate and up projections packed (gate_up_proj)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Phi3Config(hidden_size=64, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=101, pad_token_id=100)
    return transformers.Phi3ForCausalLM(config).eval()


def _tiny_gemma(version):
    """A Gemma (1 or 2) of random weights: its MLPs gate with transformers' tanh GELU."""
    transformers = pytest.importorskip("transformers")
    prefix = {1: "Gemma", 2: "Gemma2"}[version]
    config = getattr(transformers, f"{prefix}Config")(
        hidden_size=64, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=101,
    )
    return getattr(transformers, f"{prefix}ForCausalLM")(config).eval()


class LocalsGatedMLP(GatedMLP):
    """The gated feed-forward through two local variables, with Llama 4's attribute name."""

    def __init__(self, *args):
        super().__init__(*args)
        self.activation_fn = self.act_fn
        del self.act_fn

    def forward(self, x):
        gate = self.activation_fn(self.gate_proj(x))
        product = self.up_proj(x) * gate
        return self.down_proj(product)


class PackedGatedMLP(nn.Module):
    """Phi-3's packed form, of an unknown class."""

    def __init__(self, dim, hidden, act_fn):
        super().__init__()
        self.gate_up_proj = nn.Linear(dim, 2 * hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.act_fn = act_fn

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, -1)
        return self.down_proj(self.act_fn(gate) * up)


class UpFirstPackedGatedMLP(PackedGatedMLP):
    """The gate taken from the second half: another function."""

    def forward(self, x):
        up, gate = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


# A form that computes the feed-forward but is not followed (the source match is conservative):
# a local never read (its calls would be dropped).
class UnreadLocalGatedMLP(GatedMLP):
    def forward(self, x):
        extra = self.up_proj(x)  # noqa: F841 - a call whose result is dropped: not the feed-forward's count
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class ReboundLocalGatedMLP(GatedMLP):
    """A local assigned again after its one read."""

    def forward(self, x):
        up = self.up_proj(x)
        up = up * self.act_fn(self.gate_proj(x))
        return self.down_proj(up)


class ScaledGatedMLP(GatedMLP):
    def forward(self, x):
        return 0.5 * self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DroppedGatedMLP(GatedMLP):
    def __init__(self, *args):
        super().__init__(*args)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.down_proj(self.dropout(self.act_fn(self.gate_proj(x)) * self.up_proj(x)))


class LearnableSwish(nn.Module):
    """``x * sigmoid(beta * x)``: SiLU at initialisation, but not once beta is trained."""

    def __init__(self):
        super().__init__()
        self.beta = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)


class GEGLU(nn.Module):
    """The diffusers GEGLU block."""

    def __init__(self, dim_in, dim_out, approximate="none", bias=True):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2, bias=bias)
        self.approximate = approximate

    def forward(self, x):
        hidden, gate = self.proj(x).chunk(2, dim=-1)
        return hidden * F.gelu(gate, approximate=self.approximate)


class FeedForward(nn.Module):
    """The diffusers FeedForward layout: ``net = [GEGLU, Dropout, Linear]``."""

    def __init__(self, dim, inner, approximate="none", bias=True):
        super().__init__()
        self.net = nn.ModuleList([GEGLU(dim, inner, approximate, bias), nn.Dropout(0.0), nn.Linear(inner, dim)])

    def forward(self, x):
        for module in self.net:
            x = module(x)
        return x


class Composite(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = GatedMLP(16, 24, nn.SiLU())
        self.ff = FeedForward(16, 12)
        self.head = nn.Sequential(nn.Linear(16, 8), nn.SiLU(), nn.Linear(8, 1))

    def forward(self, x):
        return self.head(self.ff(self.mlp(x)))


class Wrapper(nn.Module):
    def __init__(self, *blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------
def _output(model, inputs):
    out = model(inputs)
    return getattr(out, "logits", out)  # a transformers model returns a ModelOutput


def _output_and_grads(model, inputs, weights):
    model.zero_grad(set_to_none=True)
    out = _output(model, inputs)
    (out * weights).sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


def _assert_same_results(model, reference, inputs, tolerance):
    """Outputs and all parameter gradients of ``sum(output * random)`` agree."""
    with torch.no_grad():
        weights = torch.randn_like(_output(reference, inputs))
    ref_out, ref_grads = _output_and_grads(reference, inputs, weights)
    out, grads = _output_and_grads(model, inputs, weights)
    assert rel_err(out, ref_out) < tolerance, f"output: relative error {rel_err(out, ref_out):.3e}"
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        err = rel_err(grad, ref_grads[name])
        assert err < tolerance, f"grad of {name}: relative error {err:.3e}"


def _snapshot(model):
    """State-dict keys and parameter objects, to check that patching changes neither."""
    return list(model.state_dict()), dict(model.named_parameters())


def _assert_same_snapshot(model, snapshot):
    keys, params = snapshot
    assert list(model.state_dict()) == keys
    now = dict(model.named_parameters())
    assert now.keys() == params.keys()
    assert all(now[name] is params[name] for name in params), "parameters were copied"


# --------------------------------------------------------------------------------------
# Hugging Face Llama
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, recompute", [(torch.float32, None), (torch.float32, True), (F64, None)])
def test_llama_patch_matches_and_unpatch_restores(dtype, recompute):
    model = _tiny_llama().to(dtype)
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)
    originals = [layer.mlp for layer in model.model.layers]
    inputs = torch.randint(0, 101, (2, 9))

    result = fusedmlp.patch(model, recompute=recompute)

    assert result.model is model
    assert [tuple(r) for r in result] == [(f"model.layers.{i}.mlp", "LlamaMLP", "SwiGLU") for i in range(2)]
    for layer, original in zip(model.model.layers, originals):
        assert type(layer.mlp) is fusedmlp.SwiGLU
        assert layer.mlp.gate_proj is original.gate_proj and layer.mlp.down_proj is original.down_proj
        assert recompute is None or layer.mlp.recompute is recompute
    _assert_same_snapshot(model, snapshot)
    _assert_same_results(model, reference, inputs, MODEL_TOLERANCE[dtype])

    restored = fusedmlp.unpatch(model)

    assert [tuple(r) for r in restored] == [(f"model.layers.{i}.mlp", "SwiGLU", "LlamaMLP") for i in range(2)]
    assert all(layer.mlp is original for layer, original in zip(model.model.layers, originals))
    _assert_same_snapshot(model, snapshot)
    with torch.no_grad():
        assert torch.equal(_output(model, inputs), _output(reference, inputs))


def test_llama_copy_leaves_the_original_untouched():
    model = _tiny_llama()
    state = {name: t.clone() for name, t in model.state_dict().items()}

    result = fusedmlp.patch(model, copy=True)

    patched = result.model
    assert patched is not model and len(result) == 2
    assert all(type(layer.mlp).__name__ == "LlamaMLP" for layer in model.model.layers)
    assert all(type(layer.mlp) is fusedmlp.SwiGLU for layer in patched.model.layers)
    assert not {id(p) for p in model.parameters()} & {id(p) for p in patched.parameters()}
    assert fusedmlp.unpatch(model) == []
    _assert_same_results(patched, model, torch.randint(0, 101, (1, 6)), MODEL_TOLERANCE[torch.float32])
    assert list(patched.state_dict()) == list(state)
    assert all(torch.equal(t, state[name]) for name, t in model.state_dict().items())


def test_llama_mlp_with_a_bias_is_left_alone():
    model = _tiny_llama(mlp_bias=True)
    assert fusedmlp.patch(model) == []
    assert all(type(layer.mlp).__name__ == "LlamaMLP" for layer in model.model.layers)


@pytest.mark.parametrize("make, old_type, activation", [
    (lambda: _tiny_gemma(1), "GemmaMLP", "gelu_tanh"),
    (lambda: _tiny_gemma(2), "Gemma2MLP", "gelu_tanh"),
    (lambda: _tiny_llama(hidden_act="gelu"), "LlamaMLP", "gelu"),
    (lambda: _tiny_llama(hidden_act="relu"), "LlamaMLP", "relu"),
    (_tiny_phi3, "Phi3MLP", "silu"),
], ids=["gemma", "gemma2", "llama-gelu", "llama-relu", "phi3"])
def test_gated_feed_forwards_with_other_activations(make, old_type, activation):
    """Gemma's GeGLU feed-forward (and a Llama configured with another hidden_act): a SwiGLU
    with the gate's activation; Phi-3's packed gate_up_proj: a PackedSwiGLU. Same logits and
    gradients; unpatch restores."""
    model = make().double()
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)
    inputs = torch.randint(0, 101, (2, 9))

    result = fusedmlp.patch(model)

    new_type = "PackedSwiGLU" if old_type == "Phi3MLP" else "SwiGLU"
    assert [tuple(r) for r in result] == [(f"model.layers.{i}.mlp", old_type, new_type) for i in range(2)]
    assert all(layer.mlp.activation == activation for layer in model.model.layers)
    _assert_same_snapshot(model, snapshot)
    _assert_same_results(model, reference, inputs, MODEL_TOLERANCE[F64])
    assert len(fusedmlp.unpatch(model)) == 2
    assert all(type(layer.mlp).__name__ == old_type for layer in model.model.layers)


# --------------------------------------------------------------------------------------
# Rule 1 on classes transformers does not know
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("act_fn, activation", [
    (nn.SiLU(), "silu"), (nn.SiLU(inplace=True), "silu"), (F.silu, "silu"), (nn.GELU(approximate="tanh"), "gelu_tanh"),
    (nn.GELU(), "gelu"), (F.gelu, "gelu"), (nn.ReLU(), "relu"), (nn.Sigmoid(), "sigmoid"), (nn.Identity(), "identity"),
], ids=["SiLU", "inplace", "F.silu", "GELU-tanh", "GELU", "F.gelu", "ReLU", "Sigmoid", "Identity"])
def test_swiglu_look_alike_is_replaced(act_fn, activation):
    model = Wrapper(GatedMLP(20, 37, act_fn), GatedMLP(20, 11, act_fn)).to(F64)
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)

    result = fusedmlp.patch(model)

    assert [tuple(r) for r in result] == [(f"blocks.{i}", "GatedMLP", "SwiGLU") for i in range(2)]
    assert all(block.activation == activation for block in model.blocks)
    _assert_same_snapshot(model, snapshot)
    _assert_same_results(model, reference, torch.randn(3, 5, 20, dtype=F64), MODEL_TOLERANCE[F64])


def test_llama4_mlp_and_locals_are_replaced():
    """Llama 4's ``Llama4TextMLP`` (``activation_fn``, the product in a local variable), a
    forward through two locals and one through a local assigned again: SwiGLU, same results."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama4 import modeling_llama4

    config = transformers.Llama4TextConfig(hidden_size=24, intermediate_size=40, intermediate_size_mlp=40)
    model = Wrapper(modeling_llama4.Llama4TextMLP(config), LocalsGatedMLP(24, 16, nn.SiLU()),
                    ReboundLocalGatedMLP(24, 16, nn.SiLU())).to(F64)
    reference = copy.deepcopy(model)

    result = fusedmlp.patch(model)

    assert [tuple(r) for r in result] == [("blocks.0", "Llama4TextMLP", "SwiGLU"),
                                          ("blocks.1", "LocalsGatedMLP", "SwiGLU"),
                                          ("blocks.2", "ReboundLocalGatedMLP", "SwiGLU")]
    _assert_same_results(model, reference, torch.randn(3, 5, 24, dtype=F64), MODEL_TOLERANCE[F64])


def test_packed_gated_mlp_is_replaced_only_as_it_computes():
    """A packed gate_up_proj unpacked as (gate, up): a PackedSwiGLU with the probed activation,
    same results; unpacked as (up, gate) it is another function and is left alone."""
    model = Wrapper(PackedGatedMLP(20, 12, nn.GELU(approximate="tanh"))).to(F64)
    reference = copy.deepcopy(model)

    result = fusedmlp.patch(model)

    assert [tuple(r) for r in result] == [("blocks.0", "PackedGatedMLP", "PackedSwiGLU")]
    assert model.blocks[0].activation == "gelu_tanh"
    _assert_same_results(model, reference, torch.randn(3, 5, 20, dtype=F64), MODEL_TOLERANCE[F64])
    swapped = Wrapper(UpFirstPackedGatedMLP(20, 12, nn.SiLU()))
    assert fusedmlp.patch(swapped) == []



def _with_hook(module, child=None):
    (getattr(module, child) if child else module).register_forward_hook(lambda *args: None)
    return module


@pytest.mark.parametrize("make", [
    lambda: GatedMLP(8, 12, nn.Softplus()),
    lambda: GatedMLP(8, 12, nn.Tanh()),
    lambda: GatedMLP(8, 12, LearnableSwish()),
    lambda: GatedMLP(8, 12, lambda x: x * torch.sigmoid(x)),
    lambda: GatedMLP(8, 12, nn.SiLU(), bias=True),
    lambda: ScaledGatedMLP(8, 12, nn.SiLU()),
    lambda: DroppedGatedMLP(8, 12, nn.SiLU()),
    lambda: UnreadLocalGatedMLP(8, 12, nn.SiLU()),
    lambda: _with_hook(GatedMLP(8, 12, nn.SiLU())),
    lambda: _with_hook(GatedMLP(8, 12, nn.SiLU()), "up_proj"),
], ids=["softplus", "tanh", "learnable-swish", "lambda", "bias", "scaled", "dropout", "unread-local", "hook",
        "child-hook"])
def test_gated_mlp_that_may_not_be_swiglu_is_left_alone(make):
    model = Wrapper(make())
    block = model.blocks[0]
    assert fusedmlp.patch(model) == []
    assert model.blocks[0] is block


_SEPARATE = "self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))"


@pytest.mark.parametrize("body, expected", [
    (f"return {_SEPARATE}", ("separate", "act_fn")),
    (f"return {_SEPARATE.replace('act_fn', 'activation_fn')}", ("separate", "activation_fn")),
    ("g = self.act_fn(self.gate_proj(x))\n    return self.down_proj(self.up_proj(x) * g)", ("separate", "act_fn")),
    ("h = self.gate_proj(x)\n    h = self.act_fn(h) * self.up_proj(x)\n    return self.down_proj(h)",
     ("separate", "act_fn")),
    ("a, b = self.gate_up_proj(x).chunk(2, dim=-1)\n    return self.down_proj(b * self.act_fn(a))",
     ("packed", "act_fn")),
    ("h = self.gate_up_proj(x)\n    g, h = h.chunk(2, -1)\n    h = h * self.activation_fn(g)\n"
     "    return self.down_proj(h)", ("packed", "activation_fn")),
    # not followed
    ("a, b = self.gate_up_proj(x).chunk(2, dim=-1)\n    return self.down_proj(a * self.act_fn(b))", None),
    ("a, b = self.gate_up_proj(x).chunk(2, dim=0)\n    return self.down_proj(b * self.act_fn(a))", None),
    ("a, b = self.gate_up_proj(x).chunk(3, dim=-1)\n    return self.down_proj(b * self.act_fn(a))", None),
    ("a, a = self.gate_up_proj(x).chunk(2, dim=-1)\n    return self.down_proj(a * self.act_fn(a))", None),
    ("g = self.gate_proj(x)\n    return self.down_proj(self.act_fn(g) * self.up_proj(x)) + 0 * g", None),
    ("g = self.gate_proj(x)\n    g = self.gate_proj(x)\n    return self.down_proj(self.act_fn(g) * self.up_proj(x))",
     None),
    (f"y = {_SEPARATE}\n    y = 2 * y\n    return y", None),
    (f"self.cache = x\n    return {_SEPARATE}", None),
    (f"a = 1\n    b = 2\n    c = 3\n    d = 4\n    return {_SEPARATE}", None),
    (f"return {_SEPARATE.replace('self.up_proj(x)', 'self.up_proj(2 * x)')}", None),
    (f"return {_SEPARATE.replace('self.gate_proj', 'self.up_proj', 1)}", None),
])
def test_gated_forward_source_forms(body, expected, tmp_path):
    """Rule 1's source match on forward bodies written out: what each computes decides."""
    import importlib.util

    from fusedmlp.nn.patch import _gated_form

    path = tmp_path / "gated_forward.py"
    path.write_text(f"def forward(self, x):\n    {body}\n")
    spec = importlib.util.spec_from_file_location(f"gated_forward_{abs(hash(body))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a file, so that inspect.getsource reads the source
    assert _gated_form(module.forward) == expected


# --------------------------------------------------------------------------------------
# Rule 2: diffusers-style GEGLU
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("approximate, bias", [("none", True), ("tanh", True), ("none", False)])
def test_geglu_block_is_replaced(approximate, bias):
    model = Wrapper(FeedForward(24, 37, approximate, bias)).to(F64)
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)
    proj = model.blocks[0].net[0].proj

    result = fusedmlp.patch(model)

    assert [tuple(r) for r in result] == [("blocks.0.net.0", "GEGLU", "PatchedGEGLU")]
    fused = model.blocks[0].net[0]
    assert type(fused) is PatchedGEGLU and fused.proj is proj
    assert fused.activation == {"none": "gelu", "tanh": "gelu_tanh"}[approximate]
    _assert_same_snapshot(model, snapshot)
    _assert_same_results(model, reference, torch.randn(2, 7, 24, dtype=F64), MODEL_TOLERANCE[F64])


def test_geglu_with_unknown_approximation_is_left_alone():
    block = GEGLU(8, 6)
    block.approximate = "sigmoid"
    assert fusedmlp.patch(Wrapper(block)) == []


# --------------------------------------------------------------------------------------
# Rule 3: Linear + activation in nn.Sequential
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("activations, names", [
    ((nn.ReLU(), nn.GELU(approximate="tanh"), nn.Sigmoid()), ["relu", "gelu_tanh", "sigmoid"]),
    ((nn.GELU(), nn.SiLU(inplace=True), nn.ReLU(inplace=True)), ["gelu", "silu", "relu"]),
], ids=["relu-gelu_tanh-sigmoid", "gelu-silu-relu"])
def test_sequential_linear_activation_pairs_are_fused(activations, names):
    act1, act2, act3 = activations
    model = nn.Sequential(nn.Linear(13, 40), act1, nn.Linear(40, 24), act2, nn.Linear(24, 1), act3).to(F64)
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)
    originals = list(model)

    result = fusedmlp.patch(model)

    assert len(result) == 6
    assert [type(m) for m in model] == [fusedmlp.FusedLinear, PairedActivation] * 3
    assert [m.activation for m in model[::2]] == names
    _assert_same_snapshot(model, snapshot)
    _assert_same_results(model, reference, torch.randn(3, 5, 13, dtype=F64), MODEL_TOLERANCE[F64])

    assert len(fusedmlp.unpatch(model)) == 6
    assert all(m is original for m, original in zip(model, originals))


def test_sequential_pairs_that_are_not_linear_activation_are_left_alone():
    class CustomSequential(nn.Sequential):
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(
        nn.Linear(4, 4), nn.Tanh(),  # unsupported activation
        nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4),  # the first pair is fused, not the Linear after it
        fusedmlp.FusedLinear(4, 4, activation="identity"), nn.ReLU(),  # already fused
        CustomSequential(nn.Linear(4, 4), nn.ReLU()),  # forward overridden
        nn.Linear(4, 4),  # last: nothing follows
    )
    result = fusedmlp.patch(model)
    assert [tuple(r) for r in result] == [("2", "Linear", "FusedLinear"), ("3", "GELU", "PairedActivation")]


def test_named_sequential_keeps_its_names():
    """Rule 5 keeps a Sequential's own child names (an OrderedDict, or indices with gaps), so
    the state-dict keys and attribute access stay as they were."""
    from collections import OrderedDict

    model = nn.Sequential(OrderedDict(fc1=nn.Linear(6, 16), act=nn.ReLU(), fc2=nn.Linear(16, 3))).to(F64)
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)
    holder = nn.Module()
    holder.head = model
    assert [r.new_type for r in fusedmlp.patch(holder)] == ["FusedMLP"]
    assert isinstance(holder.head, fusedmlp.FusedMLP) and holder.head.fc1 is model.fc1
    _assert_same_snapshot(holder.head, snapshot)
    holder.head.load_state_dict(reference.state_dict())  # strict: the keys of before
    _assert_same_results(holder.head, reference, torch.randn(4, 6, dtype=F64), MODEL_TOLERANCE[F64])


def test_fused_mlp_runs_changed_children_unfused():
    """A FusedMLP whose children stop computing its stack (a child replaced, one appended)
    runs them one by one, with a warning; a slice is a plain Sequential of its modules."""
    model = fusedmlp.FusedMLP([5, 12, 7, 3], activation="relu", dtype=F64)
    x = torch.randn(4, 5, dtype=F64)
    sliced = model[:2]
    assert type(sliced) is nn.Sequential and sliced[0] is model[0]
    torch.testing.assert_close(sliced(x), torch.relu(model[0](x)))
    for change in (lambda m: m.__setitem__(1, nn.Tanh()), lambda m: m.append(nn.Sigmoid())):
        changed = copy.deepcopy(model)
        change(changed)
        with pytest.warns(UserWarning, match="running them one by one"):
            out = changed(x)
        torch.testing.assert_close(out, changed.unfuse()(x))
    torch.testing.assert_close(model(x), model.unfuse()(x))  # untouched: fused, the same result


@pytest.mark.parametrize("block", ["mlp", "swiglu", "geglu"])
def test_fused_blocks_run_hooks_put_on_their_children_later(block, monkeypatch):
    """A forward hook put on a fused block's child after the block's first call runs (the block
    then calls its children, unfused, with the unpatched block's outputs and gradients); once
    the hook is removed the block runs its fused op again."""
    torch.manual_seed(5)
    make, shape = {
        "mlp": (lambda: nn.Sequential(nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, 3)), (4, 5)),
        "swiglu": (lambda: GatedMLP(6, 10, nn.SiLU()), (2, 3, 6)),
        "geglu": (lambda: FeedForward(6, 10), (4, 6)),
    }[block]
    reference, inputs = Wrapper(make()).to(F64), torch.randn(*shape, dtype=F64)
    model = copy.deepcopy(reference)
    replaced = fusedmlp.patch(model)
    fused = model.blocks[0].net[0] if block == "geglu" else model.blocks[0]
    assert type(fused).__name__ == replaced[0].new_type
    op_module, op_name = sys.modules[type(fused).__module__], block
    child = {"mlp": lambda: fused[0], "swiglu": lambda: fused.up_proj, "geglu": lambda: fused.proj}[block]()
    fused_calls, op = [], getattr(op_module, op_name)
    monkeypatch.setattr(op_module, op_name, lambda *args, **kwargs: fused_calls.append(1) or op(*args, **kwargs))
    model(inputs)  # the first call establishes the fused path
    assert len(fused_calls) == 1
    seen = []
    handle = child.register_forward_hook(lambda module, args, out: seen.append(out.detach().clone()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FusedMLP warns that it runs its children
        _assert_same_results(model, reference, inputs, MODEL_TOLERANCE[F64])
    assert len(fused_calls) == 1 and len(seen) == 1  # the hook ran, the op did not
    handle.remove()
    _assert_same_results(model, reference, inputs, MODEL_TOLERANCE[F64])
    assert len(fused_calls) == 2 and len(seen) == 1


def test_unpatch_hands_back_parameters_reassigned_since():
    """A FusedLinear shares the Linear's Parameters, not the module: Parameters assigned to it
    after patching (load_state_dict(assign=True)) go back to the Linear on unpatch."""
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Dropout(0.0), nn.Linear(8, 2)).to(F64)
    fusedmlp.patch(model)
    assert isinstance(model[0], fusedmlp.FusedLinear)
    new_state = {key: torch.randn_like(value) for key, value in model.state_dict().items()}
    model.load_state_dict(new_state, assign=True)
    x = torch.randn(3, 6, dtype=F64)
    patched_out = model(x)
    fusedmlp.unpatch(model)
    assert type(model[0]) is nn.Linear and model[0].weight is not None
    assert torch.equal(model[0].weight, new_state["0.weight"]) and torch.equal(model[0].bias, new_state["0.bias"])
    torch.testing.assert_close(model(x), patched_out)


def test_sequential_pair_stays_right_when_broken(monkeypatch):
    """A rule 3 pair whose FusedLinear is hooked or replaced, or whose activation module is
    hooked or replaced, computes what the unpatched Sequential did, each hook seeing the values
    it saw there; the fused op runs while the pair stands, in the patched model and in copies
    of it (deepcopy, pickle), whose pairs are their own."""
    import io

    from fusedmlp.nn import linear_act as linear_act_module

    torch.manual_seed(11)
    reference = nn.Sequential(nn.Linear(6, 16), nn.GELU(approximate="tanh"), nn.LayerNorm(16), nn.Linear(16, 3)).to(F64)
    model = copy.deepcopy(reference)
    assert [r.new_type for r in fusedmlp.patch(model)] == ["FusedLinear", "PairedActivation"]
    fused_calls, op = [], linear_act_module.linear_act
    monkeypatch.setattr(linear_act_module, "linear_act", lambda *a, **k: fused_calls.append(1) or op(*a, **k))
    x = torch.randn(5, 6, dtype=F64)
    pre, act = reference[0](x), F.gelu(reference[0](x), approximate="tanh")

    _assert_same_results(model, reference, x, MODEL_TOLERANCE[F64])
    assert len(fused_calls) == 1

    for where in (0, 1):  # a hook on either module sees the unpatched model's values
        seen = []
        handle = model[where].register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
        _assert_same_results(model, reference, x, MODEL_TOLERANCE[F64])
        assert len(fused_calls) == 1 and len(seen) == 1
        want = (x, pre) if where == 0 else (pre, act)
        for got, expected in zip(seen[0], want):
            assert rel_err(got, expected) < MODEL_TOLERANCE[F64]
        handle.remove()
    _assert_same_results(model, reference, x, MODEL_TOLERANCE[F64])
    assert len(fused_calls) == 2

    for where, module in ((1, nn.Tanh()), (0, nn.Linear(6, 16).to(F64))):  # another module in either place
        changed, changed_reference = copy.deepcopy(model), copy.deepcopy(reference)
        changed[where] = module
        changed_reference[where] = copy.deepcopy(module)
        if where == 0:
            changed_reference[0].load_state_dict(module.state_dict())
        calls = len(fused_calls)
        _assert_same_results(changed, changed_reference, x, MODEL_TOLERANCE[F64])
        assert len(fused_calls) == calls
    _assert_same_results(model, reference, x, MODEL_TOLERANCE[F64])  # the copies' changes left it whole

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded[1]._pair.parent is loaded and loaded[0]._pair is loaded[1]._pair
    calls = len(fused_calls)
    _assert_same_results(loaded, reference, x, MODEL_TOLERANCE[F64])
    assert len(fused_calls) == calls + 1


@pytest.mark.parametrize("broken", [False, True], ids=["standing", "wrapped"])
def test_sequential_pair_compiles_fullgraph(broken):
    """A patched pair under torch.compile(fullgraph=True), standing (the fused op) or with its
    FusedLinear wrapped by another module (the linear and the activation apart), matches the
    Sequential."""
    torch._dynamo.reset()
    torch.manual_seed(12)
    reference = nn.Sequential(nn.Linear(6, 16), nn.SiLU(), nn.Dropout(0.0), nn.Linear(16, 3))
    model = copy.deepcopy(reference)
    fusedmlp.patch(model)
    if broken:  # wrapped as PEFT wraps a Linear: the wrapper calls it and changes its output
        class Doubled(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return 2 * self.inner(x)

        model[0], reference[0] = Doubled(model[0]), Doubled(reference[0])
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["llama", "gemma", "phi3", "sequential", "pair", "geglu"])
def test_peft_adapters_added_after_patching_still_count(where):
    """PEFT adapters added to a patched model wrap the fused blocks' projections: SwiGLU,
    PatchedGEGLU and FusedMLP then run their children unfused, a rule 3 pair's FusedLinear its
    linear alone (PEFT adds its term before the activation, as on the unpatched model), and the
    outputs and gradients are PEFT's on the unpatched model."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(3)
    if where in ("llama", "gemma"):
        model = (_tiny_llama() if where == "llama" else _tiny_gemma(1)).to(F64)
        targets, inputs = ["gate_proj", "up_proj", "down_proj"], torch.randint(0, 101, (2, 7))
    elif where == "phi3":
        model, targets, inputs = _tiny_phi3().to(F64), ["gate_up_proj", "down_proj"], torch.randint(0, 100, (2, 7))
    elif where == "sequential":
        model = Wrapper(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))).to(F64)
        model, targets, inputs = model, ["blocks.0.0", "blocks.0.2"], torch.randn(4, 6, dtype=F64)
    elif where == "pair":  # the dropout keeps it from being a whole MLP (rule 5): a pair, then a Linear
        model = Wrapper(nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Dropout(0.0), nn.Linear(16, 3))).to(F64)
        model, targets, inputs = model, ["blocks.0.0", "blocks.0.3"], torch.randn(4, 6, dtype=F64)
    else:
        model, targets, inputs = FeedForward(6, 10).to(F64), ["proj"], torch.randn(4, 6, dtype=F64)
    reference = copy.deepcopy(model)
    assert fusedmlp.patch(model)
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=targets, init_lora_weights=False)  # B nonzero
    model, reference = peft.get_peft_model(model, config), peft.get_peft_model(reference, config)
    adapters = {name: p for name, p in model.named_parameters() if "lora_" in name}
    assert adapters and all(type(m).__module__.startswith("peft") for name, m in model.named_modules()
                            if name.endswith(tuple(targets)))
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if "lora_" in name:
                p.copy_(adapters[name])
    _assert_same_results(model, reference, inputs, MODEL_TOLERANCE[F64])


# --------------------------------------------------------------------------------------
# Idempotence, sharing, options, errors
# --------------------------------------------------------------------------------------
def test_patch_is_idempotent_and_unpatch_restores_everything():
    model = Composite().to(F64)
    reference = copy.deepcopy(model)
    snapshot = _snapshot(model)
    originals = dict(model.named_modules())

    first = fusedmlp.patch(model.ff)  # a submodule first: unpatch(model) finds its record too
    second = fusedmlp.patch(model)
    patched = dict(model.named_modules())
    again = fusedmlp.patch(model)

    assert [r.new_type for r in first] == ["PatchedGEGLU"]
    assert [r.new_type for r in second] == ["SwiGLU", "FusedMLP"]  # head: a whole Sequential MLP (rule 5)
    assert again == [] and again.model is model
    assert all(patched[name] is module for name, module in model.named_modules())
    _assert_same_snapshot(model, snapshot)
    _assert_same_results(model, reference, torch.randn(5, 16, dtype=F64), MODEL_TOLERANCE[F64])

    restored = fusedmlp.unpatch(model)

    assert sorted(r.name for r in restored) == ["head", "mlp", "net.0"]
    assert dict(model.named_modules()).keys() == originals.keys()
    assert all(originals[name] is module for name, module in model.named_modules())
    assert fusedmlp.unpatch(model) == []


def test_shared_block_gets_one_shared_replacement():
    mlp = GatedMLP(8, 12, nn.SiLU())
    model = Wrapper(mlp, mlp)

    result = fusedmlp.patch(model)

    assert len(result) == 2 and model.blocks[0] is model.blocks[1]
    fusedmlp.unpatch(model)
    assert model.blocks[0] is mlp and model.blocks[1] is mlp


@pytest.mark.parametrize("recompute", [None, False, True])
def test_recompute_is_passed_on(recompute):
    model = Composite()
    fusedmlp.patch(model, recompute=recompute)
    assert model.mlp.recompute is (False if recompute is None else recompute)  # SwiGLU's default: False
    assert model.ff.net[0].recompute is (True if recompute is None else recompute)  # GEGLU's default: True


def test_bad_arguments():
    with pytest.raises(TypeError, match="nn.Module"):
        fusedmlp.patch(lambda x: x)
    with pytest.raises(TypeError, match="nn.Module"):
        fusedmlp.unpatch([nn.Linear(2, 2)])
    with pytest.raises(TypeError, match="recompute"):
        fusedmlp.patch(Composite(), recompute="yes")
