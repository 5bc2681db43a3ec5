"""Kernel launches with little host time: a compiled kernel is reused straight through its
launcher once Triton has compiled (and tuned) it for the same call.

Why: at the small shapes of DLRM MLPs, LoRA adapters and short sequences the GPU work of a
fused op lasts tens of microseconds, and Triton's own launch path (the autotuner's lookup,
argument binding, specialisation, the cache key built from a string of the options, the
check of global values) costs host time on every call: on the H200 machine here the fused
MLP's forward launch took 47-52 µs of host time through Triton and 32-38 µs through this
cache, allocations included (benchmarks/mlp_host_time.py). The first call
of a kind goes through Triton; it returns the compiled kernel and (through the autotuner) the
chosen config, which are filed under a key that captures everything Triton specialises on:

- tensors: dtype and whether the data pointer is 16-byte aligned;
- integers that are not constexpr: == 1, divisible by 16, fits in int32; floats: nothing;
- constexpr arguments, launch options (num_warps, ...) and everything else (strings, dtypes):
  the value itself; tuples are keyed element by element;
- tensor descriptors: the base's dtype and alignment (the block shape follows from the config);
- the autotune key's arguments by value, the current device.

Later calls with the same key go straight to the compiled kernel's launcher. The key is at
least as fine as Triton's own, so a cached kernel is only reused where Triton would reuse it.

The reuse runs on the Triton versions it was written against (3.6, whose launcher signature
it calls) and only when no launch hook is installed (profilers such as proton install one);
otherwise, and with ``FUSEDMLP_FAST_LAUNCH=0``, every launch takes Triton's own path.
"""

from __future__ import annotations

import inspect
import os

import torch
import triton

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton
    TensorDescriptor = ()

# The Triton interpreter is on (set before fusedmlp loads); every kernel module reads it from here.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_SUPPORTED = triton.__version__.startswith("3.6.")
FAST_LAUNCH = (_SUPPORTED and not INTERPRET
               and os.environ.get("FUSEDMLP_FAST_LAUNCH", "1") not in ("", "0"))
_INT32 = (-(2**31), 2**31 - 1)


def _hooks_installed() -> bool:
    """A launch hook is installed (Triton keeps them as chains of calls; older ones as a callable)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is None:
        return False
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def _value_key(value):
    """The part of a non-constexpr argument that Triton specialises on."""
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() % 16 == 0)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value == 1, value % 16 == 0, _INT32[0] <= value <= _INT32[1])
    if isinstance(value, float):
        return ("f",)  # a runtime float is an fp32 argument, never specialised
    if isinstance(value, tuple):
        return tuple(_value_key(v) for v in value)
    if TensorDescriptor and isinstance(value, TensorDescriptor):
        return ("desc", value.base.dtype, value.base.data_ptr() % 16 == 0, len(value.shape))
    return value  # strings, dtypes, None: by value (finer than Triton: only costs a miss)


class FastLaunch:
    """Reuse of compiled launches of one ``@triton.jit`` kernel (see the module docstring).

    ``call(run, grid, args, kwargs, by_value=())``: ``run()`` launches through Triton and
    returns ``(compiled kernel, meta)`` where ``meta`` holds the config's meta-parameters (and
    num_warps / num_stages, which the launcher ignores); ``by_value`` names arguments to key by
    value (the autotune key). ``pre_hook(dict)`` of the config, if any, runs on every launch.
    """

    def __init__(self, kernel, pre_hook=None):
        self.kernel = kernel
        self.pre_hook = pre_hook
        self.cache = {}
        self.hits = 0  # launches served from the cache (the tests read it)
        # the interpreter's kernels carry no parameter list: they always take Triton's path
        self.supported = hasattr(kernel, "params") and hasattr(kernel, "arg_names")
        if not self.supported:
            return
        self.arg_names = list(kernel.arg_names)
        self.constexpr = {p.name for p in kernel.params if p.is_constexpr}
        self.runtime = set(self.arg_names) - self.constexpr
        self.defaults = {p.name: p.default for p in kernel.params if p.default is not inspect.Parameter.empty}

    def _key(self, args, kwargs, by_value):
        parts = [torch.cuda.current_device()]
        constexpr, names, runtime = self.constexpr, self.arg_names, self.runtime
        for i, value in enumerate(args):
            parts.append(value if names[i] in constexpr else _value_key(value))
        for name, value in kwargs.items():
            # runtime arguments by what Triton specialises on; constexprs, the autotune key
            # and launch options (num_warps, ...) by value
            parts.append((name, _value_key(value) if name in runtime and name not in by_value else value))
        return tuple(parts)

    def call(self, run, grid, args, kwargs, by_value=()):
        if not FAST_LAUNCH or not self.supported or _hooks_installed():
            return run()
        try:
            key = self._key(args, kwargs, by_value)
            hash(key)
        except TypeError:  # an unhashable argument: Triton's path
            return run()
        entry = self.cache.get(key)
        if entry is None:
            compiled, meta = run()
            if compiled is not None and hasattr(compiled, "packed_metadata"):
                self.cache[key] = (compiled, dict(meta))
            return compiled, meta
        compiled, meta = entry
        self.hits += 1
        merged = {**kwargs, **meta}
        if self.pre_hook is not None:
            self.pre_hook(merged)
        bound = list(args)
        for name in self.arg_names[len(args):]:
            bound.append(merged[name] if name in merged else self.defaults[name])
        grid = grid(merged) if callable(grid) else grid
        device = torch.cuda.current_device()
        stream = torch._C._cuda_getCurrentRawStream(device)
        compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                     compiled.function, compiled.packed_metadata, None, None, None, *bound)
        return entry


def launch(kernel, grid, *args, **kwargs):
    """``kernel[grid](*args, **kwargs)`` through the compiled-launch cache (one fixed config:
    meta-parameters, num_warps and num_stages come in ``kwargs``)."""
    fast = kernel.__dict__.get("_fusedmlp_fast")
    if fast is None:
        fast = kernel._fusedmlp_fast = FastLaunch(kernel)
    return fast.call(lambda: (kernel[grid](*args, **kwargs), {}), grid, args, kwargs)
