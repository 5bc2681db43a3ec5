"""Host-side pieces every op shares: input validation, backend choice, dtype policy."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading

import torch
import triton.language as tl
from torch.autograd.function import once_differentiable

from ..kernels import configs as _configs
from ..kernels.configs import INTERPRET
from ..kernels.launch import (
    bind_cuda_context, exact_key, finished_calls_on, forced, forcing_active, launch, launch_prepared, recording,
    replay, spoil_recording,
)
from ..kernels.tuning_cache import TUNING_CACHE

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensor(t, name: str, *, ndim: int | None = None, min_ndim: int | None = None) -> None:
    """TypeError unless ``t`` is a floating tensor of a supported dtype; ValueError on a wrong rank."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}"
        )
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}")


def check_same_dtype_device(reference_name: str, reference: torch.Tensor, **others) -> None:
    """Every tensor in ``others`` (name=tensor, None skipped) matches ``reference``'s dtype and device."""
    for name, t in others.items():
        if t is None:
            continue
        if t.dtype != reference.dtype:
            raise TypeError(
                f"{name} has dtype {t.dtype} but {reference_name} has {reference.dtype}; "
                f"cast them to one dtype"
            )
        if t.device != reference.device:
            raise ValueError(
                f"{name} is on {t.device} but {reference_name} is on {reference.device}; "
                f"move them to one device"
            )


def check_bool(value, name: str) -> None:
    """TypeError unless ``value`` is a bool (a flag argument)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def check_finite_number(value, name: str, what: str = "") -> None:
    """TypeError unless ``value`` is a finite Python int or float (not a bool, not a tensor)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite Python number{what}, got {value!r}")


def use_triton(t: torch.Tensor) -> bool:
    """Triton kernels for CUDA tensors, and for CPU tensors under the Triton interpreter.

    CPU tensors without the interpreter take the plain-PyTorch reference path.
    """
    return t.is_cuda or INTERPRET


def acc_dtypes(dtype: torch.dtype):
    """(Triton accumulator dtype, torch dtype of the same) for inputs of ``dtype``."""
    if dtype == torch.float64:
        return tl.float64, torch.float64
    return tl.float32, torch.float32


@torch.compiler.assume_constant_result  # torch.compile reads the setting once per graph, not in it
def _fp32_matmul_allows_tf32() -> bool:
    return torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: fp32 inputs honour PyTorch's fp32 matmul precision setting."""
    if dtype == torch.float32 and _fp32_matmul_allows_tf32():
        return "tf32"
    if dtype in (torch.float32, torch.float64):
        return "ieee"
    return "tf32"  # 16-bit operands: the argument does not apply; Triton's default


def upcast_dots(dtype: torch.dtype) -> bool:
    """The interpreter computes bf16 dots wrongly (and fp16 ones slowly): upcast them to fp32."""
    return INTERPRET and dtype in (torch.float16, torch.bfloat16)


def dot_meta(dtype: torch.dtype) -> dict:
    """The main loop's dtype meta-parameters for inputs of ``dtype`` (every GEMM kernel takes them)."""
    return {"ACC_DTYPE": acc_dtypes(dtype)[0], "DOT_PRECISION": dot_precision(dtype), "UPCAST": upcast_dots(dtype)}


def gemms_on_cublas(t: torch.Tensor) -> bool:
    """True for a CUDA tensor whose dots would run as IEEE products on CUDA cores: fp32 at
    PyTorch's "highest" matmul precision, and fp64. cuBLAS's SGEMM is then several times faster
    than Triton's CUDA-core dots (H100, fp32, DLRM's MLPs at 65536 rows: the whole-MLP kernel's
    best tile 2.7 / 5.6 ms forward against eager's 0.65 / 1.05; first-call compiles of 2.7-61 s
    a tile, benchmarks/NOTES.md "fp32 at 'highest': the GEMMs on cuBLAS"), so linear_act, mlp,
    the GLUs (GEGLU, SwiGLU) and LoRA run their GEMMs there and keep only the elementwise work
    in Triton."""
    return t.is_cuda and dot_precision(t.dtype) == "ieee"


def grad_needed(*tensors) -> bool:
    """True when autograd records an op on ``tensors``: grad mode is on and one of them (None
    skipped) requires grad. Where it does not (``torch.no_grad``, ``torch.inference_mode``,
    frozen inputs) the ops run their forward alone: no autograd node, and nothing written for a
    backward that will not run (the store modes' pre-activations or hidden products: memory
    traffic and peak memory for nothing). Inside a forward-mode AD level the answer is yes:
    the autograd.Function path then says that the ops have no forward-mode derivative, where
    the forward alone would drop the inputs' tangents without a word."""
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return True
    if not torch.is_grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in tensors)


def has_tangent(*tensors) -> bool:
    """Whether forward-mode AD (``forward_ad``, ``torch.func.jvp``) carries a tangent on one of
    ``tensors`` (None skipped): for an op without an autograd.Function to refuse it."""
    if getattr(torch.autograd.forward_ad, "_current_level", -1) < 0:
        return False
    return any(t is not None and torch.autograd.forward_ad.unpack_dual(t).tangent is not None for t in tensors)


_AUTOCAST_CAST = (torch.float16, torch.bfloat16, torch.float32)  # autocast leaves fp64 alone


def _autocast_device_type(x: torch.Tensor) -> str | None:
    """"cuda" or "cpu" (the device types fusedmlp's ops follow autocast on), else None."""
    return "cuda" if x.is_cuda else "cpu" if x.is_cpu else None  # not x.device.type: it costs more


def autocast_dtype(x) -> torch.dtype | None:
    """The dtype ``torch.autocast`` runs its matmul ops in on ``x``'s device type (CUDA or
    CPU); None where autocast is off there."""
    if not isinstance(x, torch.Tensor):
        return None
    device_type = _autocast_device_type(x)
    if device_type is not None and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


# Casts of tensors up to this size share one multi-tensor copy; larger ones get a kernel each:
# the multi-tensor kernel gives each 65536-element chunk one program, too few for a big weight.
GROUPED_CAST_MAX_NUMEL = 1 << 16


def _copies(tensors, dtypes) -> list:
    """Copies of ``tensors`` in ``dtypes``, made by one multi-tensor copy (a launch for all of
    them, not one each: an MLP's biases and small weights)."""
    out = [torch.empty_like(t, dtype=dtype) for t, dtype in zip(tensors, dtypes)]
    torch._foreach_copy_(out, list(tensors))
    return out


class _CastAll(torch.autograd.Function):
    """``tensors`` cast to ``dtype`` together, their gradients cast back together."""

    @staticmethod
    def forward(ctx, dtype, *tensors):
        ctx.dtypes = [t.dtype for t in tensors]
        return tuple(_copies(tensors, [dtype] * len(tensors)))

    @staticmethod
    def backward(ctx, *grads):
        wanted = [i for i, needed in enumerate(ctx.needs_input_grad[1:]) if needed and grads[i] is not None]
        cast = _copies([grads[i] for i in wanted], [ctx.dtypes[i] for i in wanted])
        result = [None] * len(grads)
        for i, grad in zip(wanted, cast):
            result[i] = grad
        return (None, *result)


def call_autocast(op, dtype: torch.dtype, x: torch.Tensor, *args, **kwargs):
    """``op(x, *args, **kwargs)`` as ``torch.autocast`` runs ``F.linear`` and ``bmm``: every
    fp16 / bf16 / fp32 tensor argument on x's device type (also inside a list or tuple) cast to
    ``dtype``, fp64 ones and everything else as given, and the op run with autocast off, so
    that the torch products inside it keep the dtypes it chose. Gradients flow back through
    the casts in the callers' dtypes (fp32 master weights get fp32 gradients), as eager
    layers' do. The casts of small tensors run as one multi-tensor copy. Unlike autocast's own cast
    of a layer's weight, which it keeps for the rest of the autocast region (and which a CUDA
    graph capture must turn off), a weight here is cast on every call: one pass over it, like
    the first use of a layer in a region."""
    device_type = _autocast_device_type(x)
    arguments = [x, *args, *kwargs.values()]
    flat = [t for a in arguments for t in (a if isinstance(a, (list, tuple)) else (a,))]
    to_cast = {id(t): t for t in flat if isinstance(t, torch.Tensor) and t.dtype in _AUTOCAST_CAST
               and t.dtype != dtype and (t.is_cuda if device_type == "cuda" else t.is_cpu)}
    small = {key: t for key, t in to_cast.items() if t.numel() <= GROUPED_CAST_MAX_NUMEL}
    cast = {key: t.to(dtype) for key, t in to_cast.items() if len(small) < 2 or key not in small}
    if len(small) > 1 and grad_needed(*small.values()):
        cast.update(zip(small, _CastAll.apply(dtype, *small.values())))
    elif len(small) > 1:
        cast.update(zip(small, _copies(list(small.values()), [dtype] * len(small))))

    def swap(value):
        if isinstance(value, (list, tuple)):
            return type(value)(swap(v) for v in value)
        return cast.get(id(value), value) if isinstance(value, torch.Tensor) else value

    with torch.autocast(device_type, enabled=False):
        return op(swap(x), *(swap(a) for a in args), **{k: swap(v) for k, v in kwargs.items()})


def cdiv(a: int, b: int) -> int:
    """Ceiling division of host integers (grids, row blocks). Not ``triton.cdiv``: recent
    Tritons make that a constexpr function, whose call costs about 2 us of host time (it
    unwraps its arguments), and a backward computes a dozen of these."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1; 1 for 0), in plain Python as ``cdiv``."""
    return 1 << max(n - 1, 0).bit_length()


def dot_width(n: int) -> int:
    """A width as a kernel's tile holds it: the next power of two, at least tl.dot's 16."""
    return max(16, next_power_of_2(n))


def autotune_m_key(m: int) -> int:
    """M rounded up to a power of two: the autotune key, so a new batch size does not re-tune."""
    return next_power_of_2(m)


@functools.lru_cache(maxsize=None)
def _device_facts(index: int):
    props = torch.cuda.get_device_properties(index)
    optin = getattr(props, "shared_memory_per_block_optin", 0)  # not in every PyTorch build
    shared = optin or (227 * 1024 if props.major in (9, 10) else 99 * 1024)
    return (props.major, props.minor), props.multi_processor_count, shared


def _device_properties(t: torch.Tensor):
    """((major, minor), multiprocessor count, opt-in shared memory bytes per program) of
    ``t``'s GPU, cached per device."""
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    return _device_facts(index)


def shared_memory_per_block(t: torch.Tensor) -> int:
    """Bytes of shared memory one program may take on ``t``'s GPU (the opt-in limit: 227 KiB
    on H100/H200); 96 KiB for the interpreter and CPU tensors (any value works there)."""
    if not t.is_cuda or INTERPRET:
        return 96 * 1024
    return _device_properties(t)[2]


_SIDE_STREAMS = threading.local()  # per thread: the events of two threads' forks must not mix
SIDE_STREAM_PRIORITY = -(2**16)  # PyTorch maps it to the highest priority the GPU has


def _side_stream(index: int, create: bool = True):
    """(stream, fork event, join event) of this thread on GPU ``index``; None if there are none
    yet and ``create`` is False."""
    cache = _SIDE_STREAMS.__dict__.setdefault("by_device", {})
    if index not in cache and create:
        cache[index] = torch.cuda.Stream(index, priority=SIDE_STREAM_PRIORITY), torch.cuda.Event(), torch.cuda.Event()
    return cache.get(index)


def fork_join(device: torch.device, on_side, meanwhile):
    """``on_side()`` launched on a stream of the highest priority (its programs are placed on
    SMs before other work that became ready with it), after the current stream's work so far;
    ``meanwhile()`` launched on the current stream; then the current stream waits for the side
    one. Returns ``on_side()``'s result. Memory that ``on_side`` writes should be allocated
    before the call (on the current stream, which the join orders after the side's work). One
    side stream and two events per thread and GPU, reused, and two stream switches, not
    ``wait_stream``'s new events and a stream context: the host time of a fork is what it must
    save on the GPU. During a CUDA graph capture with no side stream made yet (no call before
    the capture), the two run one after the other on the current stream."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    side = _side_stream(index, create=not torch.cuda.is_current_stream_capturing())
    if side is None:
        result = on_side()
        meanwhile()
        return result
    side, forked, joined = side
    main = torch.cuda.current_stream()
    forked.record(main)
    side.wait_event(forked)
    torch.cuda.set_stream(side)
    try:
        result = on_side()
    finally:
        torch.cuda.set_stream(main)
    try:
        meanwhile()
    finally:
        joined.record(side)
        main.wait_event(joined)
    return result


def num_sms(t: torch.Tensor) -> int:
    """Streaming multiprocessors of ``t``'s GPU: the program count of persistent kernels."""
    return _device_properties(t)[1]


def tma_eligible(*tensors: torch.Tensor) -> bool:
    """True when every tensor can be read through a Hopper tensor descriptor (TMA).

    CUDA on compute capability >= 9, 16-bit floats (fp32/fp64 keep the pointer path: no
    tensor-core gain there), 2-D, unit last stride, 16-byte aligned base and row stride.
    """
    first = tensors[0]
    if INTERPRET or not first.is_cuda or first.dtype not in (torch.float16, torch.bfloat16):
        return False
    if _device_properties(first)[0][0] < 9:
        return False
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.shape[0] == 0 or t.shape[1] == 0:
            return False
        if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
    return True


# Forwards on compute capability 9.0 run as Gluon ping-pong kernels (kernels/pingpong.py);
# FUSEDMLP_PINGPONG=0 (read at import), or setting this to False, keeps the Triton kernels.
PINGPONG = os.environ.get("FUSEDMLP_PINGPONG", "1") not in ("", "0")


def pingpong_device(t: torch.Tensor) -> bool:
    """True when ``t``'s dtype and device admit the ping-pong kernels: a 16-bit float on a GPU
    of compute capability 9.0 (its wgmma and register moves), ping-pong on. From metadata
    alone (fake tensors too); the layout conditions are ``pingpong_eligible``'s."""
    return (PINGPONG and not INTERPRET and t.is_cuda and t.dtype in (torch.float16, torch.bfloat16)
            and _device_properties(t)[0] == (9, 0))


def pingpong_eligible(*tensors: torch.Tensor) -> bool:
    """True when a kernel over ``tensors`` may run as a ping-pong kernel: ``pingpong_device``
    and the TMA conditions (``tma_eligible``)."""
    return pingpong_device(tensors[0]) and tma_eligible(*tensors)


def rows_aligned(t: torch.Tensor) -> bool:
    """True when ``t`` (2-D) has unit column stride and a row stride and start that are
    multiples of 16 bytes (in its storage: from metadata alone), as TMA reads rows in place."""
    size = t.element_size()
    return (t.dim() == 2 and t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0
            and (t.storage_offset() * size) % 16 == 0)


def launch_pingpong(kernel, config: dict, m: int, n: int, sms: int, x_descs: dict, w_descs: dict,
                    out_descs: dict, kn_descs: dict = None, other_descs: dict = None, units: int = None, **kwargs):
    """Launch a ping-pong kernel (kernels/pingpong.py) over an [m, n] output, one program per SM
    (at most one per tile). ``config`` holds its block sizes and meta-parameters; the
    descriptor arguments are plain tensors, grouped by block shape: tiles of x ``[BLOCK_M,
    BLOCK_K]``, of ``[n, k]`` weights ``[BLOCK_N, BLOCK_K]``, of the outputs (and anything of
    their shape) ``[BLOCK_M, BLOCK_N]``, and of ``[k, n]`` weights ``[BLOCK_K, BLOCK_N]``.
    With ``COOPERATIVE`` (BLOCK_M rows per consumer, both consumers on each tile) a tile and
    its x tiles have ``2 * BLOCK_M`` rows. ``EPILOGUE_N`` (default BLOCK_N): the outputs'
    block width, for a kernel whose epilogue takes a tile in column pieces. ``other_descs``:
    name -> (tensor, block shape) for descriptors of any other block. ``units``: how many units
    of work the programs share where that is not the output's tiles (e.g. the resident-x
    kernel's row blocks or their shares).

    The launch is filed under a memo key of all these arguments (kernels/launch.py,
    ``launch_prepared``): a training loop's later calls with the same tensors (addresses,
    shapes, strides) and values are the finished call again, without the work below."""
    memo = (_exact_items(config), m, n, sms, units, _exact_items(x_descs), _exact_items(w_descs),
            _exact_items(out_descs), _exact_items(kn_descs), _exact_items(other_descs), _exact_items(kwargs))
    if launch_prepared(kernel, memo):
        return
    meta = dict(config)
    block_m, block_n, block_k = (meta.pop(name) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    epilogue_n = meta.pop("EPILOGUE_N", block_n)
    tile_m = 2 * block_m if meta.get("COOPERATIVE") else block_m
    kn_descs = kn_descs or {}
    blocks = {**dict.fromkeys(x_descs, (tile_m, block_k)), **dict.fromkeys(w_descs, (block_n, block_k)),
              **dict.fromkeys(out_descs, (block_m, epilogue_n)), **dict.fromkeys(kn_descs, (block_k, block_n))}
    other = {name: tensor for name, (tensor, _) in (other_descs or {}).items()}
    blocks.update({name: block for name, (_, block) in (other_descs or {}).items()})
    grid = (min(sms, cdiv(m, tile_m) * cdiv(n, block_n) if units is None else units),)
    launch(kernel, grid, **x_descs, **w_descs, **out_descs, **kn_descs, **other, **kwargs, **meta,
           descriptor_blocks=blocks, memo=memo)


def _exact_items(named) -> tuple:
    """A dict of launch arguments (or None) as a memo key's part: each name with its value's
    ``exact_key``."""
    return tuple((name, exact_key(value)) for name, value in named.items()) if named else ()


# Ops replay their repeated calls' launches (``CallPlans``); False sends every call down its
# usual path (benchmarks/geglu_store_host.py times both in one process).
CALL_PLANS = True


class CallPlans:
    """The launches of an op's repeated calls, replayed without the work that leads to them.

    A training loop calls an op with the same tensors step after step: the same parameters,
    and activations that the caching allocator hands out at the same addresses. Where what a
    call launches follows from a key the op builds from its own arguments (``exact_key`` of
    each tensor, the outputs it allocated included, and every value), ``launch(key)`` replays
    the finished calls (kernels/launch.py) that an earlier call of that key filed inside
    ``filing(key)``, and returns True; else it returns False and the op takes its usual path.
    A replay skips the layout checks, the views, the form and config lookups and the memo keys
    of the launches themselves. On an H200 GEGLU's forward launch (``_launch_fwd``) took 119 us
    of a store-mode training step's host time at 256 tokens (wrapped timers), for one kernel
    whose finished call was filed already; with plans for it and for the dh stream, the step
    took 0.71-0.85x the host time and its plain call at 4096 tokens 0.67-0.81x, plans on
    against off in one process (benchmarks/geglu_store_host.py; benchmarks/NOTES.md, "Call
    plans"). The same held for the other ops' plans (SwiGLU's dh and dx kernels, linear_act's
    forward and dpre kernels, LoRA's forward forms and dgrad kernel): a plain step's host time
    0.73-0.84x at 256 tokens, 0.66-0.90x its plain time at 4096-16384 (benchmarks/
    call_plans_host.py; NOTES.md, "Call plans for every op's launches").

    A plan is filed only where every launch in the block was a finished call (noted by
    ``kernels.launch.recording``) and there were as many as expected: not where a form was
    timed (its timing runs launch too) or a choice was the rule of one call (inside a CUDA
    graph capture: ``FastestForm``), nor inside a block that forces a config or a form, where
    no plan is replayed either. Choices once made (a form timed, a config tuned) stand for the
    process, so the key need not hold them. Kept per device, cleared when ``size`` are filed;
    ``clear_call_plans`` drops every op's (the tests, between tests that patch the op layer).
    ``hits`` counts the replays."""

    instances = []

    def __init__(self, size: int = 256):
        self.size = size
        self.plans = {}
        self.hits = 0
        CallPlans.instances.append(self)

    def launch(self, key) -> bool:
        """Replay the launches filed under ``key`` on the current stream; whether there were any."""
        if not CALL_PLANS or forcing_active() or not finished_calls_on():
            return False
        device = torch.cuda.current_device()
        calls = self.plans.get((device, key))
        if calls is None:
            return False
        replay(calls, device)
        self.hits += 1
        return True

    def run(self, key, launcher, launches: int = 1) -> None:
        """Replay ``key``'s plan, or call ``launcher()`` and file its launches under ``key``."""
        if not self.launch(key):
            with self.filing(key, launches):
                launcher()

    @contextlib.contextmanager
    def filing(self, key, launches: int = 1):
        """File the block's launches under ``key`` where they were ``launches`` finished calls."""
        with recording() as calls:
            yield
        if (CALL_PLANS and len(calls) == launches and None not in calls and not forcing_active()
                and finished_calls_on()):
            if len(self.plans) >= self.size:
                self.plans.clear()
            self.plans[torch.cuda.current_device(), key] = tuple(calls)


def clear_call_plans() -> None:
    """Drop the call plans of every op (``CallPlans``)."""
    for plans in CallPlans.instances:
        plans.plans.clear()


def call_plans_by_name() -> dict:
    """{"fusedmlp.ops.MODULE.ATTRIBUTE": its ``CallPlans``} over the op modules loaded (the tests
    and benchmarks/call_plans_host.py count each one's replays)."""
    return {f"{module.__name__}.{name}": value for module in list(sys.modules.values())
            if getattr(module, "__name__", "").startswith("fusedmlp.ops.")
            for name, value in vars(module).items() if isinstance(value, CallPlans)}


def _cuda_times(forms: dict, block_ms: float = 60.0, passes: int = 2) -> dict:
    """Milliseconds of one launch of each form (a callable) on the current stream, timed as
    the benchmarks time them (bench/harness.py, Triton's do_bench): each launch CUDA-event
    timed alone after a write that flushes the L2 cache (every form reads its operands from
    memory, as a layer does between other layers; at least 256 MiB, as do_bench writes, so
    that the GPU stays behind the host: with 100 MiB a ping-pong form's host launch time was
    counted at a 0.06 ms shape on an H100, doubling it), in a block of back-to-back launches of
    one form lasting about ``block_ms``, whose first third is not counted: a GPU's clocks
    under a sustained load of one kernel are what a training step sees, and they differ by
    kernel (on an H100 the GLU forward's forms ranked differently when interleaved launch by
    launch). Each form runs once first (compiles and, for tuned kernels, tunes); then one
    untimed round of a block per form brings a GPU that was idle to its loaded clocks (the
    first form timed on a cold H100 measured up to 14% fast), and ``passes`` timed rounds
    follow, every other one in reverse order; a form's time is the mean of its block
    medians. Returns None, timing nothing, where the flush buffer does not fit in the free
    memory."""
    try:
        flush = torch.empty(max(2 * _l2_bytes(), 256 * 2**20), dtype=torch.int8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        return None

    def block(run, count):
        pairs = []
        for _ in range(count):
            flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            pairs.append((start, stop))
        torch.cuda.synchronize()
        times = sorted(a.elapsed_time(b) for a, b in pairs[count // 3:])
        return times[len(times) // 2]

    for run in forms.values():
        run()
    counts = {name: max(6, min(1000, int(block_ms / (block(run, 1) + 0.1))))  # 0.1: the flush
              for name, run in forms.items()}
    medians = {name: [] for name in forms}
    order = list(forms)
    for round_ in range(passes + 1):
        for name in order if round_ % 2 else order[::-1]:
            median = block(forms[name], counts[name])
            if round_:
                medians[name].append(median)
    return {name: sum(values) / len(values) for name, values in medians.items()}


def _l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return getattr(props, "L2_cache_size", 0) or 64 * 2**20


class FastestForm:
    """A per-key choice among interchangeable forms of one launch: kernels that read the same
    inputs and write the same outputs, whose speed order depends on the GPU and the shape
    (where no static rule fits every device, e.g. the GLU forward's forms, ops/glu.py).

    ``run(key, names, rule, launch)``: ``launch(name)`` launches the form ``name``, one of
    ``names`` (the forms the call's device and layout admit; one name: launched untimed).
    The first call of a ``key`` (on a GPU, autotuning on) times every form
    (``timer({name: callable}) -> {name: ms}``, default CUDA events) and files the fastest
    under the key for the process; later calls of the key launch it straight away. Where
    nothing may be timed (inside a CUDA graph capture, or FUSEDMLP_AUTOTUNE=0) a call
    launches the filed choice or, if none, ``rule`` (a name of ``names``), and files nothing;
    so does a call whose timer returns nothing (the default one, without memory to spare).
    The forms must write only their own outputs: the timing runs each several times on the
    caller's tensors. Forms may round differently, so two processes that chose differently
    can differ in the last bits; FUSEDMLP_AUTOTUNE=0 or ``forcing`` fixes the form.
    With a ``name``, each choice (and the times that made it) is filed in the tuning cache
    (kernels/tuning_cache.py: the section ``form:<name>`` of the file of the GPU model that
    the key's "device" field names, else the current device's), and a later process takes it
    from there untimed, during a CUDA graph capture too, where it offers that form."""

    def __init__(self, timer=None, fields=(), name=None):
        self.fields = fields  # names of a key's parts (the bench JSON lists the choices by them)
        self.name = name
        self.chosen = {}
        self.times = {}  # key -> {name: ms} of the timing that chose (tests and benches read it)
        self.timer = timer or _cuda_times
        self._forced = None

    @contextlib.contextmanager
    def forcing(self, name: str):
        """Inside the block every call launches the form ``name`` (where it is one of the
        names offered), untimed: the GPU tests check each form this way."""
        self._forced = name
        try:
            with forced():
                yield
        finally:
            self._forced = None

    def choice(self, key, names, rule: str, launch) -> str:
        """The name of the form a call of ``key`` launches, timing the forms (through
        ``launch``) if this is the key's first call and timing is allowed."""
        if len(names) == 1:
            return names[0]
        if self._forced in names:
            return self._forced
        chosen = self.chosen.get(key)
        if chosen is not None:
            return chosen
        if not _configs.AUTOTUNE:
            return rule
        filed = None
        if self.name:
            # the file is the GPU model's: the key is filed without the device's index, so the
            # processes of one machine's GPUs share their choices
            device = key[self.fields.index("device")] if "device" in self.fields else torch.cuda.current_device()
            section = f"form:{self.name}"
            model_key = tuple(None if field == "device" else part for field, part in zip(self.fields, key))
            filed = TUNING_CACHE.get(section, model_key, device)
        if isinstance(filed, dict) and filed.get("chosen") in names and isinstance(filed.get("ms"), dict):
            self.times[key] = filed["ms"]
            chosen = self.chosen[key] = filed["chosen"]
            return chosen
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            spoil_recording()  # the rule for this call only: a call plan must not keep it
            return rule
        times = self.timer({name: functools.partial(launch, name) for name in names})
        if not times:  # nothing timed (no memory to spare): the rule, this call only
            spoil_recording()
            return rule
        self.times[key] = times
        chosen = self.chosen[key] = min(times, key=times.get)
        if self.name:
            TUNING_CACHE.put(section, model_key, {"chosen": chosen, "ms": times}, device)
        return chosen

    def run(self, key, names, rule: str, launch):
        """Launch the chosen form of ``key`` (``choice``); returns what ``launch`` returns."""
        return launch(self.choice(key, names, rule, launch))


def persistent_grid(sms: int, m: int, n: int, block_m: str = "BLOCK_M", block_n: str = "BLOCK_N"):
    """Grid of a persistent kernel over an [m, n] output: ``PROGRAMS_PER_SM`` (a config's) programs
    per SM, at most one per tile. The kernel strides its tiles by ``tl.num_programs(0)``."""
    def grid(meta):
        tiles = cdiv(m, meta[block_m]) * cdiv(n, meta[block_n])
        return (min(sms * meta["PROGRAMS_PER_SM"], tiles),)

    return grid


# Backward passes walk the rows in chunks so that their largest transients (dh, dpre: one row
# of N features per token) live one chunk at a time: when those transients would exceed
# BWD_CHUNK_BYTES in one piece, up to BWD_MAX_CHUNKS chunks of at least BWD_MIN_CHUNK_ROWS rows
# (GEMMs of that height still run at full speed). Smaller backwards run in one piece: every
# chunk costs host time (a dozen launches), which short GPU work cannot hide.
BWD_MAX_CHUNKS = 4
BWD_MIN_CHUNK_ROWS = 4096
BWD_CHUNK_BYTES = 256 * 2**20
# Where the rows are too few for BWD_MAX_CHUNKS such chunks (fewer than 16384), GEGLU's recompute
# backward splits dh by output columns instead (ops/glu.py), into chunks of at most this: each
# column chunk adds two read-modify-writes of dx ([rows, in]) where a row chunk adds one of
# dW ([2*out, in]). At d = 4096, N = 8192, 64 MiB gives 8 chunks of 2048 columns: the step's
# peak 0.58x Liger-Kernel's (5 chunks of 112 MiB: 0.62x) in the same time within the runs'
# spread (0.6-1.0% slower in interleaved runs); at d = 8192 16 chunks tied 10 (H100,
# benchmarks/geglu_dh_chunks.py, benchmarks/NOTES.md).
BWD_COLUMN_CHUNK_BYTES = 64 * 2**20
# GEGLU's recompute mode (the memory mode) halves a dh above this and up to BWD_CHUNK_BYTES, which
# the rules above keep in one piece: two row chunks where each has BWD_MIN_CHUNK_ROWS, else two
# column chunks (ops/glu.py ``_dh_chunks``). The step's peak against Liger-Kernel's: 0.64x -> 0.46x
# at d = 1024, N = 8192 for 3.5-4.3% of the graphed step; 0.78x -> 0.55x at 1024 x 16384 and
# 0.83x -> 0.61x at 2048 x 8192 for 0-1.7% (H200, benchmarks/NOTES.md, "GEGLU's recompute dh in
# halves, and in row chunks of at most 512 MiB"). The other ops keep 256 MiB: their lean modes keep
# a product, and chunks cost host time.
GLU_RECOMPUTE_HALVES_BYTES = 64 * 2**20
# Above BWD_CHUNK_BYTES it keeps its row chunks within this where rows allow (at least
# BWD_MIN_CHUNK_ROWS each, so more than BWD_MAX_CHUNKS chunks): at d = 8192, N = 32768 eight chunks of
# 512 MiB in place of four of 1 GiB took the peak from 0.602x Liger's to 0.535x, in the same time
# within 0.6% (H200, the same section of NOTES.md).
GLU_RECOMPUTE_MAX_CHUNK_BYTES = 512 * 2**20


def kernel_backward(backward):
    """The decorator of the fused ops' autograd backwards (``backward(ctx, *grads)``, under
    ``@staticmethod``): ``once_differentiable`` (the kernels' backward builds no graph, so a
    second derivative is refused), and on a CUDA device the device's context made current on
    the thread first (``bind_cuda_context``, once per thread). Autograd runs a GPU backward on
    a thread of its own, where no context is current until a runtime call binds one; a
    backward whose first CUDA work there is a cuBLAS call (LoRA's ``d_xa``) made PyTorch warn
    "Attempting to run cuBLAS, but there was no current CUDA context!" once per process."""
    inner = once_differentiable(backward)

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if any(isinstance(grad, torch.Tensor) and grad.is_cuda for grad in grads):
            bind_cuda_context()
        return inner(ctx, *grads)

    return wrapper


def reuse_saved_once(ctx, op: str, saved: bool, mode: str = "recompute=False",
                     other_mode: str = "recompute=True") -> bool:
    """``saved``: whether this backward may write its gradients over the pre-activations its
    forward saved (the store modes' eager backward does, so that no transient of their size
    is allocated); a clear error where a first backward already did, since a graph
    differentiated twice (``retain_graph=True``) would read gradients as pre-activations.
    ``mode`` / ``other_mode``: the op's option that saves them, and the one that does not."""
    if getattr(ctx, "saved_reused", False):
        raise RuntimeError(
            f"{op}({mode}) can run its backward once per forward: the first one wrote its "
            f"gradients over the saved pre-activations. Use {other_mode} to differentiate a graph "
            "more than once (retain_graph=True)."
        )
    ctx.saved_reused = saved
    return ctx.saved_reused


def scratch_matrix(buffer: torch.Tensor, rows: int, cols: int) -> torch.Tensor | None:
    """The first ``rows * cols`` elements of the contiguous ``buffer`` as a ``[rows, cols]``
    matrix (its memory reused while what it holds is dead), or None if it is too small."""
    if not buffer.is_contiguous() or buffer.numel() < rows * cols:
        return None
    return buffer.view(-1)[: rows * cols].view(rows, cols)


def aligned_width(cols: int, element_size: int) -> int:
    """``cols`` rounded up to a whole number of 16-byte units of ``element_size``-byte elements."""
    align = 16 // element_size
    return cols + (-cols % align)


def aligned_rows_empty(like: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """An uninitialised ``[rows, cols]`` tensor whose rows start 16 bytes apart: a view of a
    buffer with ``cols`` rounded up to a multiple of 16 bytes. GEMM libraries take such a
    matrix in place (its leading dimension is aligned), where a ``[rows, 367]`` one (DLRM's
    interaction) costs them a copy or a slow kernel; ``widened`` gets the padded rows back."""
    return like.new_empty((rows, aligned_width(cols, like.element_size())))[:, :cols]


def widened(t: torch.Tensor, cols: int) -> torch.Tensor | None:
    """``t``'s rows extended in place to ``cols`` columns (the padding of ``aligned_rows_empty``,
    whatever it holds), or None where ``t``'s layout or storage does not have them. The extra
    columns are for products whose matching output columns are dropped."""
    if t.dim() != 2 or t.stride(1) != 1 or t.stride(0) < cols or t.shape[0] == 0:
        return None
    end = t.storage_offset() + (t.shape[0] - 1) * t.stride(0) + cols
    if end * t.element_size() > t.untyped_storage().nbytes():
        return None
    return t.as_strided((t.shape[0], cols), (t.stride(0), 1))


def backward_row_chunks(m: int, block_m: int, row_bytes: int = 0, rows: int = 0) -> list[tuple[int, int]]:
    """(start, stop) row ranges for a backward whose transients take ``row_bytes`` per row.

    Chunks are whole multiples of ``block_m`` (the kernels' row block), so that each chunk's
    per-row-block partial sums line up and slices stay aligned. ``rows``: the chunks' height
    when the rows are chunked (at least BWD_MIN_CHUNK_ROWS; default m / BWD_MAX_CHUNKS).
    """
    if m * row_bytes <= BWD_CHUNK_BYTES:
        return [(0, m)]
    rows = max(BWD_MIN_CHUNK_ROWS, rows or cdiv(m, BWD_MAX_CHUNKS))
    rows = cdiv(rows, block_m) * block_m
    return [(start, min(start + rows, m)) for start in range(0, max(m, 1), rows)]


def check_linear_inputs(x, weight, bias=None, *, x_name="x", weight_name="weight", bias_name="bias") -> None:
    """Validate ``x [..., in]``, an nn.Linear-style ``weight [out, in]`` and ``bias [out]`` (or None)."""
    check_tensor(x, x_name, min_ndim=1)
    check_tensor(weight, weight_name, ndim=2)
    if bias is not None:
        check_tensor(bias, bias_name, ndim=1)
    check_same_dtype_device(x_name, x, **{weight_name: weight, bias_name: bias})
    out_features, in_features = weight.shape
    if in_features == 0:
        raise ValueError(f"{weight_name} has no input features (shape {tuple(weight.shape)})")
    if x.shape[-1] != in_features:
        raise ValueError(
            f"{x_name} has {x.shape[-1]} features in its last dimension but {weight_name} expects "
            f"in={in_features} ({weight_name} shape {tuple(weight.shape)})"
        )
    if bias is not None and bias.shape[0] != out_features:
        raise ValueError(f"{bias_name} must have {out_features} elements (rows of {weight_name}), got {bias.shape[0]}")


def contiguous_bias(bias: torch.Tensor | None) -> torch.Tensor | None:
    """The kernels read a bias with unit stride: a strided view (a slice ``b[::2]``, an
    expanded scalar) is copied once, a small differentiable copy."""
    return bias if bias is None or bias.is_contiguous() else bias.contiguous()
