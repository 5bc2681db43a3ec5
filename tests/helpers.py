"""Shared test helpers: the error metric, per-dtype tolerances and common checks."""

import contextlib
import json
import os
import subprocess
import sys

import torch
from torch import nn

import fusedmlp.ops.mlp as mlp_ops

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


def every_other(t: torch.Tensor) -> torch.Tensor:
    """A view of ``t``'s values with stride 2 along its first dimension (a strided bias)."""
    buffer = t.new_zeros((2 * t.shape[0], *t.shape[1:]))
    buffer[::2] = t
    return buffer[::2]


def eager_bound(dtype, eager, ref) -> float:
    """The error bound of an op whose 16-bit intermediates are rounded as eager PyTorch rounds
    them (a stack's hidden layers, LoRA's rank product): the dtype's tolerance, or in 16 bits
    twice eager's own error against the float64 ``ref`` where that is larger."""
    if dtype in (torch.float64, torch.float32):
        return TOLERANCE[dtype]
    return max(TOLERANCE[dtype], 2 * rel_err(eager, ref))


@contextlib.contextmanager
def fp32_matmul_precision(precision: str):
    """``torch.set_float32_matmul_precision(precision)`` inside the block, the setting before it after."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def kink_free_rows(x, weights, biases, activation, last_activation, x_transform=None, margin=1e-5):
    """Mask of the rows of x whose float64 ReLU pre-activations all lie farther than ``margin``
    times their layer's RMS from 0. At a pre-activation that close to the kink, fp32 rounding
    can flip the derivative against float64 and change that row of dx by ~10%, and the row's
    share of every dW and db with it: a discontinuity of the function, not an error of the
    kernel. (fp32 GPU stacks of ~10^6 ReLU units have one or two such units per run; one
    flipped row of 2048 alone exceeds a 1e-3 bound on dx; on the top MLP's dW_0 at 8191 rows,
    errors of 0.6e-3 to 2.7e-3 were measured with them, 3e-7 without, whatever x's layout.)
    In 16 bits the flips reach farther from 0: test_fuzz.py passes the dtype's eps."""
    x = x_transform(x) if x_transform else x
    rows = x.reshape(-1, x.shape[-1]).shape[0]
    keep = torch.ones(rows, dtype=torch.bool, device=x.device)
    acts = mlp_ops.layer_activations(len(weights), mlp_ops.check_activation(activation),
                                     mlp_ops.check_activation(last_activation))
    h = x.reshape(rows, -1)
    for w, b, act in zip(weights, biases, acts):
        pre = torch.nn.functional.linear(h, w, b)
        if act == "relu":
            keep &= (pre.abs() > margin * pre.pow(2).mean().sqrt()).all(dim=1)
        h = mlp_ops.activation_reference(pre, act)
    return keep.reshape(x.shape[:-1])


def assert_close(out, ref, dtype, what=""):
    err = rel_err(out, ref)
    assert err < TOLERANCE[dtype], (
        f"{what}: relative error {err:.3e} >= {TOLERANCE[dtype]:.1e} ({dtype}, seed {torch.initial_seed()})"
    )


def check_inference_forward(monkeypatch, module, impl_name, store_of, run, reference, dtype, what=""):
    """An op in a storing mode (recompute=False, save_preact=True) where autograd records
    nothing: ``run(requires_grad)`` calls it on tensors that require grad or not, and
    ``module.<impl_name>`` is the forward implementation it calls, whose store flag
    ``store_of(args)`` reads. Under torch.no_grad and torch.inference_mode, and on tensors that
    need no gradient, the flag must be off (nothing written for a backward) and the output
    have no autograd node; with tensors that require grad outside them, the flag is on. The
    output matches ``reference`` (float64) every time."""
    flags = []
    real = getattr(module, impl_name)
    monkeypatch.setattr(module, impl_name, lambda *args: flags.append(store_of(args)) or real(*args))
    cases = [(torch.no_grad, True, False), (torch.inference_mode, True, False),
             (contextlib.nullcontext, False, False), (contextlib.nullcontext, True, True)]
    for context, requires_grad, stored in cases:
        flags.clear()
        with context():
            y = run(requires_grad)
        case = f"{what} {context.__name__}, requires_grad={requires_grad}"
        assert flags == [stored], (case, flags)
        assert (y.grad_fn is not None) == stored, case
        assert_close(y.detach(), reference, dtype, case)


def check_against_float64(fused, reference, tensors, tensors64, g, g64, what=""):
    """Run ``fused(*tensors)`` and ``reference`` in float64 on the same values (``tensors`` as
    the op gets them, not their unrounded masters ``tensors64``: with a near-cancelling output,
    16-bit input rounding alone can exceed the tolerance), backpropagate ``g``, and compare the
    output and the gradient of every tensor that requires one.

    ``tensors`` may hold None (an absent bias) and strided views (kept as they are); a tensor
    takes part in the backward when its float64 master requires grad.
    """
    dtype = g.dtype
    leaves = [None if t is None else t.detach().requires_grad_(t64.requires_grad) for t, t64 in zip(tensors, tensors64)]
    leaves64 = [None if t is None else t.detach().to(torch.float64).requires_grad_(t64.requires_grad)
                for t, t64 in zip(tensors, tensors64)]
    out = fused(*leaves)
    ref = reference(*leaves64)
    assert out.dtype == dtype and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    assert_close(out, ref, dtype, f"{what} output")
    out.backward(g)
    ref.backward(g.to(torch.float64))
    for i, (leaf, leaf64) in enumerate(zip(leaves, leaves64)):
        if leaf is None or not leaf64.requires_grad:
            continue
        assert leaf.grad is not None and leaf.grad.dtype == dtype and leaf.grad.shape == leaf.shape, f"{what} grad {i}"
        assert_close(leaf.grad, leaf64.grad, dtype, f"{what} grad of input {i}")


def check_replayed_step(forward, reference, make_inputs, dtype=torch.bfloat16, what=""):
    """A forward+backward step of ``forward(*leaves)`` captured by fusedmlp.capture_cuda_graph,
    then replayed on fresh values copied into the captured inputs (as a training loop replays
    its step): the output and every gradient against ``reference`` in float64 on those values.
    ``make_inputs()`` -> (float64 masters, g64), called twice (capture, replay)."""
    import fusedmlp

    masters, g64 = make_inputs()
    leaves = [t.detach().to(dtype).requires_grad_(t.requires_grad) for t in masters]
    wrt = [t for t in leaves if t.requires_grad]
    gy = g64.to(dtype)

    def step():
        y = forward(*leaves)
        return (y, *torch.autograd.grad(y, wrt, gy))

    graph, outputs = fusedmlp.capture_cuda_graph(step, warmup=2)
    fresh, fresh_g = make_inputs()
    with torch.no_grad():
        for leaf, value in zip(leaves, fresh):
            leaf.copy_(value)
        gy.copy_(fresh_g)
    check_replay(graph, outputs, reference, leaves, gy, dtype, what)


def check_repeated_steps(forward, reference, make_inputs, dtype=torch.bfloat16, what="", least=4):
    """A training loop's plain steps of ``forward(*leaves)`` on the same tensors, fresh values
    copied into them each step (9 steps over 5 sets of values): every step's output and every
    gradient against ``reference`` in float64 on that step's values, and every call plan that
    the steps filed (ops/_common.py ``CallPlans``) replayed in at least ``least`` of the 8
    steps after the first. The reference runs on the CPU, so that no GPU allocation but the
    steps' own moves the addresses that the caching allocator hands out (it may still take a
    step or two to settle, and alternate a transient between two addresses). ``make_inputs()``
    -> (float64 masters, g64) on the GPU; a master that requires grad gets a gradient.
    Returns {plans' owner: steps replayed}, the owner named by the op module's attribute."""
    from fusedmlp.ops._common import CallPlans, call_plans_by_name

    sets = [make_inputs() for _ in range(5)]  # allocated before the steps
    leaves = [t.detach().to(dtype).requires_grad_(t.requires_grad) for t in sets[0][0]]
    gy = sets[0][1].to(dtype)
    replayed = {id(plans): 0 for plans in CallPlans.instances}
    for step, (masters, g64) in enumerate(sets + sets[1:]):
        with torch.no_grad():
            for leaf, master in zip(leaves + [gy], list(masters) + [g64]):
                leaf.copy_(master)
                leaf.grad = None
        hits = [plans.hits for plans in CallPlans.instances]
        y = forward(*leaves)
        y.backward(gy)
        for plans, before in zip(CallPlans.instances, hits):
            replayed[id(plans)] += step > 0 and plans.hits > before
        inputs64 = [t.detach().cpu().double().requires_grad_(t.requires_grad) for t in leaves]
        y64 = reference(*inputs64)
        y64.backward(gy.cpu().double())
        assert_close(y.detach().cpu(), y64.detach(), dtype, f"{what} step {step} output")
        for index, (leaf, leaf64) in enumerate(zip(leaves, inputs64)):
            if leaf64.requires_grad:
                assert_close(leaf.grad.cpu(), leaf64.grad, dtype, f"{what} step {step} grad of input {index}")
        del y
    names = {id(plans): name for name, plans in call_plans_by_name().items()}
    filed = {names.get(id(plans), repr(plans)): replayed[id(plans)] for plans in CallPlans.instances if plans.plans}
    assert filed, f"{what}: no call plan filed"
    assert all(count >= least for count in filed.values()), (what, filed)
    return filed


def check_replay(graph, outputs, reference, leaves, gy, dtype, what=""):
    """``graph`` replayed: its ``outputs`` (the output, then the gradients of the leaves that
    require one) against ``reference`` in float64 on the values now in ``leaves`` and ``gy``."""
    graph.replay()
    torch.cuda.synchronize()
    inputs64 = [t.detach().double().requires_grad_(t.requires_grad) for t in leaves]
    y64 = reference(*inputs64)
    want = (y64, *torch.autograd.grad(y64, [t for t in inputs64 if t.requires_grad], gy.double()))
    for index, (got, ref) in enumerate(zip(outputs, want)):
        assert_close(got, ref, dtype, f"{what} replayed output {index}")


def check_backward_twice(y, leaves, g, refuses: bool):
    """Differentiate ``y`` twice through one retained graph: the same gradients both times or,
    for a store mode whose backward reused its saved pre-activations (``refuses``), a clear
    error the second time."""
    import pytest

    first = torch.autograd.grad(y, leaves, g, retain_graph=True)
    if refuses:
        with pytest.raises(RuntimeError, match="once per forward"):
            torch.autograd.grad(y, leaves, g)
        return
    for again, once in zip(torch.autograd.grad(y, leaves, g), first):
        assert torch.equal(again, once)


def backward_peak_bytes(forward, leaves, g):
    """(peak bytes one CUDA backward allocates beyond what its forward left, the gradients),
    after a warm-up step (cuBLAS allocates its workspace once, on first use)."""
    torch.autograd.grad(forward(), leaves, g)
    y = forward()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    grads = torch.autograd.grad(y, leaves, g)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, grads


@contextlib.contextmanager
def forcing_tma_config(monkeypatch, ops, launcher, index, sms=3):
    """Hopper only (skips elsewhere): inside the block ``launcher`` runs its config ``index``,
    untuned, no ping-pong kernel replaces it, and ``ops`` sizes persistent grids for ``sms``
    SMs, so that every program walks several tiles even on small test shapes."""
    import pytest

    import fusedmlp.ops._common as common

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the TMA path is for Hopper")
    monkeypatch.setattr(common, "PINGPONG", False)  # forwards with a ping-pong form take the Triton one
    monkeypatch.setattr(ops, "num_sms", lambda t: sms)
    with launcher.forcing(launcher.configs[index]):
        yield


def recording_launches(monkeypatch, launchers):
    """Each launch through ``launchers`` (kernels/configs.py ``Launcher`` objects) appended to
    the returned list: a test that a path launches none of those kernels."""
    launched = []
    for launcher in launchers:
        def recorded(*args, real=launcher.launch, **kwargs):
            launched.append(real)
            return real(*args, **kwargs)

        monkeypatch.setattr(launcher, "launch", recorded)
    return launched


def recording_module_launches(monkeypatch, module, launched=None):
    """Each kernel launched through ``module.launch`` (kernels/launch.py's ``launch`` as an ops
    module imports it) appended to ``launched`` (a new list by default), which is returned."""
    launched = [] if launched is None else launched
    real = module.launch
    monkeypatch.setattr(module, "launch", lambda kernel, *a, **k: launched.append(kernel) or real(kernel, *a, **k))
    return launched


def recording_pingpong_launches(monkeypatch, ops=None, sms=3):
    """Hopper only (skips elsewhere): the ops module ``ops`` (default: the GLU ops) sizes
    ping-pong grids for ``sms`` SMs (every program walks several tiles on small test shapes),
    and every ping-pong kernel it launches is appended to the returned list."""
    import pytest

    if ops is None:
        import fusedmlp.ops.glu as ops
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ping-pong kernels are for compute capability 9.0")
    monkeypatch.setattr(ops, "num_sms", lambda t: sms)
    kernels = []
    real = ops.launch_pingpong
    monkeypatch.setattr(ops, "launch_pingpong",
                        lambda kernel, *args, **kwargs: kernels.append(kernel) or real(kernel, *args, **kwargs))
    return kernels


def first_store_backward_errors(call: str, reference: str, shapes: dict) -> dict:
    """Relative errors against float64 of the outputs and gradients of the first store-mode
    call of an op on a GPU with the kernels' autotuning on (the test suite turns it off).

    Run in a fresh process, so the call is the first of its shape: Triton's autotuner then
    times each config several times on the caller's own tensors before the real launch, which
    is where a kernel that writes over its inputs would go wrong. ``call`` and ``reference``
    are expressions of the named tensors (``shapes``: name -> shape; inputs are bf16 with unit
    scale on the cuda device, ``g`` is the output gradient).
    """
    code = f"""
import json, torch, fusedmlp
from fusedmlp.ops.glu import geglu_reference
from fusedmlp.ops.linear_act import linear_act_reference
from fusedmlp.ops.swiglu import swiglu_reference
torch.manual_seed(0)
shapes = {shapes!r}
t = {{k: (torch.randn(s, device="cuda") / (s[-1] ** 0.5 if len(s) == 2 and k.startswith("w") else 1.0))
      for k, s in shapes.items()}}
leaves = {{k: v.to(torch.bfloat16).requires_grad_(k != "g") for k, v in t.items()}}
leaves64 = {{k: v.double().requires_grad_(k != "g") for k, v in t.items()}}
out = (lambda **a: {call})(**leaves)
ref = (lambda **a: {reference})(**leaves64)
out.backward(leaves["g"])
ref.backward(leaves64["g"].to(torch.bfloat16).double())
def err(a, r):
    return ((a.double() - r).norm() / r.norm()).item()
errors = {{"out": err(out.detach(), ref.detach())}}
errors.update({{k: err(v.grad, leaves64[k].grad) for k, v in leaves.items() if k != "g"}})
print(json.dumps(errors))
"""
    env = dict(os.environ, FUSEDMLP_AUTOTUNE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_COMPILE_PINGPONG = r"""
import json, os, re, subprocess, sys, tempfile, torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type
import fusedmlp.kernels.configs as configs

module, kernel_name, config_name, *activations = sys.argv[1:]
kernel = getattr(__import__("fusedmlp.kernels." + module, fromlist=[kernel_name]), kernel_name)
name, _, overrides = config_name.partition(":")  # NAME or NAME:{json of changed entries}
config = dict(getattr(configs, name), **json.loads(overrides or "{}"))
base = torch.empty(256, 256, dtype=torch.bfloat16)
def desc(name):  # the main loop's left operands (x, LoRA's xs, a dgrad's a and tail), [K, N] weights, [N, K] ones, an output
    # (and for LoRA's forward with xs on chip: A's tiles [R_PAD, BLOCK_K], B's [BLOCK_N, R_PAD], xs's [BLOCK_M, R_PAD])
    rank_blocks = {"rank_a_desc": ("RANK_BLOCK", "BLOCK_K"), "rank_b_desc": ("BLOCK_N", "RANK_BLOCK"),
                   "xs_out_desc": ("BLOCK_M", "RANK_BLOCK"), "xs_rank_desc": ("BLOCK_M", "RANK_BLOCK")}
    if name in rank_blocks:
        block = [config[key] for key in rank_blocks[name]]
        if name == "xs_rank_desc" and config.get("COOPERATIVE"):  # a cooperative tile's rows
            block[0] *= 2
        return mangle_type(TensorDescriptor.from_tensor(base, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)))
    rows, cols = (("BLOCK_M", "BLOCK_K") if name in ("x_desc", "gy_desc", "xs_desc", "a_desc", "tail_a_desc")
                  else ("BLOCK_K", "BLOCK_N") if name in ("wd_desc", "w_kn_desc", "tail_w_kn_desc")
                  else ("BLOCK_N", "BLOCK_K") if name.startswith("w") or name == "lora_b_desc"
                  else ("BLOCK_M", "EPILOGUE_N" if "EPILOGUE_N" in config else "BLOCK_N"))
    block = [config[rows] * (2 if rows == "BLOCK_M" and cols == "BLOCK_K" and config.get("COOPERATIVE") else 1),
             config[cols]]
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)
    return mangle_type(TensorDescriptor.from_tensor(base, block, layout))
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
try:  # the ptxas Triton itself runs for sm_90a (3.9 ships two; the older one rejects its PTX)
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(90).path
except (ImportError, TypeError, AttributeError):
    ptxas = ""
results = {}
for i, act in enumerate(activations):
    for has_bias in ((True, False) if "HAS_BIAS" in kernel.arg_names else (True,)):
        signature, constants = {}, {}
        for p in kernel.params:
            if p.is_constexpr:
                constants[p.name] = (act if p.name == "ACT" else config[p.name] if p.name in config
                                     else has_bias if p.name == "HAS_BIAS"
                                     else bool(i % 2) if p.name.startswith("STORE_") else True)
                signature[p.name] = "constexpr"
            else:
                signature[p.name] = (desc(p.name) if p.name.endswith("_desc") else "*i32" if p.name == "flags_ptr"
                                     else "*fp32" if p.name == "db_part_ptr"
                                     else "*bf16" if p.name.endswith("_ptr")
                                     else "fp32" if p.name.startswith("SCALE_") else "i32")
        positions = {(kernel.arg_names.index(k),): v for k, v in constants.items()}
        compiled = triton.compile(GluonASTSource(kernel, signature, constexprs=positions),
                                  target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": config["num_warps"], "maxnreg": config["maxnreg"]})
        ptx = compiled.asm["ptx"]
        facts = {"wgmma": "wgmma.mma_async" in ptx, "setmaxnreg": "setmaxnreg" in ptx,
                 "shared": compiled.metadata.shared, "stack": None, "serialized": None}
        if ptxas and os.path.exists(ptxas):  # C7515: ptxas made every wgmma wait for the one before
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "k.ptx"), "w") as f:
                    f.write(ptx)
                log = subprocess.run([ptxas, "-arch=sm_90a", "-v", os.path.join(tmp, "k.ptx"), "-o",
                                      os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
            if log.returncode:  # a ptxas that fails here would hide the notice
                raise RuntimeError(f"ptxas failed on {kernel_name}: {log.stderr[-2000:]}")
            facts["serialized"] = "C7515" in log.stdout + log.stderr
        if os.path.exists(cuobjdump):  # the per-thread stack: what ptxas spilled (and a few saved values)
            with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
                cubin.write(compiled.asm["cubin"])
                cubin.flush()
                usage = subprocess.run([cuobjdump, "-res-usage", cubin.name], capture_output=True, text=True).stdout
            facts["stack"] = int(re.search(r"STACK:(\d+)", usage).group(1))
        results[f"{act}/{'bias' if has_bias else 'no bias'}"] = facts
print(json.dumps(results))
"""


def compile_pingpong_for_hopper(module: str, kernel: str, config: str, activations, max_stack: int = None):
    """Compile the Gluon ping-pong kernel ``kernels/<module>.py:<kernel>`` with its config for
    sm_90a with the installed Triton (Triton compiles for a named target without a GPU), one
    activation at a time (the store flags alternate), with a bias and without where the kernel
    takes one, and assert each has its wgmma main loop, its register moves, at most 227 KiB
    of shared memory and MMAs that ptxas did not serialise (its C7515 notice, from the ptxas
    Triton compiles sm_90a with: each wgmma then waits for the one before, which cost a kernel
    8-12%): a Triton whose Gluon API moved fails here before a GPU run would. With
    ``max_stack``, also at most that many bytes of stack per thread (ptxas's spills, read with
    the cuobjdump Triton ships) where cuobjdump is there; a callable gives the bound per
    variant. In a child process: the interpreter the suite runs under turns every @triton.jit
    function into one that compiled code cannot call. Returns {"ACT/bias" or "ACT/no bias": facts}."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _COMPILE_PINGPONG, module, kernel, config, *activations], env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted({name.split("/")[0] for name in results}) == sorted(activations)
    for variant, facts in results.items():
        assert facts["wgmma"] and facts["setmaxnreg"], (variant, facts)
        assert facts["shared"] <= 227 * 1024, (variant, facts)
        assert not facts["serialized"], (variant, facts)
        if max_stack is not None and facts["stack"] is not None:
            bound = max_stack(variant) if callable(max_stack) else max_stack
            assert facts["stack"] <= bound, (variant, facts)
    return results


class GatedMLP(nn.Module):
    """A LlamaMLP look-alike of an unknown class, with any activation."""

    def __init__(self, dim, hidden, act_fn, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)
        self.act_fn = act_fn

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
