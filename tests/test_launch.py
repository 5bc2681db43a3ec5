"""The compiled-launch cache (kernels/launch.py): its key, and on a GPU that cached launches
give the same results as Triton's own path, for every specialisation they must tell apart."""

import subprocess
import sys

import pytest
import triton
import triton.language as tl
import torch

import fusedmlp
import fusedmlp.kernels.launch as launch_mod
from fusedmlp.kernels.launch import FastLaunch, _value_key
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.ops.linear_act import _fwd_launcher as linear_fwd_launcher
from fusedmlp.ops.linear_act import _fwd_tma_launcher as linear_fwd_tma_launcher
from fusedmlp.ops.mlp import _dgrad_launcher as mlp_dgrad_launcher
from fusedmlp.ops.mlp import _fwd_launcher as mlp_fwd_launcher
from fusedmlp.ops.mlp import mlp_reference
from helpers import fp32_matmul_precision


def test_key_tells_apart_what_triton_specialises_on():
    base = torch.empty(64, dtype=torch.float32)
    aligned, misaligned = base[:16], base[1:17]  # 4-byte offset: not 16-byte aligned
    assert _value_key(aligned) != _value_key(misaligned)
    assert _value_key(aligned) != _value_key(aligned.to(torch.float64))
    assert _value_key(aligned) == _value_key(base[4:20])  # 16 bytes further: aligned again
    assert len({_value_key(v) for v in (1, 2, 16, 32, 2**31, -3)}) == 4  # ==1, %16, int64, plain
    assert _value_key(2) == _value_key(3) and _value_key(16) == _value_key(48)
    assert _value_key(True) != _value_key(1)
    assert _value_key(0.5) == _value_key(2.0)  # runtime floats are never specialised
    assert _value_key((aligned, 7)) == (_value_key(aligned), _value_key(7))


def test_key_is_as_fine_as_triton_own_specialisation():
    """Against the installed Triton's own rule (``native_specialize_impl``, what its launch
    path keys compiled kernels on): any two values with the same key get the same
    specialisation, so a cached kernel is never reused where Triton would compile another.
    Runs wherever Triton is installed, so each version the cache is turned on for is checked."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    base = torch.empty(64, dtype=torch.float32)
    values = [base[:16], base[1:17], base[4:20], base[2:18].to(torch.float64), base[:16].to(torch.bfloat16),
              0, 1, 2, 3, 15, 16, 17, 48, -1, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1,
              -(2**31) - 16, 2**32, 2**40 + 3, 2**63 - 16, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1, -(2**63),
              True, False, 0.5, 2.0, -3.0]
    by_key = {}
    for value in values:
        by_key.setdefault(_value_key(value), []).append(value)
    for key, group in by_key.items():
        specialisations = {native_specialize_impl(BaseBackend, v, False, True, True) for v in group}
        assert len(specialisations) == 1, (key, group, specialisations)


def test_host_integer_helpers_match_triton():
    """The ops' grids and row blocks use plain-Python cdiv and next_power_of_2 (ops/_common.py
    says why): the same integers as Triton's."""
    from fusedmlp.ops._common import cdiv, next_power_of_2

    for a in (0, 1, 2, 15, 16, 17, 1000, 2**31 + 5, 2**40 + 1):
        for b in (1, 2, 16, 128, 1024, 3):
            assert cdiv(a, b) == triton.cdiv(a, b), (a, b)
        if a:
            assert next_power_of_2(a) == triton.next_power_of_2(a), a


def test_cache_is_off_under_the_interpreter():
    if torch.cuda.is_available():
        pytest.skip("CPU-only check")
    assert not launch_mod.FAST_LAUNCH


@triton.jit
def _to_bf16_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask).to(tl.bfloat16), mask=mask)


def test_interpreter_rounds_bf16_to_nearest():
    """conftest.py makes the interpreter's fp32 -> bf16 conversion round to nearest even, as a GPU
    does (Triton's own truncates): a kernel's cast gives torch's bits, ties and negatives included."""
    if torch.cuda.is_available():
        pytest.skip("CPU-only check")
    x = torch.randn(1000, dtype=torch.float64).float()
    x[:4] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8) - 2**-20, 3.0e38])  # ties, a negative, a large one
    y = torch.empty(1000, dtype=torch.bfloat16)
    _to_bf16_kernel[(1,)](x, y, x.numel(), BLOCK=1024)
    assert torch.equal(y.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.gpu
@pytest.mark.skipif(not launch_mod.FAST_LAUNCH, reason="the cache runs on Triton 3.6 to 3.9 on a GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cached_launches_match_triton_path(dtype, monkeypatch):
    """mlp (pointer kernels, tuple arguments) and linear_act (TMA descriptors in bf16; the
    Gluon ping-pong kernel on compute capability 9.0): cached launches give bit-identical
    results to Triton's path, on fresh inputs and new batch sizes. fp32 at "high" (TF32
    kernels; at "highest" the products are cuBLAS's, ``gemms_on_cublas``)."""
    with fp32_matmul_precision("high"):
        _cached_launches_match_triton_path(dtype, monkeypatch)


def _cached_launches_match_triton_path(dtype, monkeypatch):
    sizes = (13, 512, 256, 64, 16)
    ws = [(torch.randn(o, i, device="cuda") / i**0.5).to(dtype) for i, o in zip(sizes, sizes[1:])]
    bs = [torch.randn(o, device="cuda").to(dtype) for o in sizes[1:]]
    w, b = ws[1], bs[1]
    # launch() files the ping-pong kernel's cache on the kernel itself
    pingpong = linear_act_fwd_pingpong_kernel.__dict__.setdefault(
        "_fusedmlp_fast", FastLaunch(linear_act_fwd_pingpong_kernel))
    linear_caches = (linear_fwd_tma_launcher.fast, linear_fwd_launcher.fast, pingpong)
    mlp_hits, lin_hits = mlp_fwd_launcher.fast.hits, sum(cache.hits for cache in linear_caches)
    params = [t.requires_grad_() for t in ws + bs]
    for batch in (2048, 2048, 1000, 1000, 2047, 2047):
        x = torch.randn(batch, sizes[0], device="cuda", dtype=dtype)
        h = torch.randn(batch, sizes[1], device="cuda", dtype=dtype)
        g = torch.randn(batch, sizes[-1], device="cuda", dtype=dtype)
        outs = {}
        for fast in (True, False):
            monkeypatch.setattr(launch_mod, "FAST_LAUNCH", fast)
            # a training step twice with the same tensors: the second one's launches are the
            # finished calls of the first (memo keys: kernels/launch.py)
            steps = [torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", "relu"), params, g) for _ in range(2)]
            outs[fast] = (fusedmlp.mlp(x, ws, bs, "relu", "relu"), fusedmlp.linear_act(h, w, b, "gelu_tanh"),
                          *steps[0], *steps[1])
        for cached, plain in zip(outs[True], outs[False]):
            assert torch.equal(cached, plain)
        assert _rel(outs[True][0], mlp_reference(x.double(), [t.double() for t in ws],
                                                                  [t.double() for t in bs], "relu", "relu")) < 3e-2
    assert mlp_fwd_launcher.fast.hits - mlp_hits >= 2  # the repeated batch sizes were served from the cache
    assert sum(cache.hits for cache in linear_caches) - lin_hits >= 2
    # the MLP's repeated calls were its kernels' finished calls
    assert mlp_fwd_launcher.fast.prepared and mlp_dgrad_launcher.fast.prepared
    if dtype == torch.bfloat16 and torch.cuda.get_device_capability() == (9, 0):
        # the descriptor-taking kernels' hits went to the C launcher with descriptors expanded
        entries = [entry for cache in (linear_fwd_tma_launcher.fast, pingpong) for entry in cache.cache.values()]
        assert any(direct is not None for _, _, direct in entries), triton.__version__


@pytest.mark.gpu
@pytest.mark.parametrize("timing", ["events", "graph"])
def test_first_call_inside_a_capture_is_a_clear_error(timing, monkeypatch):
    """Autotuning on, a shape's first call during a CUDA graph capture cannot time its configs:
    a RuntimeError saying to warm up, with either timing, and the capture is left usable (it
    ends cleanly); the same call outside tunes and computes right."""
    import fusedmlp.kernels.configs as configs
    import fusedmlp.ops.mlp as mlp_ops
    from fusedmlp.kernels.mlp import mlp_fwd_kernel

    monkeypatch.setattr(configs, "AUTOTUNE", True)
    fresh = configs.Launcher(mlp_fwd_kernel, configs.MLP_FWD_CONFIGS[:2], key=mlp_fwd_launcher.key, timing=timing)
    monkeypatch.setattr(mlp_ops, "_fwd_launcher", fresh)
    sizes = (13, 64, 8)
    ws = [(torch.randn(o, i, device="cuda") / i**0.5).to(torch.bfloat16) for i, o in zip(sizes, sizes[1:])]
    bs = [torch.randn(o, device="cuda").to(torch.bfloat16) for o in sizes[1:]]
    x = torch.randn(500, sizes[0], device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="warm-up"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            fusedmlp.mlp(x, ws, bs, "relu", None)
    y = fusedmlp.mlp(x, ws, bs, "relu", None)
    ref = mlp_reference(x.double(), [t.double() for t in ws], [t.double() for t in bs], "relu", None)
    assert len(fresh.tuned.configs_timings) == 2 and _rel(y, ref) < 3e-2


def _on_new_thread(target):
    """``target()`` run on a thread of its own (its CUDA state fresh, as autograd's GPU thread's
    is); its result, or its exception raised here."""
    import threading

    outcome = {}

    def run():
        try:
            outcome["result"] = target()
        except BaseException as error:  # reported in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


@pytest.mark.gpu
def test_fork_join_on_gpu():
    """ops/_common.py's fork_join: the side function's launches go to a stream of the highest
    priority after the caller's earlier work (a slow write before the fork is seen), the other
    function's to the caller's stream, and the caller's later work sees the side's slow write;
    one side stream per thread; in a capture with no side stream made yet, both run on the
    capturing stream, creating none, and the replay computes the same."""
    from fusedmlp.ops import _common as common

    device = torch.device("cuda", torch.cuda.current_device())
    found = {}

    def forked_step(tag, spin=True):
        caller = torch.cuda.current_stream()
        a = torch.zeros(1 << 16, device=device)
        side_out, main_out = torch.empty_like(a), torch.empty_like(a)
        if spin:
            torch.cuda._sleep(10**7)  # the fill below is late: the side stream must wait for it
        a.fill_(3.0)

        def on_side():
            found[tag] = torch.cuda.current_stream()
            if spin:
                torch.cuda._sleep(10**7)  # the side's write is late: the caller must wait for it
            return torch.mul(a, 2.0, out=side_out)

        result = common.fork_join(device, on_side, lambda: torch.add(a, 1.0, out=main_out))
        later = side_out + 0.0  # on the caller's stream, after the join
        return caller, result, main_out, later

    def plain(tag):
        caller, result, main_out, later = forked_step(tag)
        torch.cuda.synchronize()
        assert found[tag] != caller and found[tag].priority < caller.priority
        assert found[tag].priority == torch.cuda.Stream(priority=common.SIDE_STREAM_PRIORITY).priority
        assert (result == 6).all() and (main_out == 4).all() and (later == 6).all()
        assert common._side_stream(device.index, create=False)[0] == found[tag]

    _on_new_thread(lambda: plain("first"))
    _on_new_thread(lambda: plain("second"))
    assert found["first"] != found["second"]

    def captured():
        assert common._side_stream(device.index, create=False) is None
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            caller, result, main_out, later = forked_step("captured", spin=False)
        assert found["captured"] == caller  # one stream: no side stream made during the capture
        assert common._side_stream(device.index, create=False) is None
        for t in (result, main_out, later):
            t.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert (result == 6).all() and (main_out == 4).all() and (later == 6).all()

    _on_new_thread(captured)


@pytest.mark.gpu
def test_descriptor_kernel_first_on_a_new_thread():
    """A kernel taking tensor descriptors launched as the first CUDA work of a new thread (no
    context current there, as on autograd's GPU thread; the output served from the
    allocator's cache, so no runtime call binds one first): it runs (launch.py's
    bind_cuda_context) and gives the main thread's result. Before, filling the descriptor
    failed with "invalid device context" (found by a SwiGLU backward on an H100)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the descriptor-taking (ping-pong) kernels are for compute capability 9.0")
    x, fresh_x = (torch.randn(1000, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fresh_copy = fresh_x.clone()  # a new address (a new descriptor), made here: a copy binds a context
    weight = torch.randn(384, 256, device="cuda", dtype=torch.bfloat16) / 16
    expected = fusedmlp.linear_act(fresh_x, weight)  # compiled and loaded on this thread
    del expected
    expected = fusedmlp.linear_act(fresh_x, weight).clone()
    fusedmlp.linear_act(x, weight)  # leaves a block of the output's size in the allocator's cache
    torch.cuda.synchronize()

    def first_launch():
        y = fusedmlp.linear_act(fresh_copy, weight)
        torch.cuda.synchronize()
        return y

    assert torch.equal(_on_new_thread(first_launch), expected)


_CUBLAS_FIRST_BACKWARD = r"""
import sys, torch, fusedmlp
import fusedmlp.ops._common as common
if sys.argv[1] == "unbound":  # the control: no context bound before the backward runs
    common.bind_cuda_context = lambda: None
torch.manual_seed(0)
x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
weight = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16) / 32
lora_a = (torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16) / 32).requires_grad_()
lora_b = (torch.randn(1024, 16, device="cuda", dtype=torch.bfloat16) / 4).requires_grad_()
grad_y = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
fusedmlp.lora_linear(x, weight, None, lora_a, lora_b, 2.0).backward(grad_y)
torch.cuda.synchronize()
print("finite" if all(t.grad.isfinite().all() for t in (x, lora_a, lora_b)) else "not finite")
"""


@pytest.mark.gpu
def test_backward_with_cublas_first_has_a_context_on_autograd_thread():
    """A fused backward whose first CUDA work on autograd's thread is a cuBLAS call (LoRA's
    d_xa), in a fresh process: no PyTorch warning "Attempting to run cuBLAS, but there was no
    current CUDA context!" (ops/_common.py ``kernel_backward`` binds the context first). The
    same run with the binding turned off must print it, so that this check can fail."""
    runs = {mode: subprocess.run([sys.executable, "-c", _CUBLAS_FIRST_BACKWARD, mode], capture_output=True,
                                 text=True, timeout=600) for mode in ("bound", "unbound")}
    for mode, run in runs.items():
        assert run.returncode == 0 and run.stdout.split()[-1:] == ["finite"], (mode, run.stdout, run.stderr[-2000:])
    assert "no current CUDA context" in runs["unbound"].stderr
    assert "no current CUDA context" not in runs["bound"].stderr, runs["bound"].stderr[-2000:]


@pytest.mark.gpu
def test_first_launch_of_a_thread_inside_a_capture():
    """A thread whose first launch comes while its stream is being captured (the shape tuned
    and compiled on another thread): the capture ends cleanly and its replay gives the other
    thread's result. Before, bind_cuda_context's stream query, illegal during a capture,
    invalidated it (torch.cuda.graph's exit raised cudaErrorStreamCaptureInvalidated)."""
    sizes = (13, 64, 8)
    ws = [(torch.randn(o, i, device="cuda") / i**0.5).to(torch.bfloat16) for i, o in zip(sizes, sizes[1:])]
    bs = [torch.randn(o, device="cuda").to(torch.bfloat16) for o in sizes[1:]]
    x = torch.randn(300, sizes[0], device="cuda", dtype=torch.bfloat16)
    expected = fusedmlp.mlp(x, ws, bs, "relu", None).clone()
    torch.cuda.synchronize()

    def captured():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = fusedmlp.mlp(x, ws, bs, "relu", None)
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        return y

    assert torch.equal(_on_new_thread(captured), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not launch_mod.FAST_LAUNCH, reason="the cache runs on Triton 3.6 to 3.9 on a GPU")
def test_misaligned_input_after_aligned_one_is_not_served_the_aligned_kernel():
    """An input 2 bytes off 16-byte alignment, after the aligned one filled the cache: a
    kernel compiled for aligned pointers would read wrong (or fault); the key sends it to a
    kernel of its own."""
    dtype = torch.bfloat16
    w = (torch.randn(96, 200, device="cuda") / 200**0.5).to(dtype)
    b = torch.randn(96, device="cuda").to(dtype)
    storage = torch.randn(1024 * 200 + 8, device="cuda", dtype=dtype)
    aligned = storage[:1024 * 200].view(1024, 200)
    shifted = storage[1:1024 * 200 + 1].view(1024, 200)
    for x in (aligned, shifted, aligned, shifted):
        y = fusedmlp.linear_act(x, w, b, "relu")
        ref = torch.relu(x.double() @ w.double().T + b.double())
        assert _rel(y, ref) < 2e-2
        y = fusedmlp.mlp(x, [w, w[:, :96].contiguous()], [b, b], "relu", "identity")
        ref = torch.relu(x.double() @ w.double().T + b.double()) @ w[:, :96].double().T + b.double()
        assert _rel(y, ref) < 2e-2


def _toy(x_ptr, y_ptr, n, scale, N_TILE: tl.constexpr, ACT: tl.constexpr = "relu"):
    pass


class _RecordingKernel:
    """Stands in for a compiled kernel: records what the launcher would receive."""

    packed_metadata = "packed"
    function = "function"

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)


def _recorded_cache(monkeypatch, kernel_fn, compiled, meta, stream, layout="spread"):
    """(cache, misses, run): a FastLaunch of ``kernel_fn`` switched on as on a GPU (device 0,
    raw stream ``stream``; ``layout``: the C launcher called with the descriptors expanded, in
    Triton 3.6's layout or 3.7-3.9's, or None: not called directly), and a ``run`` that counts
    the misses and returns ``compiled`` with ``meta``."""
    from triton.runtime.jit import JITFunction

    monkeypatch.setattr(launch_mod, "FAST_LAUNCH", True)
    monkeypatch.setattr(launch_mod, "_LAUNCHER_LAYOUT", layout)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: stream, raising=False)
    misses = []

    def run():
        misses.append(1)
        return compiled, dict(meta)

    return launch_mod.FastLaunch(JITFunction(kernel_fn)), misses, run


def test_cache_bookkeeping_with_a_recorded_launcher(monkeypatch):
    """On any machine: misses go through ``run``; hits pass the launcher every argument in
    signature order (config meta-parameters and defaults filled in) and the config's grid."""
    compiled = _RecordingKernel()
    fast, misses, run = _recorded_cache(monkeypatch, _toy, compiled, {"N_TILE": 64, "num_warps": 4}, 1234)
    x, y = torch.empty(100), torch.empty(100)
    grid = lambda meta: (triton.cdiv(100, meta["N_TILE"]),)  # noqa: E731
    for n in (32, 48, 33, 1, 35):  # 32 and 48: both divisible by 16; 33 and 35: neither; 1: its own
        fast.call(run, grid, (x, y), dict(n=n, scale=0.5 * n))
    assert len(misses) == 3 and fast.hits == 2
    (gx, gy, gz, stream, function, packed, metadata, enter, exit_, *bound), last = compiled.calls[0], compiled.calls[1]
    assert (gx, gy, gz, stream, function, packed) == (2, 1, 1, 1234, "function", "packed")
    assert metadata is enter is exit_ is None  # no launch hooks installed
    assert bound[:2] == [x, y] and bound[2:] == [48, 24.0, 64, "relu"]
    assert last[9:] == (x, y, 35, 17.5, 64, "relu")
    fast.call(run, grid, (x, y[1:]), dict(n=48, scale=1.0))  # a misaligned y: a new kind
    assert len(misses) == 4


def _toy_desc(x_desc, y_ptr, n, N_TILE: tl.constexpr):
    pass


def _wrapper_like_triton(launcher, tensordesc_indices, tensordesc_meta):
    """A closure over the names Triton 3.6's to 3.8's tensor-descriptor wrapper keeps (the C
    launcher, the descriptors' argument positions and their metadata)."""
    def inner(*args):
        return launcher, tensordesc_indices, tensordesc_meta

    return inner


def _wrapper_like_triton_39(launcher, signature, relevant_paths, tensordesc_meta, make_tensordesc_arg):
    """A closure over the names Triton 3.9's wrapper keeps (the kernel's signature instead of
    the descriptors' positions)."""
    def inner(*args):
        return launcher, signature, relevant_paths, tensordesc_meta, make_tensordesc_arg

    return inner


class _DescriptorKernel:
    """A compiled kernel of ``_toy_desc`` (one tensor-descriptor argument), its C launcher
    recorded; ``wrapper``: "3.6" (3.6 to 3.8's closure) or "3.9"."""

    packed_metadata = "packed"
    function = "function"

    def __init__(self, scratch=0, wrapper="3.6", signature=("tensordesc<fp32[16, 32]>", "*fp32", "i32", "constexpr")):
        from types import SimpleNamespace

        self.calls = []
        self.meta = {"block_size": [16, 32]}
        record = lambda *args: self.calls.append(args)  # noqa: E731
        if wrapper == "3.9":
            launch = _wrapper_like_triton_39(record, signature, {0: {}}, [self.meta], None)
        else:
            launch = _wrapper_like_triton(record, {0}, [self.meta])
        self.run = SimpleNamespace(
            launch=launch, global_scratch_size=scratch, profile_scratch_size=0, launch_cooperative_grid=False,
            launch_pdl=True, arg_annotations="annotations", kernel_signature="signature",
        )


def _recording_expansion(monkeypatch, takes_base_args=False):
    """Replace Triton's descriptor expansion by one that records (address, shape, block shape)
    per call and returns ["mapN", *shape, *strides]; ``takes_base_args``: with 3.8's and 3.9's
    third parameter. Returns the record."""
    import triton.backends.nvidia.driver as driver

    expanded = []

    def expand(desc, meta):
        expanded.append((desc.base.data_ptr(), tuple(desc.shape), tuple(desc.block_shape)))
        return [f"map{len(expanded)}", *desc.shape, *desc.strides]

    monkeypatch.setattr(driver, "make_tensordesc_arg", (lambda desc, meta, base: expand(desc, meta))
                        if takes_base_args else expand)
    return expanded


def test_cached_launch_expands_descriptors_once_per_address_and_shape(monkeypatch):
    """On any machine: a hit hands the C launcher each descriptor expanded (Triton's own
    expansion, called once per address, shape and strides, then served from the table), the
    rest of the arguments as they are (tensors by their addresses); a kernel that needs scratch
    memory is not launched that way.
    (The launcher laid out as Triton 3.6's, whatever Triton runs the test.)"""
    compiled = _DescriptorKernel()
    fast, misses, run = _recorded_cache(monkeypatch, _toy_desc, compiled, {"N_TILE": 16}, 77)
    expanded = _recording_expansion(monkeypatch)
    x, y, wider = torch.empty(64, 32), torch.empty(64), torch.empty(128, 32)
    for x_arg in (x, x, x, wider, x):
        fast.call(run, (4,), (), dict(x_desc=x_arg, y_ptr=y, n=64))
    assert len(misses) == 1 and fast.hits == 4
    assert expanded == [(x.data_ptr(), (64, 32), (16, 32)), (wider.data_ptr(), (128, 32), (16, 32))]
    head = (4, 1, 1, 77, "function", False, True, None, None, "packed", None, None, None)
    assert compiled.calls[0] == head + ("map1", 64, 32, 32, 1, y.data_ptr(), 64, 16)  # a pointer by its address
    assert compiled.calls[2] == head + ("map2", 128, 32, 32, 1, y.data_ptr(), 64, 16)
    assert compiled.calls[3] == compiled.calls[0]  # x again: from the table

    assert launch_mod._DirectLaunch.of(_DescriptorKernel(scratch=128)) is None
    assert launch_mod._DirectLaunch.of(_RecordingKernel()) is None  # not a launcher laid out as Triton's


def _toy_tuples(x_ptr, pair, n, N_TILE: tl.constexpr):
    pass


class _PointerKernel:
    """A compiled kernel without descriptors: Triton's launcher is then the C function itself
    (here an object without ``__code__``, recording its arguments)."""

    packed_metadata = "packed"
    function = "function"

    def __init__(self, scratch=0):
        from types import SimpleNamespace

        self.calls = []

        class CLauncher:
            def __call__(launcher, *args):
                self.calls.append(args)

        self.run = SimpleNamespace(
            launch=CLauncher(), global_scratch_size=scratch, profile_scratch_size=0, launch_cooperative_grid=False,
            launch_pdl=True, arg_annotations="annotations", kernel_signature="signature",
        )


def test_call_plans_file_and_replay_finished_calls(monkeypatch):
    """On any machine: ``CallPlans.filing`` files a block's launches where each was a finished
    call (filed, or launched again by ``launch_prepared``) and there were as many as expected,
    and ``launch`` replays them on the current stream; nothing is filed from a block with a
    launch on Triton's path, with a spoiled choice, with more launches than expected, or inside
    a forcing block, where nothing is replayed either; nor replayed with finished calls off."""
    from fusedmlp.ops import _common as common

    compiled = _PointerKernel()
    fast, misses, run = _recorded_cache(monkeypatch, _toy_tuples, compiled, {"N_TILE": 16}, 77)
    kernel = fast.kernel
    kernel._fusedmlp_fast = fast
    x, a, b = torch.empty(64), torch.empty(32), torch.empty(16)
    args = (x, (a, (b, 3)), 64)
    plans = common.CallPlans(size=2)
    with plans.filing("miss"):
        fast.call(run, (4,), args, {}, memo="m")  # the first launch of its kind: Triton's path
    assert misses == [1] and not plans.plans and not plans.launch("miss")
    fast.cache[next(iter(fast.cache))] = (compiled, {"N_TILE": 16}, launch_mod._DirectLaunch.of(compiled))
    with plans.filing("once"):
        fast.call(run, (4,), args, {}, memo="m")  # a hit that files its finished call
    with plans.filing("again"):
        assert launch_mod.launch_prepared(kernel, "m")
    assert len(compiled.calls) == 2 and compiled.calls[1] == compiled.calls[0]
    assert set(plans.plans) == {(0, "once"), (0, "again")}
    assert plans.launch("once") and plans.launch("again") and compiled.calls[3] == compiled.calls[0]
    again = lambda: launch_mod.launch_prepared(kernel, "m")  # noqa: E731
    for key, extra in (("spoiled", launch_mod.spoil_recording), ("two", again)):
        with plans.filing(key):
            assert launch_mod.launch_prepared(kernel, "m")
            extra()
        assert (0, key) not in plans.plans
    with plans.filing("two", launches=2):
        with launch_mod.recording() as inner:  # an inner block notes for itself alone
            assert launch_mod.launch_prepared(kernel, "m")
        assert launch_mod.launch_prepared(kernel, "m")
    assert len(inner) == 1 and (0, "two") not in plans.plans
    with launch_mod.forced():
        with plans.filing("forced"):
            assert launch_mod.launch_prepared(kernel, "m")
        assert (0, "forced") not in plans.plans and not plans.launch("once")
    calls = len(compiled.calls)
    monkeypatch.setattr(launch_mod, "FINISHED_CALLS", False)
    assert not plans.launch("once") and len(compiled.calls) == calls
    monkeypatch.setattr(launch_mod, "FINISHED_CALLS", True)
    with plans.filing("third"):  # a third plan: the table was full, and starts again
        assert launch_mod.launch_prepared(kernel, "m")
    assert set(plans.plans) == {(0, "third")}
    common.clear_call_plans()
    assert not plans.plans and not plans.launch("third")


@pytest.mark.parametrize("layout", ["spread", "sequence"])
def test_pointer_kernel_files_its_finished_call_through_the_c_launcher(monkeypatch, layout):
    """On any machine: a cached launch of a kernel without descriptors that names a memo key
    calls the C launcher itself (Triton 3.6's layout or 3.7-3.9's), every tensor by its
    address, inside tuples too (the launcher takes the integer as the pointer), and files that
    call; ``launch_prepared`` launches it again. A hit without a memo key, or with
    ``FINISHED_CALLS = False``, takes ``compiled.run`` with the tensors; a kernel that needs
    scratch memory has no direct launcher."""
    compiled = _PointerKernel()
    fast, misses, run = _recorded_cache(monkeypatch, _toy_tuples, compiled, {"N_TILE": 16}, 77, layout=layout)
    kernel = fast.kernel
    kernel._fusedmlp_fast = fast
    recorded = _RecordingKernel()  # compiled.run of the same compiled kernel, recorded apart
    x, a, b = torch.empty(64), torch.empty(32), torch.empty(16)
    fast.call(lambda: (recorded, {"N_TILE": 16}), (4,), (x, (a, (b, 3)), 64), {})  # the miss: Triton's path
    key = next(iter(fast.cache))
    fast.cache[key] = (recorded, {"N_TILE": 16}, launch_mod._DirectLaunch.of(compiled))
    fast.call(run, (4,), (x, (a, (b, 3)), 64), {})  # a hit without a memo key
    assert recorded.calls == [(4, 1, 1, 77, "function", "packed", None, None, None, x, (a, (b, 3)), 64, 16)]
    memo = launch_mod.exact_key((x, a, b))
    assert not launch_mod.launch_prepared(kernel, memo)
    fast.call(run, (4,), (x, (a, (b, 3)), 64), {}, memo=memo)
    assert not misses and len(compiled.calls) == 1 and len(recorded.calls) == 1
    kernel_args = (x.data_ptr(), (a.data_ptr(), (b.data_ptr(), 3)), 64, 16)
    if layout == "spread":
        head = (4, 1, 1, 77, "function", False, True, None, None, "packed", None, None, None)
        assert compiled.calls[0] == head + kernel_args
    else:
        head = (4, 1, 1, 77, "function", False, True, "packed", None, None, None, None, None, "annotations",
                "signature")
        assert compiled.calls[0] == head + (kernel_args,)
    assert launch_mod.launch_prepared(kernel, memo) and compiled.calls[1] == compiled.calls[0]
    monkeypatch.setattr(launch_mod, "FINISHED_CALLS", False)
    assert not launch_mod.launch_prepared(kernel, memo)
    fast.call(run, (4,), (x, (a, (b, 3)), 64), {}, memo=memo)
    assert len(recorded.calls) == 2 and len(compiled.calls) == 2
    assert launch_mod._DirectLaunch.of(_PointerKernel(scratch=64)) is None


@pytest.mark.parametrize("wrapper,takes_base_args", [("3.6", False), ("3.6", True), ("3.9", True)])
def test_cached_launch_expands_descriptors_in_the_sequence_layout(monkeypatch, wrapper, takes_base_args):
    """On any machine, the C launcher laid out as Triton 3.7's to 3.9's: the kernel's arguments
    (descriptors expanded, from the table) as one tuple after the kernel's metadata, empty
    hooks and scratch, and the launcher's argument annotations and signature; whether Triton's
    expansion takes a third argument (3.8, 3.9) or not (3.7), and whether the wrapper keeps the
    descriptors' positions (3.7, 3.8) or the signature (3.9). A 3.9 signature with a tuple (a
    descriptor may sit inside it) is not launched directly."""
    compiled = _DescriptorKernel(wrapper=wrapper)
    fast, misses, run = _recorded_cache(monkeypatch, _toy_desc, compiled, {"N_TILE": 16}, 77, layout="sequence")
    expanded = _recording_expansion(monkeypatch, takes_base_args)
    x, y, wider = torch.empty(64, 32), torch.empty(64), torch.empty(128, 32)
    for x_arg in (x, x, wider, x):
        fast.call(run, (4, 2), (), dict(x_desc=x_arg, y_ptr=y, n=64))
    assert len(misses) == 1 and fast.hits == 3
    assert expanded == [(x.data_ptr(), (64, 32), (16, 32)), (wider.data_ptr(), (128, 32), (16, 32))]
    head = (4, 2, 1, 77, "function", False, True, "packed", None, None, None, None, None, "annotations", "signature")
    assert compiled.calls[0] == head + (("map1", 64, 32, 32, 1, y.data_ptr(), 64, 16),)
    assert compiled.calls[1] == head + (("map2", 128, 32, 32, 1, y.data_ptr(), 64, 16),)
    assert compiled.calls[2] == compiled.calls[0]
    nested = _DescriptorKernel(wrapper="3.9", signature=(("tensordesc<fp32[16, 32]>", "i32"), "*fp32"))
    assert launch_mod._DirectLaunch.of(nested) is None
    monkeypatch.setattr(compiled.run, "gsan_enabled", True, raising=False)
    assert launch_mod._DirectLaunch.of(compiled) is None  # the sanitizer adds arguments


def test_cached_descriptor_launch_without_the_direct_launcher(monkeypatch):
    """On any machine, as where the C launcher is not called directly (``DIRECT_DESCRIPTORS =
    False``, or a launcher not laid out as written against): a hit of a descriptor-taking
    kernel goes to ``compiled.run`` with a fresh descriptor object over each ``*_desc`` tensor
    (Triton's wrapper fills it), every other argument as it is."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    compiled = _RecordingKernel()
    fast, misses, run = _recorded_cache(monkeypatch, _toy_desc, compiled, {"N_TILE": 16}, 5, layout=None)
    assert launch_mod._DirectLaunch.of(_DescriptorKernel()) is None
    x, y, wider = torch.empty(64, 32), torch.empty(64), torch.empty(128, 32)
    for x_arg in (x, wider):
        fast.call(run, (4,), (), dict(x_desc=x, y_ptr=y, n=64))
        fast.call(run, (4,), (), dict(x_desc=x_arg, y_ptr=y, n=64))
    assert len(misses) == 1 and fast.hits == 3
    for call, base in zip(compiled.calls, (x, x, wider)):
        (gx, gy, gz, stream, function, packed, metadata, enter, exit_, desc, *rest) = call
        assert (gx, gy, gz, stream, function, packed, metadata, enter, exit_) == (4, 1, 1, 5, "function", "packed",
                                                                               None, None, None)
        assert isinstance(desc, TensorDescriptor) and desc.base is base and rest == [y, 64, 16]


def test_gluon_launches_are_keyed_on_their_descriptor_blocks(monkeypatch):
    """On any machine: ``launch`` with ``descriptor_blocks`` (a Gluon kernel; launch_pingpong
    pops a config's block sizes into them) compiles once per set of block shapes and serves
    each set its own compiled kernel. Two calls alike but for the blocks shared one before the
    blocks were part of the key: the GLU forward's cooperative and wide forms (configs that
    differ in their block sizes alone) then both ran whichever was launched first, and LoRA's
    forward with a rank block of 32 ran one compiled for 16 (xs's columns past 16 unwritten)."""
    from triton.runtime.jit import JITFunction

    _recorded_cache(monkeypatch, _toy_desc, None, {}, 9, layout=None)  # the cache switched on as on a GPU
    compiled = {(16, 32): _RecordingKernel(), (32, 32): _RecordingKernel()}
    compiles = []

    class Kernel(JITFunction):
        def __getitem__(self, grid):
            def first_launch(*args, **kwargs):  # Triton's path: compiles for the descriptor's block
                compiles.append(kwargs["x_desc"][1])
                return compiled[kwargs["x_desc"][1]]
            return first_launch

    monkeypatch.setattr(launch_mod, "gluon_descriptors",
                        lambda named, blocks: {**named, "x_desc": ("descriptor", tuple(blocks["x_desc"]))})
    kernel = Kernel(_toy_desc)
    x, y = torch.empty(64, 32), torch.empty(64)
    for block in ((16, 32), (32, 32), (16, 32), (32, 32), (32, 32)):
        launch_mod.launch(kernel, (4,), x_desc=x, y_ptr=y, n=64, N_TILE=16, descriptor_blocks={"x_desc": block})
    assert compiles == [(16, 32), (32, 32)]
    assert len(compiled[(16, 32)].calls) == 1 and len(compiled[(32, 32)].calls) == 2  # the hits, each its own


def test_descriptor_parameters_are_wrapped_for_triton():
    from triton.tools.tensor_descriptor import TensorDescriptor

    t = torch.empty(32, 16)
    wrapped = launch_mod.as_descriptors(dict(x_desc=t, y_desc=t, x_ptr=t, n=3))
    assert isinstance(wrapped["x_desc"], TensorDescriptor) and wrapped["x_desc"].base is t
    assert wrapped["x_desc"] is not wrapped["y_desc"]  # one object each: the pre-hook sets their blocks
    assert wrapped["x_ptr"] is t and wrapped["n"] == 3


def test_exact_key_tells_apart_what_a_launch_is_built_from():
    """A memo key's parts (kernels/launch.py, ``exact_key``): one tensor's view at the same
    address but another shape, strides or dtype, floats by their bits, True from 1, tuples
    element by element; equal values give equal keys."""
    exact_key = launch_mod.exact_key
    base = torch.empty(64, 32)
    views = [base, base[:32], base.t(), base.view(torch.int32), base[1:]]
    assert len({exact_key(v) for v in views}) == len(views)
    assert exact_key(base) == exact_key(base.view(64, 32))  # another object, the same layout and address
    assert exact_key(0.0) != exact_key(-0.0) and exact_key(0.5) == exact_key(0.5)
    assert exact_key(True) != exact_key(1) and exact_key(1.0) != exact_key(1)
    assert exact_key((1, True)) != exact_key((1, 1)) and exact_key("silu") == exact_key("silu")


def test_finished_calls_are_launched_again_under_their_memo_key(monkeypatch):
    """On any machine: a cached launch with a direct launcher files its finished call under
    its memo key, and ``launch_prepared`` launches it again (on the stream current then; the
    call holds tensors only by their addresses), nothing else: not another key, another
    device, with a launch hook installed or with the cache off; a key that cannot be hashed is
    launched and never filed."""
    compiled = _DescriptorKernel()
    stream = [77]
    fast, misses, run = _recorded_cache(monkeypatch, _toy_desc, compiled, {"N_TILE": 16}, None)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: stream[0], raising=False)
    _recording_expansion(monkeypatch)
    kernel = fast.kernel
    kernel._fusedmlp_fast = fast
    x, y = torch.empty(64, 32), torch.empty(64)
    memo = (launch_mod.exact_key(x), launch_mod.exact_key(y))
    for _ in range(2):  # Triton's path, then a cached launch that files its call
        assert not launch_mod.launch_prepared(kernel, memo)
        fast.call(run, (4,), (), dict(x_desc=x, y_ptr=y, n=64), memo=memo)
    assert len(misses) == 1 and len(compiled.calls) == 1
    stream[0] = 78
    assert launch_mod.launch_prepared(kernel, memo) and fast.hits == 2
    assert compiled.calls[1] == (4, 1, 1, 78) + compiled.calls[0][4:]
    assert not any(isinstance(arg, torch.Tensor) for arg in compiled.calls[1])
    assert not launch_mod.launch_prepared(kernel, (launch_mod.exact_key(x[:32]), launch_mod.exact_key(y)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert not launch_mod.launch_prepared(kernel, memo)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(launch_mod, "_hooks_installed", lambda: True)
    assert not launch_mod.launch_prepared(kernel, memo)
    monkeypatch.setattr(launch_mod, "_hooks_installed", lambda: False)
    monkeypatch.setattr(launch_mod, "FAST_LAUNCH", False)
    assert not launch_mod.launch_prepared(kernel, memo)
    assert len(compiled.calls) == 2
    monkeypatch.setattr(launch_mod, "FAST_LAUNCH", True)
    unhashable = launch_mod.exact_key([1, 2])  # a list argument: launched, never filed
    fast.call(run, (4,), (), dict(x_desc=x, y_ptr=y, n=64), memo=unhashable)
    assert len(compiled.calls) == 3 and not launch_mod.launch_prepared(kernel, unhashable)


def test_every_call_plan_is_named():
    """``call_plans_by_name`` names each op's plans once by its module attribute (the repeated-step
    tests and benchmarks/call_plans_host.py report replays by those names)."""
    import fusedmlp.ops.glu
    import fusedmlp.ops.linear_act
    import fusedmlp.ops.lora
    import fusedmlp.ops.swiglu  # noqa: F401
    from fusedmlp.ops._common import CallPlans, call_plans_by_name

    named = call_plans_by_name()
    # (a test may make plans of its own, which no module holds)
    assert len({id(plans) for plans in named.values()}) == len(named) >= 12
    assert all(any(plans is other for other in CallPlans.instances) for plans in named.values())
    assert named["fusedmlp.ops.glu._fwd_plans"] is fusedmlp.ops.glu._fwd_plans
    assert named["fusedmlp.ops.swiglu._dx_plans"] is fusedmlp.ops.swiglu._dx_plans


@pytest.mark.parametrize("blocks_only", [True, False], ids=["block-shape-hook", "other-hook"])
def test_finished_calls_with_a_config_pre_hook(monkeypatch, blocks_only):
    """On any machine: a config's pre-hook that only gives descriptors their block shapes (the
    TMA configs' ``_set_descriptor_blocks``) is skipped on the direct path, so a hit files its
    finished call under its memo key; any other pre-hook runs on every launch, and nothing is
    filed (a replay would skip it)."""
    compiled = _DescriptorKernel()
    fast, misses, run = _recorded_cache(monkeypatch, _toy_desc, compiled, {"N_TILE": 16}, 77)
    _recording_expansion(monkeypatch)
    hooked = []
    fast.pre_hook, fast.pre_hook_sets_descriptor_blocks = (lambda named: hooked.append(1)), blocks_only
    kernel = fast.kernel
    kernel._fusedmlp_fast = fast
    x, y = torch.empty(64, 32), torch.empty(64)
    memo = (launch_mod.exact_key(x), launch_mod.exact_key(y))
    with launch_mod.recording() as noted:
        for _ in range(2):  # Triton's path, then a cached launch
            fast.call(run, (4,), (), dict(x_desc=x, y_ptr=y, n=64), memo=memo)
    assert len(misses) == 1 and len(compiled.calls) == 1
    assert noted[0] is None and (noted[1] is not None) == blocks_only
    assert launch_mod.launch_prepared(kernel, memo) == blocks_only
    assert len(hooked) == (0 if blocks_only else 1)


def _toy_pingpong(x_desc, y_ptr, count, N_TILE: tl.constexpr):
    pass


def test_pingpong_launches_reuse_their_finished_call(monkeypatch):
    """On any machine: ``launch_pingpong`` keys each launch on all its arguments, so its third
    call with the same tensors and values skips the launch path (the same call reaches the
    launcher), and a call that differs in a tensor's address, a value or the config takes it."""
    from triton.runtime.jit import JITFunction

    from fusedmlp.ops._common import launch_pingpong

    compiled = _DescriptorKernel()
    _recorded_cache(monkeypatch, _toy_pingpong, None, {}, 9)  # the cache switched on as on a GPU
    _recording_expansion(monkeypatch)

    class Kernel(JITFunction):
        def __getitem__(self, grid):
            return lambda *args, **kwargs: compiled  # Triton's path: the first launch of each kind

    monkeypatch.setattr(launch_mod, "gluon_descriptors", lambda named, blocks: named)
    paths = []
    slow_call = launch_mod.FastLaunch.call
    monkeypatch.setattr(launch_mod.FastLaunch, "call",
                        lambda self, *a, **k: paths.append(1) or slow_call(self, *a, **k))
    kernel = Kernel(_toy_pingpong)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "N_TILE": 16}
    x, other_x, y = torch.empty(64, 32), torch.empty(64, 32), torch.empty(64)
    calls = [(x, 64, config)] * 3 + [(other_x, 64, config), (x, 48, config), (x, 64, dict(config, N_TILE=32))]
    for x_arg, n, cfg in calls:
        launch_pingpong(kernel, cfg, 64, 32, 132, {"x_desc": x_arg}, {}, {}, y_ptr=y, count=n)
    assert len(paths) == 5  # all but the third call
    # the launcher's calls: the first and the last call went to Triton (a new compiled kind)
    assert len(compiled.calls) == 4 and compiled.calls[1] == compiled.calls[0]
    assert compiled.calls[2][-8:] == ("map2", 64, 32, 32, 1, y.data_ptr(), 64, 16)  # other_x's descriptor
    assert compiled.calls[3][-8:] == ("map1", 64, 32, 32, 1, y.data_ptr(), 48, 16)  # count = 48
