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
- integers that are not constexpr: == 1, divisible by 16, and the type their value takes (int32,
  int64, or uint64 from 2^63 on); floats: nothing;
- constexpr arguments, launch options (num_warps, ...) and everything else (strings, dtypes):
  the value itself; tuples are keyed element by element;
- tensor descriptors: the base's dtype and alignment, and their block shapes (a Triton
  kernel's follow from the config; a Gluon kernel's are named by the caller, ``launch``);
- the autotune key's arguments by value, the current device.

Later calls with the same key go straight to the compiled kernel's launcher. The key is at
least as fine as Triton's own, so a cached kernel is only reused where Triton would reuse it.

Tensor descriptors (Hopper TMA) are passed as plain tensors to every ``*_desc`` parameter:
Triton's path gets them wrapped (``as_descriptors``), and a cached launch hands Triton's C
launcher the expanded arguments of each descriptor (the filled ``CUtensorMap``, shape and
strides) from a table keyed on the tensor's address, shape and strides. A descriptor is a
pure function of those and of the compiled kernel's block shape, swizzle and dtype, so an
entry is exact whatever tensor later sits at that address. Building and filling the
descriptors of each launch anew cost the host 8-10 us per descriptor on the H200 machine
here (a LoRA forward with five: 123 us of host per call, 87 through a pointer kernel:
benchmarks/small_shape_paths.py), where most steps of a training loop reuse the addresses
of the step before.

A launch through ``launch`` (or ``configs.Launcher.launch``) may also name a ``memo``: a key
holding, exactly, everything its arguments are built from (``exact_key``: tensors by address,
shape, strides and dtype). A cached launch with a direct launcher then files the finished call
(the C launcher, its grid, its arguments with every tensor replaced by its address, inside
tuples too) under that key, and a later call with the same key is that call again, after the
checks of every launch (the cache on, no hook) and the stream's lookup: ``launch_prepared``.
The callers ask for it before they build the arguments, so a training loop's repeated calls
skip that work, the lookup of the compiled kernel and the descriptors' table:
``launch_pingpong`` (ops/_common.py) keys every launch so, and the whole-MLP op (ops/mlp.py)
each of its kernels. A pointer kernel (no descriptor) has Triton's C launcher as its direct
launcher; its hits take it only when they file a call. A config's pre-hook runs on every
launch, so a launch that has one files nothing, unless all the hook does is give descriptors
their block shapes (the TMA configs'), which the direct path does itself.

An op may go one step further for a whole call (ops/_common.py ``CallPlans``): inside
``recording()`` every launch of the thread is noted in order, as its finished call where it
filed one or launched one again, else as None; a call whose launches were all finished calls
can be replayed from them, by a key of the op's own arguments, without the work before its
launches either. ``forced()`` marks the blocks where a test forces a config or a form; plans
are neither filed nor replayed inside them.

The reuse runs on the Triton versions it was checked against, 3.6 to 3.9 (the same
specialisation rules, which a test compares with the installed Triton's own, and the same
``compiled.run`` signature; the C launcher behind the descriptor wrapper is called in one of
two layouts, 3.6's and that of 3.7 to 3.9, ``_LAUNCHER_LAYOUT``), and only when no launch hook
is installed (profilers such as proton install one); otherwise, and with
``FUSEDMLP_FAST_LAUNCH=0``, every launch takes Triton's own path.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading

import torch
import triton

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton
    TensorDescriptor = ()

# The Triton interpreter is on (set before fusedmlp loads); every kernel module reads it from here.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
# Triton versions the cache was checked against (their specialisation rules and compiled.run's
# signature). Their C launchers take descriptors expanded here (_DirectLaunch) in one of two
# layouts: 3.6's has the kernel's arguments spread after the scratch buffers, 3.7-3.9's as one
# sequence after the argument annotations and the kernel signature.
_SUPPORTED = triton.__version__.startswith(("3.6.", "3.7.", "3.8.", "3.9."))
_LAUNCHER_LAYOUT = ("spread" if triton.__version__.startswith("3.6.")
                    else "sequence" if _SUPPORTED else None)
FAST_LAUNCH = (_SUPPORTED and not INTERPRET
               and os.environ.get("FUSEDMLP_FAST_LAUNCH", "1") not in ("", "0"))
# Cached launches expand descriptors themselves (below); False sends them through Triton's
# launcher wrapper instead (benchmarks/small_shape_paths.py times both in one process).
DIRECT_DESCRIPTORS = True
# Launches named by a memo key are filed as finished calls and launched again as such; False
# sends every launch through the cache's usual path (benchmarks/mlp_plain_host.py times both).
FINISHED_CALLS = True
DESCRIPTOR_SUFFIX = "_desc"  # parameters that take a tensor descriptor (a plain tensor from the ops)
_FILLED_PER_KERNEL = 256  # expanded descriptors kept per compiled kernel (the table is cleared when full)
_PREPARED_PER_KERNEL = 256  # finished calls kept per kernel under their memo keys (cleared when full)
# Compile options of every launch. Multiply-adds fused into FMAs: the kernels were built,
# tuned and measured so (Triton 3.6's default); Triton 3.9 warns that its default turns to
# unfused in 3.10 unless a launch asks (TRITON_FORCE_DISABLE_FP_FUSION=1 still wins).
COMPILE_OPTIONS = {"enable_fp_fusion": True}


def as_descriptors(kwargs: dict) -> dict:
    """``kwargs`` with each tensor passed to a ``*_desc`` parameter wrapped in its own
    TensorDescriptor (a placeholder block shape: the config's pre-hook sets the real one)."""
    out = dict(kwargs)
    for name, value in kwargs.items():
        if name.endswith(DESCRIPTOR_SUFFIX) and isinstance(value, torch.Tensor):
            out[name] = TensorDescriptor.from_tensor(value, [16, 16])
    return out


def gluon_descriptors(kwargs: dict, blocks: dict) -> dict:
    """``kwargs`` with each tensor passed to a ``*_desc`` parameter wrapped in a Gluon tensor
    descriptor of block shape ``blocks[name]`` and the default swizzled layout for it."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    dtypes = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}
    out = dict(kwargs)
    for name, value in kwargs.items():
        if name.endswith(DESCRIPTOR_SUFFIX) and isinstance(value, torch.Tensor):
            block = list(blocks[name])
            layout = gl.NVMMASharedLayout.get_default_for(block, dtypes[value.dtype])
            out[name] = GluonDescriptor.from_tensor(value, block, layout)
    return out


_THREAD_STATE = threading.local()
_FORCED = [0]  # forcing blocks open (``forced``)


@contextlib.contextmanager
def recording():
    """Inside the block, this thread's launches are noted, in order, in the yielded list: each
    launch's finished call where it filed one (a launch named by a memo key, with a direct
    launcher) or launched one again (``launch_prepared``), else None (Triton's path, a miss,
    an unfiled hit; ``spoil_recording``). Blocks nest; an inner one notes for itself alone."""
    outer = getattr(_THREAD_STATE, "recording", None)
    calls = _THREAD_STATE.recording = []
    try:
        yield calls
    finally:
        _THREAD_STATE.recording = outer


def _note(finished) -> None:
    calls = getattr(_THREAD_STATE, "recording", None)
    if calls is not None:
        calls.append(finished)


def spoil_recording() -> None:
    """Note, in an open ``recording``, something that a replay of its finished calls would not
    repeat (a choice that was not filed, so that a later call may choose otherwise)."""
    _note(None)


@contextlib.contextmanager
def forced():
    """Mark a block where a config or a form is forced (``configs.Launcher.forcing``, the ops'
    ``FastestForm.forcing``): ``forcing_active()`` is True inside it."""
    _FORCED[0] += 1
    try:
        yield
    finally:
        _FORCED[0] -= 1


def forcing_active() -> bool:
    return _FORCED[0] > 0


def finished_calls_on() -> bool:
    """Whether finished calls may be launched again now: cached launches and finished calls
    on (FAST_LAUNCH is off under the interpreter), no launch hook installed."""
    return FAST_LAUNCH and FINISHED_CALLS and not _hooks_installed()


def replay(calls, device: int) -> None:
    """Launch ``calls`` (finished calls) in order on ``device``'s current stream, its context
    bound to this thread first; each is noted in an open ``recording``."""
    if not INTERPRET:  # (the tests turn the cache on under the interpreter)
        bind_cuda_context()
    stream = torch._C._cuda_getCurrentRawStream(device)
    for call in calls:
        call(stream)
        _note(call)


def bind_cuda_context() -> None:
    """Make the current device's CUDA context current on this thread, once per thread.

    Filling a tensor descriptor (``cuTensorMapEncodeTiled``, by Triton's launcher wrapper or
    by a cached launch) is a driver call that fails with "invalid device context" on a thread
    where no context is current. Such a thread is what autograd runs a GPU backward on when
    its first CUDA work there is a descriptor-taking kernel (the allocator served every tensor
    from its cache, so no runtime call bound the context first): found by a SwiGLU backward on
    an H100. A stream query is a runtime call, and the runtime binds the device's primary
    context to the calling thread; it does not wait for the stream. Not while the stream is
    being captured into a CUDA graph: a query there is illegal and invalidates the capture (a
    thread whose first launch came inside one got CUDA's capture error, not the op's result).
    The capture check is a runtime call too; the query waits for a launch outside a capture.
    Every launch here calls it, and so does every fused op's backward before its first CUDA
    work (ops/_common.py ``kernel_backward``), which may be a cuBLAS call."""
    if not getattr(_THREAD_STATE, "bound", False):
        if torch.cuda.is_current_stream_capturing():
            return
        torch.cuda.current_stream().query()
        _THREAD_STATE.bound = True


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
        # the argument's type: i32, i64 or (from 2^63) u64, by value range
        width = 0 if -(2**31) <= value < 2**31 else 1 if -(2**63) <= value < 2**63 else 2
        return ("i", value == 1, value % 16 == 0, width)
    if isinstance(value, float):
        return ("f",)  # a runtime float is an fp32 argument, never specialised
    if isinstance(value, tuple):
        return tuple(map(_value_key, value))
    if TensorDescriptor and isinstance(value, TensorDescriptor):
        return ("desc", value.base.dtype, value.base.data_ptr() % 16 == 0, len(value.shape))
    return value  # strings, dtypes, None: by value (finer than Triton: only costs a miss)


def _addresses(value):
    """``value`` as the C launcher takes it without a tensor: a tensor by its address (an
    integer, which the launcher passes as the pointer without asking the driver about it), a
    tuple element by element."""
    if isinstance(value, torch.Tensor):
        return value.data_ptr()
    if isinstance(value, tuple):
        return tuple(map(_addresses, value))
    return value


def exact_key(value):
    """``value`` as a memo key's part (module docstring): a tensor by its address, shape,
    strides and dtype, a float by its bits (0.0 and -0.0 apart), a tuple element by element,
    anything else by its type and value (True and 1 apart)."""
    if isinstance(value, torch.Tensor):
        return (value.data_ptr(), value.shape, value.stride(), value.dtype)
    if isinstance(value, float):
        return (float, value.hex())
    if isinstance(value, tuple):
        return tuple(map(exact_key, value))
    return (value.__class__, value)


class _DirectLaunch:
    """The C launcher of one compiled kernel, called with its tensor descriptors expanded from
    a table (module docstring) in the layout of the running Triton (``_LAUNCHER_LAYOUT``):
    ``prepared(grid, bound)`` is the launch as a call of the stream alone (what a memo key
    files). A kernel without descriptors has Triton's C launcher itself as its direct launcher.
    ``of(compiled)`` is None where the compiled kernel needs scratch memory, runs instrumented,
    or its launcher is not laid out as written against: those launches take ``compiled.run``."""

    def __init__(self, compiled, raw, descriptors: dict):
        runner = compiled.run
        self.raw, self.descriptors = raw, descriptors  # {argument position: Triton's descriptor metadata}
        self.sequence = _LAUNCHER_LAYOUT == "sequence"
        if self.sequence:  # the kernel's and the launch's metadata, hooks, scratch; annotations, signature
            self.head = (compiled.function, runner.launch_cooperative_grid, runner.launch_pdl,
                         compiled.packed_metadata, None, None, None, None, None,
                         runner.arg_annotations, runner.kernel_signature)
        else:  # scratch buffers, then the kernel's metadata, launch metadata and hooks
            self.head = (compiled.function, runner.launch_cooperative_grid, runner.launch_pdl, None, None,
                         compiled.packed_metadata, None, None, None)
        self.filled = {}

    @classmethod
    def of(cls, compiled):
        if _LAUNCHER_LAYOUT is None:
            return None
        runner = getattr(compiled, "run", None)
        wrapper = getattr(runner, "launch", None)
        if getattr(runner, "global_scratch_size", 1) or getattr(runner, "profile_scratch_size", 1):
            return None
        if getattr(runner, "gsan_enabled", False):  # the sanitizer appends arguments of its own
            return None
        code, cells = getattr(wrapper, "__code__", None), getattr(wrapper, "__closure__", None)
        if code is None:  # no descriptor: Triton's launcher is the C function itself
            return cls(compiled, wrapper, {}) if callable(wrapper) else None
        if not cells:
            return None
        free = dict(zip(code.co_freevars, (cell.cell_contents for cell in cells)))
        raw, positions, metas = (free.get(k) for k in ("launcher", "tensordesc_indices", "tensordesc_meta"))
        signature = free.get("signature")
        if positions is None and isinstance(signature, tuple):
            # 3.9's wrapper keeps the signature and finds descriptors by type, inside tuples too
            if any(isinstance(kind, tuple) for kind in signature):
                return None
            positions = [i for i, kind in enumerate(signature) if str(kind).startswith("tensordesc")]
        if raw is None or not positions or not metas or len(metas) != len(positions) or None in metas:
            return None
        if any(meta.get("is_im2col") for meta in metas):
            return None  # a descriptor kind that the kernels here never take
        # the wrapper meets the descriptors in argument order and takes their metadata in turn
        try:
            return cls(compiled, raw, dict(zip(sorted(positions), metas)))
        except AttributeError:  # a launcher without the fields written against
            return None

    def _expanded(self, position, value, meta):
        if isinstance(value, TensorDescriptor):  # a caller's own descriptor object
            value = value.base
        key = (position, value.data_ptr(), tuple(value.shape), value.stride())
        args = self.filled.get(key)
        if args is None:
            from triton.backends.nvidia.driver import make_tensordesc_arg

            if len(self.filled) >= _FILLED_PER_KERNEL:
                self.filled.clear()
            desc = TensorDescriptor.from_tensor(value, list(meta["block_size"]))
            # 3.8 and 3.9 pass a third argument (the launch's leading ones), unused for these
            extra = (None,) * (getattr(getattr(make_tensordesc_arg, "__code__", None), "co_argcount", 2) - 2)
            args = self.filled[key] = list(make_tensordesc_arg(desc, meta, *extra))
        return args

    def prepared(self, grid, bound):
        """The launch as a call of the stream alone: descriptors expanded, every other tensor
        by its address (the C launcher takes an integer for a pointer), so that a call kept
        under a memo key keeps no tensor alive."""
        args, descriptors = [], self.descriptors
        for position, value in enumerate(bound):
            meta = descriptors.get(position)
            if meta is not None:
                args.extend(self._expanded(position, value, meta))
            else:
                args.append(_addresses(value))
        grid_x, grid_y, grid_z = grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1
        raw, head = self.raw, self.head
        if self.sequence:
            args = tuple(args)
            return lambda stream: raw(grid_x, grid_y, grid_z, stream, *head, args)
        return lambda stream: raw(grid_x, grid_y, grid_z, stream, *head, *args)


class FastLaunch:
    """Reuse of compiled launches of one ``@triton.jit`` kernel (see the module docstring).

    ``call(run, grid, args, kwargs, by_value=())``: ``run()`` launches through Triton and
    returns ``(compiled kernel, meta)`` where ``meta`` holds the config's meta-parameters (and
    num_warps / num_stages, which the launcher ignores); ``by_value`` names arguments to key by
    value (the autotune key) and ``key_extra`` anything else the compiled kernel depends on
    (a Gluon kernel's descriptor block shapes). ``pre_hook(dict)`` of the config, if any, runs on every launch,
    except on the direct descriptor path when ``pre_hook_sets_descriptor_blocks`` says all it
    does is give descriptor objects their block shapes (that path makes none).
    """

    def __init__(self, kernel, pre_hook=None, pre_hook_sets_descriptor_blocks=False):
        self.kernel = kernel
        self.pre_hook = pre_hook
        self.pre_hook_sets_descriptor_blocks = pre_hook_sets_descriptor_blocks
        self.cache = {}
        self.prepared = {}  # (device, memo key) -> a finished call of the stream (``launch_prepared``)
        self.hits = 0  # launches served from the cache, the finished calls' included (the tests read it)
        # the interpreter's kernels carry no parameter list: they always take Triton's path
        self.supported = hasattr(kernel, "params") and hasattr(kernel, "arg_names")
        if not self.supported:
            return
        self.arg_names = list(kernel.arg_names)
        self.constexpr = {p.name for p in kernel.params if p.is_constexpr}
        self.runtime = set(self.arg_names) - self.constexpr
        self.defaults = {p.name: p.default for p in kernel.params if p.default is not inspect.Parameter.empty}
        # pointer kernels have nothing to wrap: a cached launch skips the scan for descriptors
        self.takes_descriptors = any(name.endswith(DESCRIPTOR_SUFFIX) for name in self.arg_names)

    def _key(self, args, kwargs, by_value, device, key_extra):
        parts = [device, key_extra]
        constexpr, names, runtime = self.constexpr, self.arg_names, self.runtime
        for i, value in enumerate(args):
            parts.append(value if names[i] in constexpr else _value_key(value))
        for name, value in kwargs.items():
            # runtime arguments by what Triton specialises on; constexprs, the autotune key
            # and launch options (num_warps, ...) by value
            parts.append((name, _value_key(value) if name in runtime and name not in by_value else value))
        return tuple(parts)

    def call(self, run, grid, args, kwargs, by_value=(), key_extra=(), memo=None):
        """Launch (module docstring); returns (compiled kernel, meta). ``memo``: a key under
        which a cached launch with a direct launcher files its finished call."""
        if not INTERPRET:
            bind_cuda_context()
        if not FAST_LAUNCH or not self.supported or _hooks_installed():
            _note(None)
            return run()
        device = torch.cuda.current_device()
        try:
            key = self._key(args, kwargs, by_value, device, key_extra)
            hash(key)
        except TypeError:  # an unhashable argument: Triton's path
            _note(None)
            return run()
        entry = self.cache.get(key)
        if entry is None:
            _note(None)
            compiled, meta = run()
            if compiled is not None and hasattr(compiled, "packed_metadata"):
                self.cache[key] = (compiled, dict(meta), _DirectLaunch.of(compiled))
            return compiled, meta
        compiled, meta, direct = entry
        # a pre-hook runs on every launch, but one that only gives descriptors their block shapes
        # is skipped on the direct path, whose finished call then is the whole launch
        files = memo is not None and FINISHED_CALLS and (self.pre_hook is None or self.pre_hook_sets_descriptor_blocks)
        # a pointer kernel's hit takes the C launcher only to be filed (its tensors as addresses,
        # which spares later launches a data_ptr() call and a driver query per tensor): built
        # on every hit, that call took 0.93-1.47x compiled.run's host time for the MLP's
        # kernels (benchmarks/NOTES.md, "The MLP's plain calls as finished calls")
        if direct is not None and not (DIRECT_DESCRIPTORS if self.takes_descriptors else files):
            direct = None
        self.hits += 1
        merged = {**kwargs, **meta}
        if direct is None and self.takes_descriptors:
            merged = as_descriptors(merged)
        if self.pre_hook is not None and not (direct is not None and self.pre_hook_sets_descriptor_blocks):
            self.pre_hook(merged)
        bound = list(args)
        for name in self.arg_names[len(args):]:
            bound.append(merged[name] if name in merged else self.defaults[name])
        grid = grid(merged) if callable(grid) else grid
        stream = torch._C._cuda_getCurrentRawStream(device)
        if direct is not None:
            finished = direct.prepared(grid, bound)
            finished(stream)
            if files:
                if len(self.prepared) >= _PREPARED_PER_KERNEL:
                    self.prepared.clear()
                try:
                    self.prepared[device, memo] = finished
                except TypeError:  # an unhashable part (a list argument): not filed
                    files = False
            _note(finished if files else None)
        else:
            _note(None)
            compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                         compiled.function, compiled.packed_metadata, None, None, None, *bound)
        return compiled, meta

    def launch_prepared(self, memo) -> bool:
        """Launch the finished call filed under ``memo`` on this device (``launch_prepared``)."""
        if not (FAST_LAUNCH and FINISHED_CALLS and (DIRECT_DESCRIPTORS or not self.takes_descriptors)):
            return False
        device = torch.cuda.current_device()
        try:
            finished = self.prepared.get((device, memo))
        except TypeError:  # an unhashable part: never filed
            return False
        if finished is None or _hooks_installed():
            return False
        replay((finished,), device)
        self.hits += 1
        return True


def launch_prepared(kernel, memo) -> bool:
    """Launch the finished call that ``launch(kernel, ..., memo=memo)`` filed on this device,
    if there is one and cached launches are on (no hook installed); returns whether it did.
    ``memo`` must hold everything the launch's arguments are built from (``exact_key``)."""
    fast = kernel.__dict__.get("_fusedmlp_fast")
    return fast is not None and fast.launch_prepared(memo)


def launch(kernel, grid, *args, descriptor_blocks=None, memo=None, **kwargs):
    """``kernel[grid](*args, **kwargs)`` through the compiled-launch cache (one fixed config:
    meta-parameters, num_warps and num_stages come in ``kwargs``). A Gluon kernel names the
    block shape of each ``*_desc`` argument in ``descriptor_blocks`` (its descriptors carry
    their block shape and layout; Triton kernels' get theirs from a config's pre-hook).
    ``memo``: the key under which ``launch_prepared`` finds this launch again (module docstring)."""
    fast = kernel.__dict__.get("_fusedmlp_fast")
    if fast is None:
        fast = kernel._fusedmlp_fast = FastLaunch(kernel)
    if descriptor_blocks is None:
        wrap, blocks = as_descriptors, ()
    else:
        wrap = lambda named: gluon_descriptors(named, descriptor_blocks)  # noqa: E731
        # the block shapes are part of the descriptors' types, so of the compiled kernel: two
        # calls alike but for them (a config's BLOCK_* popped into descriptor_blocks) need two
        blocks = tuple(sorted(descriptor_blocks.items()))
    return fast.call(lambda: (kernel[grid](*args, **wrap(kwargs), **COMPILE_OPTIONS), {}), grid, args, kwargs,
                     key_extra=blocks, memo=memo)
