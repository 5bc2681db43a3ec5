"""``patch`` / ``unpatch``: swap the MLP blocks of an existing model for fused modules.

``patch(model)`` walks the module tree and replaces, in place, every block whose computation
it can establish exactly; everything else is left alone. The fused modules share the
original ``Parameter`` objects (nothing is copied) and keep the state-dict keys, so
optimizers, checkpoints and weight tying keep working. The rules:

1. **SwiGLU feed-forward** (and the other gated feed-forwards of its form, Gemma's GeGLU) ->
   ``fusedmlp.SwiGLU`` (sharing the three projections, with the gate's activation); with the
   gate and up projections packed in one ``gate_up_proj`` (Phi-3, GLM) ->
   ``fusedmlp.PackedSwiGLU`` (sharing both projections). A module qualifies when all of these
   hold:

   - its children are exactly ``gate_proj``, ``up_proj``, ``down_proj`` (or ``gate_up_proj``,
     ``down_proj``) and optionally ``act_fn`` (or ``activation_fn``); it holds no parameter or
     buffer of its own;
   - the projections are plain bias-free ``nn.Linear`` (not subclasses: a quantised or
     parametrised layer computes something else from its ``weight``) whose shapes chain,
     with one dtype and device;
   - ``act_fn`` (or ``activation_fn``) is one of ``fusedmlp.ACTIVATIONS``: ``F.silu`` (or
     ``F.relu``, ``F.gelu``, ``torch.sigmoid``) itself, or a stateless module of any class whose
     output on a probe tensor equals one of them (``nn.SiLU`` and transformers'
     ``SiLUActivation``: silu, as in LLaMA; transformers' ``GELUTanh`` / ``PytorchGELUTanh`` /
     ``NewGELUActivation``: gelu_tanh, as in Gemma 1-4; ``GELUActivation``: gelu; ...);
   - the source of its class's ``forward(self, x)`` computes exactly
     ``self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))``, or for the packed
     form ``gate, up = self.gate_up_proj(x).chunk(2, dim=-1)`` (or ``.chunk(2, -1)``, the gate
     half first) and ``self.down_proj(up * self.act_fn(gate))``: the operands of ``*`` in
     either order, ``activation_fn`` in place of ``act_fn``, no decorators, one ``return``
     after at most three assignments to local variables (a name may be assigned again, and each
     value it is given must be read exactly once). This is how Hugging Face transformers
     (since 4.47) writes ``LlamaMLP``, ``MistralMLP``, ``Qwen2MLP``, ``GemmaMLP``
     (``Gemma2MLP``, ``Gemma3MLP``), ``Llama4TextMLP``, ``Phi3MLP``, ``GlmMLP`` and their many
     copies (``python scripts/patch_coverage.py`` lists them). A forward doing anything else
     (dropout, scaling, clamping, the tensor-parallel slicing of transformers < 4.47, ...) or
     whose source cannot be read is not matched, whatever the class is called.

2. **Packed GEGLU** (the diffusers ``GEGLU`` block) -> ``PatchedGEGLU`` (keeps the same
   ``proj`` Linear, so the keys stay ``proj.weight`` / ``proj.bias``). A module qualifies
   when its class is named ``GEGLU``, its only child is ``proj``, a plain ``nn.Linear`` with
   an even ``out_features``, it holds no parameter or buffer of its own, and its
   ``approximate`` attribute is ``"none"`` (the default when absent: exact erf GELU) or
   ``"tanh"``. Here the class name is the contract: its forward is taken to be
   ``hidden, gate = self.proj(x).chunk(2, -1); return hidden * gelu(gate)``.

3. **Linear + activation in an** ``nn.Sequential`` (or a subclass that does not override
   ``forward``): a plain ``nn.Linear`` directly followed by ``nn.ReLU``, ``nn.GELU``
   (``approximate`` "none" or "tanh"), ``nn.SiLU``, ``nn.Sigmoid`` or ``SquaredReLU`` becomes
   ``fusedmlp.FusedLinear.from_linear(linear, activation)`` and the activation becomes a
   ``PairedActivation``: indices and keys are unchanged. The identity while the pair stands;
   once the FusedLinear is wrapped (PEFT) or replaced, or either module is hooked, the
   FusedLinear returns the linear alone and the PairedActivation applies the activation, so
   the Sequential computes what it did before.

4. **PEFT LoRA** ``Linear`` (``peft.tuners.lora.layer.Linear``, when ``peft`` is imported)
   -> ``fusedmlp.nn.peft_lora.PeftLoRALinear`` (a ``fusedmlp.LoRALinear`` that is also one of
   PEFT's tuner layers) sharing its ``base_layer``, ``lora_A`` and ``lora_B`` modules, so
   the state-dict keys stay PEFT's (``base_layer.weight``, ``lora_A.default.weight``, ...). A
   layer qualifies when it has exactly one adapter and it is the active one, adapters are
   not disabled, the adapter is plain LoRA (no DoRA or other variant, no ``lora_bias``, not
   ``fan_in_fan_out``), the base layer and both adapter matrices are plain bias-free
   ``nn.Linear`` (the base may have a bias) on one device, the adapters of the base's dtype
   or, on a 16-bit base, in fp32 (PEFT's default: the fused forward casts them, as autocast
   would), and its dropout is ``nn.Dropout`` or ``nn.Identity``. A merged layer stays merged
   (the forward runs the base layer alone, as PEFT's does); ``LoRALinear.unmerge()`` takes the
   update out again. PEFT's model-level helpers reach the patched layers as they reach their
   own: ``save_pretrained`` (the same adapter file as before patching), ``disable_adapter()``
   and ``disable_adapter_layers``, ``merge_adapter`` / ``unmerge_adapter`` and
   ``merge_and_unload``; ``unpatch`` gives PEFT's layer the state switched since (merged,
   active, disabled). Add or load adapters before patching, or unpatch first: adapters added
   after patching wrap the fused modules' Linears, which then run unfused (right, but without
   the fused kernels: the SwiGLU, GEGLU and MLP modules run their children one by one, a rule 3
   pair its linear and activation apart), and PEFT puts a second adapter into its own layers
   only.

5. **A whole MLP in an** ``nn.Sequential`` (the class itself or a subclass that does not
   override ``forward``) -> ``fusedmlp.FusedMLP`` holding the same child modules (so indices
   and keys are unchanged): its children are at least two plain ``nn.Linear`` layers, each
   followed by at most one activation module (``nn.ReLU``, ``nn.GELU`` with ``approximate``
   "none" or "tanh", ``nn.SiLU``, ``nn.Sigmoid``, ``fusedmlp.nn.mlp.SquaredReLU`` or
   ``nn.Identity``), the same one after every layer but the last (which may have its own
   or none), with chaining shapes and one dtype and device. This rule comes before rule 3,
   which then handles the Sequentials that are not whole MLPs.

A module carrying forward/backward hooks or a per-instance ``forward``, or whose bypassed
children do, is never replaced (the fused module would silently skip them). The root module
itself is never replaced. Patching again finds nothing left to replace, so ``patch`` is
idempotent; ``unpatch`` puts the original module objects back.
"""

from __future__ import annotations

import ast
import copy as _copy
import functools
import inspect
import itertools
import sys
import textwrap
import warnings
from collections.abc import Iterable
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.activations import ACTIVATIONS, activation_reference
from ..ops.glu import geglu
from ._modules import (GELU_APPROXIMATE, established, is_plain, is_plain_linear, linear_stack, module_activation,
                       plain_linears)
from .linear_act import FusedLinear, PairedActivation
from .lora import LoRALinear
from .mlp import FusedMLP
from .swiglu import PackedSwiGLU, SwiGLU
from .tensor_parallel import tensor_parallel_forward

# Plain (non-parameter) attribute of the module given to ``patch``: the swaps ``unpatch`` undoes.
_SWAPS_ATTR = "_fusedmlp_swaps"

_SWIGLU_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
_PACKED_PROJECTIONS = ("gate_up_proj", "down_proj")
_SWIGLU_ACTIVATIONS = ("act_fn", "activation_fn")  # the attribute holding the gate's activation
_CHUNK = "__chunk__"  # ``__chunk__(e, i)``: half i of ``e.chunk(2, dim=-1)``, as the templates write it
# The accepted values of ``forward(self, x)`` by form, with the caller's names for self and x and
# the activation's attribute: separate gate and up projections, or one packed ``[gate; up]``.
_GATED_RETURNS = {
    "separate": ("{s}.down_proj({s}.{a}({s}.gate_proj({x})) * {s}.up_proj({x}))",
                 "{s}.down_proj({s}.up_proj({x}) * {s}.{a}({s}.gate_proj({x})))"),
    "packed": ("{s}.down_proj(__chunk__({s}.gate_up_proj({x}), 1) * {s}.{a}(__chunk__({s}.gate_up_proj({x}), 0)))",
               "{s}.down_proj({s}.{a}(__chunk__({s}.gate_up_proj({x}), 0)) * __chunk__({s}.gate_up_proj({x}), 1))"),
}


class Replacement(NamedTuple):
    """One swapped module: its qualified name (as in ``named_modules()``) and type names."""

    name: str
    old_type: str
    new_type: str


class PatchResult(list):
    """The list of ``Replacement`` records of one ``patch``/``unpatch`` call, plus ``.model``.

    ``.model`` is the model that was changed: the argument itself, or the patched deep copy
    when ``patch(..., copy=True)``.
    """

    def __init__(self, model: nn.Module, records: Iterable[Replacement] = ()):
        super().__init__(records)
        self.model = model


class PatchedGEGLU(nn.Module):
    """Fused stand-in for a diffusers-style ``GEGLU`` block: ``x1 * gelu(x2)``, ``[x1 | x2] = proj(x)``.

    Keeps the block's ``proj`` Linear as its only child, so parameters and state-dict keys
    are those of the original block. ``activation`` is ``gelu`` (erf) or ``gelu_tanh``;
    ``recompute`` as in ``fusedmlp.geglu`` (same default as ``fusedmlp.GEGLU``).
    """

    def __init__(self, proj: nn.Linear, activation: str = "gelu", recompute: bool = True):
        super().__init__()
        self.proj = proj
        self.activation = activation
        self.recompute = recompute

    tp_mesh = None  # the device mesh once ``tensor_parallel`` has sharded this block

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        # (diffusers' GEGLU.forward takes and ignores extra arguments, a deprecated scale among them)
        if self.tp_mesh is not None:
            return tensor_parallel_forward(self, x)
        proj = self._modules["proj"]
        if not established(self, (proj,), plain_linears):  # wrapped since (a PEFT LoRA layer): run it as it is
            hidden, gate = proj(x).chunk(2, dim=-1)
            return hidden * F.gelu(gate, approximate="tanh" if self.activation == "gelu_tanh" else "none")
        return geglu(x, proj.weight, proj.bias, recompute=self.recompute, activation=self.activation)

    def extra_repr(self) -> str:
        return f"activation={self.activation}, recompute={self.recompute}"


class _Swap(NamedTuple):
    parent: nn.Module
    key: str
    name: str
    original: nn.Module
    replacement: nn.Module

    def record(self, restore: bool = False) -> Replacement:
        old, new = (self.replacement, self.original) if restore else (self.original, self.replacement)
        return Replacement(self.name, type(old).__name__, type(new).__name__)


def patch(model: nn.Module, *, copy: bool = False, recompute: Optional[bool] = None) -> PatchResult:
    """Replace the MLP blocks of ``model`` by fused modules (rules in this module's docstring).

    Args:
        model: any ``nn.Module``; changed in place unless ``copy``.
        copy: patch a ``copy.deepcopy`` of ``model`` instead and leave ``model`` untouched.
        recompute: None keeps each fused module's default; a bool is passed on to the
            ``SwiGLU``, GEGLU and ``FusedMLP`` replacements (True: save only the input for the
            backward).

    Returns:
        A ``PatchResult``: a list of ``Replacement(name, old_type, new_type)`` records, one
        per replaced submodule in traversal order (a fused Sequential pair gives two: the
        Linear and its activation), with ``.model`` the patched model (``model`` itself, or
        the copy when ``copy=True``). Patching an already patched model returns an empty list.
    """
    _check_module(model)
    if recompute is not None and not isinstance(recompute, bool):
        raise TypeError(f"recompute must be None or a bool, got {type(recompute).__name__}")
    if copy:
        model = _copy.deepcopy(model)
    options = {} if recompute is None else {"recompute": recompute}
    swaps = _plan(model, options)
    for swap in swaps:
        setattr(swap.parent, swap.key, swap.replacement)
    if swaps:
        vars(model).setdefault(_SWAPS_ATTR, []).extend(swaps)
    return PatchResult(model, [swap.record() for swap in swaps])


def unpatch(model: nn.Module) -> PatchResult:
    """Undo every ``patch`` applied to ``model`` or to one of its submodules.

    The original module objects are put back where they were. A slot changed again after
    patching is left as it is, with a warning. Returns a ``PatchResult`` of
    ``Replacement(name, fused_type, restored_type)`` records, ``.model`` being ``model``.
    """
    _check_module(model)
    restored = []
    for holder in [m for m in model.modules() if _SWAPS_ATTR in vars(m)]:
        for swap in vars(holder).pop(_SWAPS_ATTR):
            if swap.parent._modules.get(swap.key) is swap.replacement:
                _hand_back(swap.replacement, swap.original)
                setattr(swap.parent, swap.key, swap.original)
                restored.append(swap.record(restore=True))
            else:
                warnings.warn(f"fusedmlp.unpatch: {swap.name!r} was replaced after patching; left as it is",
                              stacklevel=2)
    return PatchResult(model, restored)


def _hand_back(replacement: nn.Module, original: nn.Module) -> None:
    """What the replacement holds of its own goes back to the original: a FusedLinear's
    parameters (it shares the Parameter objects, not the module, and they may have been
    reassigned since: ``load_state_dict(assign=True)``, a dtype conversion), a PeftLoRALinear's
    merge and adapter state (PEFT's layer must know whether its base weight holds the update)."""
    if isinstance(replacement, FusedLinear):
        original.weight, original.bias = replacement.weight, replacement.bias
    elif hasattr(replacement, "hand_back"):  # a PeftLoRALinear
        replacement.hand_back(original)


def _check_module(model) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _plan(model: nn.Module, options: Dict[str, bool]) -> List[_Swap]:
    """All swaps to make, found before any is made (the tree must not change while walked)."""
    swaps = []
    replacements = {}  # id(original) -> replacement: a block shared by several parents stays shared
    for parent_name, parent in model.named_modules():
        for key, child in parent._modules.items():
            if child is None:
                continue
            replacement = replacements.get(id(child))
            if replacement is None:
                replacement = _replace_block(child, options)
            if replacement is not None:
                replacements[id(child)] = replacement
                swaps.append(_Swap(parent, key, _join(parent_name, key), child, replacement))
        if isinstance(parent, nn.Sequential) and type(parent).forward is nn.Sequential.forward \
                and id(parent) not in replacements:  # a Sequential fused whole (rule 5) is left as it is
            swaps.extend(_fuse_sequential(parent, parent_name))
    return swaps


def _replace_block(module: nn.Module, options: Dict[str, bool]) -> Optional[nn.Module]:
    """The fused replacement of a SwiGLU or GEGLU block (rules 1 and 2), or None."""
    if not is_plain(module) or _has_own_state(module):
        return None
    lora = _peft_lora(module)
    if lora is not None:
        return lora
    found = _gated_projections(module)
    if found is not None:
        *projections, gate_activation = found
        fused = SwiGLU if len(projections) == 3 else PackedSwiGLU
        return fused.from_projections(*projections, activation=gate_activation, **options)
    activation = _geglu_activation(module)
    if activation is not None:
        return PatchedGEGLU(module.proj, activation, **options)
    return _sequential_mlp(module, options)


def _fuse_sequential(seq: nn.Sequential, seq_name: str) -> List[_Swap]:
    """Rule 3: each plain Linear directly followed by a supported activation module."""
    swaps = []
    items = list(seq._modules.items())
    for (lin_key, linear), (act_key, act) in itertools.pairwise(items):
        activation = module_activation(act)
        if activation not in (None, "identity") and is_plain_linear(linear):
            fused = FusedLinear.from_linear(linear, activation=activation)
            swaps.append(_Swap(seq, lin_key, _join(seq_name, lin_key), linear, fused))
            swaps.append(_Swap(seq, act_key, _join(seq_name, act_key), act,
                               PairedActivation.pair(seq, lin_key, fused, act_key, activation)))
    return swaps


def _sequential_mlp(module: nn.Module, options: Dict[str, bool]) -> Optional[FusedMLP]:
    """Rule 5: the FusedMLP standing in for a Sequential of Linear + activation layers (its
    children under their own names), or None."""
    if not isinstance(module, nn.Sequential) or type(module).forward is not nn.Sequential.forward:
        return None
    stack = linear_stack(module._modules.values())
    if stack is None or len(stack[0]) < 2:
        return None
    return FusedMLP.from_modules(module._modules, stack[1], stack[2], **options)


def _gated_projections(module: nn.Module) -> Optional[tuple]:
    """Rule 1: ``(gate_proj, up_proj, down_proj, activation)`` of a gated feed-forward, or
    ``(gate_up_proj, down_proj, activation)`` of one with the two packed; else None."""
    children = set(module._modules)
    for names in (_SWIGLU_PROJECTIONS, _PACKED_PROJECTIONS):
        if set(names) <= children <= {*names, *_SWIGLU_ACTIVATIONS}:
            break
    else:
        return None
    projections = tuple(module._modules[name] for name in names)
    if not plain_linears(projections, bias_free=True):
        return None
    *inputs, down = projections
    if 2 * down.in_features != sum(p.out_features for p in inputs) or len({p.weight.shape for p in inputs}) != 1:
        return None  # gate and up: hidden = down's input width each
    if len({(p.weight.dtype, p.weight.device) for p in projections}) != 1:
        return None
    form = _gated_form(type(module).forward)
    if form is None or form[0] != ("separate" if len(inputs) == 2 else "packed"):
        return None
    activation = _gate_activation(getattr(module, form[1], None))
    return None if activation is None else (*projections, activation)


def _geglu_activation(module: nn.Module) -> Optional[str]:
    """Rule 2: the fused activation name of a diffusers-style GEGLU block, or None."""
    if type(module).__name__ != "GEGLU" or set(module._modules) != {"proj"}:
        return None
    proj = module.proj
    if not is_plain_linear(proj) or proj.out_features % 2:
        return None
    approximate = getattr(module, "approximate", "none")
    return GELU_APPROXIMATE.get(approximate) if isinstance(approximate, str) else None


def _peft_lora(module: nn.Module) -> Optional[LoRALinear]:
    """Rule 4: the PeftLoRALinear standing in for a plain PEFT LoRA Linear, or None."""
    peft_layers = sys.modules.get("peft.tuners.lora.layer")  # a model holding PEFT layers has imported it
    if peft_layers is None or type(module) is not getattr(peft_layers, "Linear", None):
        return None
    adapters = list(module.lora_A.keys())
    if len(adapters) != 1 or list(module.active_adapters) != adapters or module.disable_adapters:
        return None
    name = adapters[0]
    if module.fan_in_fan_out or module.use_dora.get(name, False) or name in getattr(module, "lora_variant", {}) \
            or getattr(module, "lora_bias", {}).get(name, False):
        return None
    base, lora_a, lora_b = module.base_layer, module.lora_A[name], module.lora_B[name]
    if not (is_plain_linear(base) and is_plain_linear(lora_a) and is_plain_linear(lora_b)):
        return None
    if lora_a.bias is not None or lora_b.bias is not None:
        return None
    adapter_dtypes = {base.weight.dtype}
    if base.weight.dtype in (torch.float16, torch.bfloat16):  # PEFT keeps adapters in fp32 by default
        adapter_dtypes.add(torch.float32)
    if len({p.device for p in (base.weight, lora_a.weight, lora_b.weight)}) != 1 \
            or lora_a.weight.dtype not in adapter_dtypes or lora_b.weight.dtype not in adapter_dtypes:
        return None
    dropout = module.lora_dropout[name]
    if type(dropout) is nn.Dropout and is_plain(dropout):
        p = dropout.p
    elif type(dropout) is nn.Identity:
        p = 0.0
    else:
        return None
    merged = list(module.merged_adapters) == [name]
    if module.merged_adapters and not merged:
        return None
    from .peft_lora import PeftLoRALinear  # (imports peft, which the model's layers have imported)
    return PeftLoRALinear.from_peft(module, name, p, merged)


def _has_own_state(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))


# Activation functions taken as they are (not probed): F.silu, and the others rule 1 accepts.
_GATE_FUNCTIONS = {F.silu: "silu", F.relu: "relu", F.gelu: "gelu", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid"}


def _gate_activation(act) -> Optional[str]:
    """The name in ``fusedmlp.ACTIVATIONS`` of a gated feed-forward's ``act_fn``: one of
    ``_GATE_FUNCTIONS``, or a stateless module whose output on a probe tensor equals that
    activation's (SiLU for LLaMA, transformers' ``GELUTanh`` / ``NewGELUActivation`` for Gemma's
    ``gelu_tanh``, ...); None for anything else."""
    if not isinstance(act, nn.Module):
        try:
            return _GATE_FUNCTIONS.get(act)
        except TypeError:  # unhashable: none of them
            return None
    if not is_plain(act) or _has_own_state(act) or any(True for _ in act.children()):
        return None
    probe = torch.linspace(-12.0, 12.0, steps=97, dtype=torch.float32, device="cpu")
    try:
        with torch.no_grad():
            out = act(probe.clone())  # a clone: an in-place activation must not alter the probe
    except Exception:  # whatever cannot even run on the probe is none of ours
        return None
    if not isinstance(out, torch.Tensor) or out.shape != probe.shape or out.dtype != probe.dtype:
        return None
    for name in ACTIVATIONS:
        if torch.allclose(out, activation_reference(probe, name), rtol=1e-5, atol=1e-6):
            return name
    return None


@functools.cache
def _gated_form(forward) -> Optional[Tuple[str, str]]:
    """``(form, attribute)`` where the source of ``forward`` computes one of ``_GATED_RETURNS``
    (see rule 1): the form's name and the attribute (``act_fn`` or ``activation_fn``) holding the
    gate's activation; None where it computes anything else."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return None
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, ast.FunctionDef) or fn.decorator_list:
        return None
    args = fn.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults or len(args.args) != 2:
        return None
    returned = _returned_expression(fn.body)
    if returned is None:
        return None
    self_name, x_name = (arg.arg for arg in args.args)
    for form, templates in _GATED_RETURNS.items():
        for attr in _SWIGLU_ACTIVATIONS:
            if any(ast.dump(returned) == ast.dump(ast.parse(t.format(s=self_name, x=x_name, a=attr)).body[0].value)
                   for t in templates):
                return form, attr
    return None


def _returned_expression(body: List[ast.stmt]) -> Optional[ast.expr]:
    """The returned expression of ``body`` (after a docstring) with its local variables written
    out, or None. Up to three assignments may precede the ``return``: ``v = e``, or
    ``a, b = e.chunk(2, dim=-1)`` (the halves written ``__chunk__(e, 0)`` and ``__chunk__(e, 1)``);
    a name may be assigned again, and each value a name is given must be read exactly once
    before that or the return. A value read once keeps the calls' count (an unread one would
    drop calls, one read twice repeat them); their order does not change what the accepted
    forms compute."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body or len(body) > 4 or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return None
    bindings: Dict[str, ast.expr] = {}
    reads: Dict[str, int] = {}

    def read(expression):  # the expression with the bound names written out, their reads counted
        for node in ast.walk(expression):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bindings:
                reads[node.id] += 1
        return _with_bindings(expression, bindings)

    for statement in body[:-1]:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        target = statement.targets[0]
        if isinstance(target, ast.Name):
            new = {target.id: read(statement.value)}
        else:
            halved = _chunked_in_two(statement.value)
            names = [t.id for t in target.elts if isinstance(t, ast.Name)] if isinstance(target, ast.Tuple) else []
            if halved is None or len(names) != 2 or len(set(names)) != 2:
                return None
            whole = read(halved)
            new = {name: ast.Call(func=ast.Name(id=_CHUNK, ctx=ast.Load()), args=[whole, ast.Constant(value=i)],
                                  keywords=[]) for i, name in enumerate(names)}
        if any(reads.get(name, 1) != 1 for name in new):
            return None  # a value given up unread or read twice
        bindings.update(new)
        reads.update(dict.fromkeys(new, 0))
    returned = read(body[-1].value)
    return returned if all(count == 1 for count in reads.values()) else None


def _chunked_in_two(expression: ast.expr) -> Optional[ast.expr]:
    """``e`` where ``expression`` is ``e.chunk(2, dim=-1)`` or ``e.chunk(2, -1)``, else None."""
    if not (isinstance(expression, ast.Call) and isinstance(expression.func, ast.Attribute)
            and expression.func.attr == "chunk"):
        return None
    args = [ast.dump(a) for a in expression.args]
    keywords = {k.arg: ast.dump(k.value) for k in expression.keywords}
    two, last = ast.dump(ast.Constant(value=2)), ast.dump(ast.parse("-1").body[0].value)
    if (args, keywords) in (([two], {"dim": last}), ([two, last], {})):
        return expression.func.value
    return None


def _with_bindings(expression: ast.expr, bindings: Dict[str, ast.expr]) -> ast.expr:
    """``expression`` with each name of ``bindings`` it reads replaced by the bound expression."""

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, node):
            return _copy.deepcopy(bindings[node.id]) if isinstance(node.ctx, ast.Load) and node.id in bindings else node

    return Substitute().visit(_copy.deepcopy(expression))
