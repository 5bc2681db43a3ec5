"""Timing, peak memory and reporting shared by every bench suite."""

from __future__ import annotations

import contextlib
import csv
import importlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import gpu_clock


@dataclass
class Measurement:
    suite: str
    shape: dict
    dtype: str
    impl: str
    mode: str  # "fwd", "bwd" or "fwd+bwd"
    ms: float | None = None
    tflops: float | None = None
    peak_mib: float | None = None  # above the inputs (and, for bwd, above the saved forward state)
    note: str = ""
    extra: dict = field(default_factory=dict)


def median_ms(fn, warmup_ms: int = 100, rep_ms: int = 500) -> float:
    """Median time of ``fn`` in ms over CUDA-event-timed repeats (L2 flushed by do_bench)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def interleaved_ms(calls: dict, rounds: int) -> dict:
    """{name: [ms of each round]} of each callable in ``calls`` timed by ``median_ms`` in
    ``rounds`` rounds, every other one in reverse order (as ``run_suite`` with ``--rounds``:
    no callable is always the one timed on the hottest GPU), after one untimed call of each.
    For the comparisons of benchmarks/."""
    for call in calls.values():
        call()
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    order = list(calls)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(round(median_ms(calls[name]), 4))
    return times


def interleaved_us_row(calls: dict, rounds: int, **fields) -> dict:
    """``fields`` plus each callable's median over ``interleaved_ms``'s rounds in us, and the
    rounds themselves (``rounds_ms``); printed as one line. For the comparison scripts of
    benchmarks/ (CUDA-graph replays, one row per shape)."""
    times = interleaved_ms(calls, rounds)
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    print(*fields.values(), {name: round(v, 1) for name, v in medians.items()}, flush=True)
    return {**fields, **medians, "rounds_ms": times}


def write_record(script: str, file_stem: str = None, **payload) -> None:
    """``{"environment": ..., **payload}`` to $OUT/SCRIPT.json, or $OUT/FILE_STEM.json ($OUT
    defaults to .), the environment's command the script's own (``python3 benchmarks/SCRIPT.py
    ARGS``)."""
    env = environment()
    env["command"] = " ".join([f"python3 benchmarks/{script}.py"] + sys.argv[1:])
    with open(os.path.join(os.environ.get("OUT", "."), f"{file_stem or script}.json"), "w") as f:
        json.dump({"environment": env, **payload}, f, indent=1)


def stepwise_ms(steps: dict, rounds: int, count: int, skip: int, rotated: bool) -> dict:
    """{name: [median ms of each round]} of each step in ``steps``, every call CUDA-event-timed
    alone after a write that flushes the L2 cache. ``rotated``: each round calls the steps in
    turn, ``count`` times each, the order rotated by one every time (the board's clocks drift
    under sustained load by several percent, and all steps then share the drift); otherwise
    each round runs a block of ``count`` calls of one step after another, every other round in
    reverse order (the clocks a training loop of one step sees). The first ``skip`` calls of
    each step in a round are not counted. For the step comparisons of benchmarks/."""
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    names = list(steps)
    times = {name: [] for name in names}

    def timed(name, pairs):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        steps[name]()
        end.record()
        pairs[name].append((start, end))

    for round_ in range(rounds):
        pairs = {name: [] for name in names}
        if rotated:
            for i in range(count):
                for name in names[i % len(names):] + names[:i % len(names)]:
                    timed(name, pairs)
        else:
            for name in names if round_ % 2 == 0 else names[::-1]:
                for _ in range(count):
                    timed(name, pairs)
                torch.cuda.synchronize()  # one block's events at a time
        torch.cuda.synchronize()
        for name in names:
            ms = sorted(start.elapsed_time(end) for start, end in pairs[name][skip:])
            times[name].append(ms[len(ms) // 2])
    return times


def swiglu_dh_inputs(tokens: int, d: int, hidden: int, dtype=torch.bfloat16):
    """Random CUDA inputs of SwiGLU's store-mode dh for the kernel sweeps in benchmarks/
    (glu_dh_*.py), drawn in this order: x and gy ``[tokens, d]``, w_up and w_gate ``[hidden, d]``
    and w_down ``[d, hidden]`` (each scaled by 1 / sqrt(fan-in)), h ``[tokens, 2 * hidden]``."""
    x = torch.randn(tokens, d, device="cuda", dtype=dtype)
    gy = torch.randn(tokens, d, device="cuda", dtype=dtype)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dtype) / d**0.5 for _ in range(2))
    w_down = torch.randn(d, hidden, device="cuda", dtype=dtype) / hidden**0.5
    h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dtype)
    return x, gy, w_up, w_gate, w_down, h


def swiglu_dh_cases(shapes):
    """``((tokens, d, hidden), swiglu_dh_inputs(tokens, d, hidden))`` for each shape, drawn one
    after another after ``torch.manual_seed(0)``: the dh sweeps' inputs, the same on every run."""
    torch.manual_seed(0)
    for tokens, d, hidden in shapes:
        yield (tokens, d, hidden), swiglu_dh_inputs(tokens, d, hidden)


def swiglu_dh_library(inputs: tuple, store_z: bool = True):
    """The library's store-mode dh on ``swiglu_dh_inputs``' tensors (``glu_backward_dh_impl``,
    silu, g formed from gy and w_down): (dh, db, z). The reference of the dh kernel sweeps."""
    from ..ops.glu import glu_backward_dh_impl

    x, gy, w_up, w_gate, w_down, h = inputs
    return glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, store_z)


def max_abs_difference(pairs) -> float:
    """The largest |a - b| over the (a, b) tensor pairs, in fp32 (a sweep's check of its outputs)."""
    return max((a.float() - b.float()).abs().max().item() for a, b in pairs)


def graph_us(fn, rep_ms: int | None = None) -> float:
    """Median microseconds of ``fn`` replayed in a CUDA graph (kernel time, no host time),
    after one eager call (compiles, tunes); ``rep_ms`` defaults to $REP_MS, else 200. For
    the kernel sweeps in benchmarks/."""
    import triton.testing

    fn()
    torch.cuda.synchronize()
    rep = rep_ms if rep_ms is not None else int(os.environ.get("REP_MS", 200))
    return float(triton.testing.do_bench_cudagraph(fn, rep=rep)) * 1e3


def print_sweep_row(row: dict) -> None:
    """One row of a kernel sweep (benchmarks/) as a JSON line, times to 0.1 us."""
    print(json.dumps({k: (round(v, 1) if isinstance(v, float) and not k.endswith("maxdiff") else v)
                      for k, v in row.items()}))


def write_sweep(script: str, rows: list[dict]) -> None:
    """A kernel sweep's rows, with the device, versions and the command that made them
    (``python benchmarks/SCRIPT.py ARGS``), to $OUT/SCRIPT.json ($OUT defaults to .)."""
    import triton

    record = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                  command=f"python benchmarks/{script}.py " + " ".join(sys.argv[1:]), rows=rows)
    with open(os.path.join(os.environ.get("OUT", "."), f"{script}.json"), "w") as f:
        json.dump(record, f, indent=1)


def host_us_per_call(fn, calls: int = 200, runs: int = 5) -> float:
    """Host microseconds per call of ``fn``: the median over ``runs`` of the wall time of
    ``calls`` back-to-back calls with no sync between them (after one warm-up call). Where
    a call's GPU work is shorter than its host work, this is the host's pace."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def host_us_from_idle(fn, count: int = 30) -> float:
    """Host microseconds of one call of ``fn`` started on an idle GPU: the median over
    ``count`` calls of the call's wall time after a synchronisation (the GPU work it queues
    does not hold the host back, as long as it fits the launch queue)."""
    samples = []
    for _ in range(count):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def wrap_in_timer(owner, name: str, totals: dict, label: str | None = None) -> None:
    """Replace ``owner.name`` (a module's function, an object's method or a class's static
    method) by a wrapper that adds the nanoseconds spent inside it, inclusive, to
    ``totals[label]`` (``label`` defaults to ``name``): for the probes of benchmarks/ that
    split a call's host time among the op layer's functions."""
    import functools
    import inspect

    fn = getattr(owner, name)
    static = isinstance(inspect.getattr_static(owner, name, None), staticmethod)
    label = label or name

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[label] = totals.get(label, 0) + time.perf_counter_ns() - start

    setattr(owner, name, staticmethod(wrapper) if static else wrapper)


def flushed_event_times_ms(fn, count: int, flush: torch.Tensor, setup=None) -> list:
    """Milliseconds of each of ``count`` calls of ``fn`` (``fn(setup())`` with a ``setup``,
    which runs untimed), every call CUDA-event-timed alone after ``flush.zero_()``, a write
    that evicts the L2 cache (at least 256 MiB, as do_bench writes). In call order; one
    synchronisation at the end."""
    pairs = []
    for _ in range(count):
        state = setup() if setup is not None else None
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if setup is None:
            fn()
        else:
            fn(state)
        end.record()
        pairs.append((start, end))
        del state
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def profile_steps(step, warmup: int = 10, count: int = 20):
    """``torch.profiler``'s record of ``count`` calls of ``step`` (CUDA activity), after
    ``warmup`` untimed ones. For the profile scripts of benchmarks/."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(count):
            step()
        torch.cuda.synchronize()
    return prof


def median_ms_each_after(setup, fn, warmup: int = 3, rep_ms: int = 500) -> float:
    """Median time in ms of ``fn(setup())``, CUDA-event-timed around ``fn`` alone: ``setup``
    runs untimed before each call. For a backward that runs once per forward (the store
    modes write their gradients over the saved pre-activations), so every timed backward
    has a fresh forward of its own. L2 is flushed before each call, as do_bench does."""
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")

    def timed(count):
        return sorted(flushed_event_times_ms(fn, count, flush, setup))

    estimate = timed(warmup)[warmup // 2]
    times = timed(max(5, min(1000, int(rep_ms / max(estimate, 1e-3)))))
    return float(times[len(times) // 2])


def peak_mib_above_current(fn) -> float:
    """Peak memory ``fn`` allocates beyond what is allocated when it starts, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def rounded_to(dtype: torch.dtype, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """float64 copies of ``tensors`` holding the values they take in ``dtype``: a CPU check's
    reference sees the inputs as the fused run does (the rounding of the inputs is not the
    kernel's error; with a relu it can even flip a derivative)."""
    return [t.detach().to(dtype).double() for t in tensors]


def environment() -> dict:
    import triton

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["fusedmlp"] + sys.argv[1:]) if sys.argv else "",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env.update(gpu_clock.device_limits())
    else:
        env["device"] = f"CPU ({platform.processor() or platform.machine()}), Triton interpreter"
    from ..kernels.tuning_cache import cache_dir

    # where the kernels' configs and the forwards' forms may come from untimed (earlier processes)
    folder = cache_dir()
    env["tuning_cache"] = str(folder) if folder is not None else "off"
    peers = installed_versions(PEER_DISTRIBUTIONS)
    if peers:
        env["peers"] = peers
    return env


# the peer libraries the suites time where installed (distribution names, for their versions)
PEER_DISTRIBUTIONS = ("liger-kernel", "quack-kernels", "nvidia-cutlass-dsl")


def installed_versions(distributions) -> dict:
    """{distribution: version} of those of ``distributions`` that are installed."""
    from importlib import metadata

    versions = {}
    for name in distributions:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def forward_forms() -> dict:
    """Per op, the forward's form chosen per shape key in this process (the GLU forward,
    ops/glu.py, linear_act's, ops/linear_act.py, and LoRA's beyond its ping-pong width,
    ops/lora.py), with the median ms per launch of each form that the choosing call measured
    (in this process, or in an earlier one whose choice the tuning cache held); ops that chose
    nothing are left out."""
    from ..ops.glu import glu_forward_form
    from ..ops.linear_act import linear_forward_form
    from ..ops.lora import lora_forward_form

    def row(chooser, key, times):
        parts = (str(part).replace("torch.", "") if isinstance(part, torch.dtype) else part for part in key)
        return dict(zip(chooser.fields, parts), chosen=chooser.chosen[key],
                    ms={name: round(ms, 4) for name, ms in times.items()})

    choosers = {"glu": glu_forward_form, "linear_act": linear_forward_form, "lora": lora_forward_form}
    return {op: [row(chooser, key, times) for key, times in chooser.times.items()]
            for op, chooser in choosers.items() if chooser.times}


def write_json(path: Path, env: dict, rows: list[Measurement]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"environment": env, "results": [asdict(r) for r in rows]}
    forms = forward_forms()
    if forms:
        payload["forward_forms"] = forms
    path.write_text(json.dumps(payload, indent=1))


def write_csv(path: Path, env: dict, rows: list[Measurement]) -> None:
    """One line per measurement; shape and extras flattened into columns; env in every line."""
    flat = []
    for r in rows:
        rec = asdict(r)
        shape, extra = rec.pop("shape"), rec.pop("extra")
        flat.append({**{f"shape_{k}": v for k, v in shape.items()}, **rec, **extra,
                     "device": env.get("device"), "torch": env.get("torch"), "triton": env.get("triton"),
                     "date": env.get("date")})
    columns = list(dict.fromkeys(k for rec in flat for k in rec))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)


def clock_line(rows: list[Measurement], env: dict) -> str | None:
    """The run's GPU clocks, power and temperatures in a sentence (``gpu_clock.run_line``), or None."""
    return gpu_clock.run_line([{key: r.extra[key] for key in gpu_clock.KEYS if key in r.extra} for r in rows], env)


def format_table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table (readable in a terminal and pasteable into the README)."""
    cells = [[("" if c is None else (f"{c:.3g}" if isinstance(c, float) else str(c))) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


def progress(total: int, desc: str):
    """A tqdm progress bar on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)


# --------------------------------------------------------------------------------------
# Pieces of a suite: one measurement, the run loop, the summary table
# --------------------------------------------------------------------------------------
def with_clock(time_fn, *args):
    """``(time_fn(*args), clock)``: ``clock`` the GPU's SM clock, power and temperature over the
    call (``gpu_clock``'s summary; {} where NVML is not readable)."""
    with gpu_clock.sampling() as clock:
        result = time_fn(*args)
    return result, clock.summary()


def measure(forward, mode: str, inputs: tuple, g, steps=None):
    """(ms, peak MiB, extra) of ``forward(*inputs)`` in one mode, or of ``steps[mode]`` (a
    bare-GEMM floor: a callable) when ``steps`` is given.

    fwd: a training forward (inputs require grad); ``extra["retained_bytes"]`` is what the
    forward leaves allocated (output and saved state). bwd: the backward alone, each one of
    a fresh forward (timed apart from it).
    fwd+bwd: both. Gradients are taken for the inputs that require them, with ``g`` upstream.
    ``extra`` also holds the GPU's SM clock, power and temperature over the timing
    (``gpu_clock``: ``sm_mhz``, ``sm_mhz_min``, ``power_w``, ``temp_c``) where NVML is readable.
    """
    extra = {}

    def clocked(time_fn, *args):  # time_fn(*args), the GPU's clock over it into extra
        ms, clock = with_clock(time_fn, *args)
        extra.update(clock)
        return ms

    if steps is not None:
        fn = steps[mode]
        fn()
        return clocked(median_ms, fn), peak_mib_above_current(fn), extra
    wrt = tuple(t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad)
    if mode == "fwd":
        fn = lambda: forward(*inputs)  # noqa: E731
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        y = forward(*inputs)
        torch.cuda.synchronize()
        extra["retained_bytes"] = torch.cuda.memory_allocated() - before
        del y
        return clocked(median_ms, fn), peak_mib_above_current(fn), extra
    if mode == "fwd+bwd":
        fn = lambda: torch.autograd.grad(forward(*inputs), wrt, g)  # noqa: E731
        for _ in range(2):
            fn()
        return clocked(median_ms, fn), peak_mib_above_current(fn), extra
    # bwd: each timed backward has its own forward (a store mode's backward runs once per forward)
    forward_once = lambda: forward(*inputs)  # noqa: E731
    backward = lambda y: torch.autograd.grad(y, wrt, g)  # noqa: E731
    ms = clocked(median_ms_each_after, forward_once, backward)
    y = forward_once()
    return ms, peak_mib_above_current(lambda: backward(y)), extra


GRAPHED = "_graph"  # the suffix of a graphed impl: ``X_graph`` is impl X captured by graph_steps


def graph_steps(forward, inputs: tuple, g) -> dict:
    """{mode: replay of a CUDA graph capturing that mode of ``forward(*inputs)``} for fwd and
    fwd+bwd (gradients for the inputs that require them, ``g`` upstream), each captured
    through ``capture_cuda_graph`` (warm-up calls first, in ``graph_capture_mode``). A replay
    costs no launch or Python time: what a step's kernels take once the host is out of the
    way, on both sides of a comparison. The backward alone is not captured (a store mode's
    backward writes over its forward's saved state, so it runs once per forward).

    Each replay holds the captured function, and with it the inputs its graph reads: a peer's
    ``adapt_inputs`` makes tensors of its own, which a graph does not keep alive (a replay after
    they were freed read whatever reused their memory, and an illegal address once the caching
    allocator had returned it)."""
    from .._cuda_graph import capture_cuda_graph

    inputs = own_inputs(forward, inputs)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    fns = {"fwd": lambda: forward(*inputs), "fwd+bwd": lambda: torch.autograd.grad(forward(*inputs), wrt, g)}

    def replay_of(fn):
        graph = capture_cuda_graph(fn)[0]

        def replay():
            graph.replay()
        replay.captured = fn  # the closure over inputs: alive as long as the replay
        return replay

    return {mode: replay_of(fn) for mode, fn in fns.items() if runs_mode(forward, mode)}


def peer_forward(forward, *, adapt_inputs=None, modes=None):
    """``forward`` marked for ``run_suite``: ``adapt_inputs(inputs) -> inputs`` gives it the
    suite's inputs in its own layout (called once per shape, untimed: weights packed the way
    a model using that library stores them); ``modes`` are the modes it runs (a library with
    no autograd backward for the op: ``("fwd",)``); the others are left out of the run."""
    forward.adapt_inputs = adapt_inputs
    forward.modes = modes
    return forward


def own_inputs(forward, inputs: tuple) -> tuple:
    """The suite's ``inputs`` as ``forward`` takes them (``peer_forward``'s ``adapt_inputs``)."""
    adapt = getattr(forward, "adapt_inputs", None)
    return tuple(adapt(inputs)) if adapt is not None else inputs


def runs_mode(forward, mode: str) -> bool:
    """Whether ``forward`` (a suite's impl, or None for a prepared step) runs ``mode``."""
    modes = getattr(forward, "modes", None)
    return modes is None or mode in modes


def run_suite(name, shapes, shape_fields, dtype, impls, modes, make_inputs, make_forward, gemm_steps,
              gemms_per_mode, gemm_flops, on_shape_done=None, custom_steps=None) -> list[Measurement]:
    """Every (shape, impl, mode) of a suite, with a progress bar.

    ``make_inputs(shape, dtype) -> (inputs, g)``; ``make_forward(impl)`` a callable, built once
    per shape so torch.compile compiles each graph once; ``gemm_steps(inputs, g)`` the
    {mode: callable} of the bare cuBLAS GEMMs (impl ``gemm``); TFLOP/s counts
    ``gemms_per_mode[mode] * gemm_flops(shape)`` (the model's GEMM work). A failing
    implementation is recorded with its error and the run goes on; ``on_shape_done(rows)``
    runs after each shape (to save partial results). ``custom_steps`` maps other impls that
    are timed as prepared steps (e.g. CUDA-graph replays) to ``fn(inputs, g) -> {mode: callable}``;
    an impl ``X_graph`` without one is ``make_forward(X)`` captured by ``graph_steps`` (fwd and
    fwd+bwd; its peak memory is the graph's pool, allocated at capture, so it reads as 0). A
    forward marked by ``peer_forward`` gets the inputs in its own layout and runs only its
    modes (plain and graphed alike).

    ``ROUNDS`` (``timing_rounds``) > 1 times each shape's impls that many times, every other
    round in reverse order, and reports each (impl, mode)'s median over the rounds (the times
    of every round in ``extra["ms_rounds"]``; peak memory from the first): with one round the
    impls timed first at a large shape run on a cooler GPU than the GEMM floor timed last
    (benchmarks/NOTES.md, "Timing order").

    ``AUTOCAST`` (``autocast_run``) set to a 16-bit dtype ``dtype`` runs mixed precision as
    a training loop under ``torch.autocast`` does: x and ``g`` in ``dtype``, the other inputs
    (weights, biases) fp32 masters, every impl's forward and every prepared step (graph
    captures) under ``torch.autocast("cuda", dtype)`` with its weight cache off (``_autocast``);
    the GEMM floor in ``dtype``.
    """
    custom_steps = dict(custom_steps or {})
    mixed = AUTOCAST
    if gemm_steps is not None:
        custom_steps["gemm"] = gemm_steps if mixed is None else (
            lambda inputs, g: gemm_steps(tuple(t.detach().to(mixed) for t in inputs), g))
    if mixed is not None:
        make_inputs, make_forward = _mixed_precision(make_inputs, make_forward, mixed)
    for impl in impls:
        if impl.endswith(GRAPHED) and impl not in custom_steps:
            custom_steps[impl] = (lambda inputs, g, base=impl[:-len(GRAPHED)]:
                                  graph_steps(make_forward(base), inputs, g))
    rows = []
    rounds = ROUNDS
    bar = progress(len(shapes) * len(impls) * len(modes) * rounds, f"bench {name}")
    for shape in shapes:
        torch._dynamo.reset()  # each shape compiles afresh; no recompile limit in the way
        inputs, g = make_inputs(shape, dtype)
        forwards = {impl: (None if impl in custom_steps else make_forward(impl)) for impl in impls}
        impl_inputs = {impl: own_inputs(forwards[impl], inputs) for impl in impls}
        shape_dict = dict(zip(shape_fields, shape))
        dtype_name = str(dtype).replace("torch.", "")
        shape_rows = {}  # (impl, mode) -> Measurement, in the first round's order
        for round_ in range(rounds):
            for impl in impls if round_ % 2 == 0 else impls[::-1]:
                steps = None
                for mode in modes:
                    bar.set_postfix_str(f"{shape_dict} {impl} {mode}" + (f" round {round_ + 1}" if rounds > 1 else ""))
                    row = shape_rows.get((impl, mode))
                    if (row is not None and row.note) or not runs_mode(forwards[impl], mode):
                        bar.update()  # failed in an earlier round (not again), or a mode the impl lacks
                        continue
                    try:
                        if impl in custom_steps and steps is None:  # prepared once per round (graphs: captured)
                            with _autocast_block():
                                steps = custom_steps[impl](inputs, g)
                        if steps is not None and mode not in steps:  # e.g. a graphed backward alone
                            bar.update()
                            continue
                        ms, peak_mib, extra = measure(forwards[impl], mode, impl_inputs[impl], g, steps)
                        if row is None:  # peak memory and extras from the first round
                            row = shape_rows[impl, mode] = Measurement(name, shape_dict, dtype_name, impl, mode,
                                                                       peak_mib=peak_mib, extra=extra)
                        row.extra.setdefault("ms_rounds", []).append(ms)
                        row.extra.setdefault("clock_rounds", []).append(
                            {key: extra.pop(key) for key in gpu_clock.KEYS if key in extra})
                    except Exception as exc:  # a peer failing must not lose the other figures
                        row = shape_rows.setdefault((impl, mode), Measurement(name, shape_dict, dtype_name, impl, mode))
                        row.note = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    torch.cuda.empty_cache()
                    bar.update()
                del steps
        for row in shape_rows.values():
            clocks = row.extra.pop("clock_rounds", [])
            row.extra.update(gpu_clock.merge(clocks))
            if rounds > 1 and any(clocks):
                row.extra["sm_mhz_rounds"] = [c.get("sm_mhz") for c in clocks]
            times = row.extra.pop("ms_rounds", [])
            if times:
                row.ms = statistics.median(times)
                row.tflops = gemms_per_mode[row.mode] * gemm_flops(shape) / (row.ms * 1e-3) / 1e12
                if rounds > 1:
                    row.extra["ms_rounds"] = times
        rows.extend(shape_rows.values())
        del inputs, g, forwards, impl_inputs
        if on_shape_done is not None:
            on_shape_done(rows)
    bar.close()
    return rows


ROUNDS = 1  # timing rounds per shape in run_suite (`fusedmlp bench --rounds`)
AUTOCAST = None  # run_suite's impls under torch.autocast in this dtype (`fusedmlp bench --autocast`)


def _autocast(dtype):
    """``torch.autocast`` on CUDA without its cache of cast weights: a CUDA graph captured with
    the cache on reads copies that the cache frees when the outermost autocast block exits
    (PyTorch's CUDA-graph notes say to turn it off), and each layer's weight is cast once per
    step either way (every suite's forward uses each weight once)."""
    return torch.autocast("cuda", dtype=dtype, cache_enabled=False)


def _autocast_block():
    return _autocast(AUTOCAST) if AUTOCAST is not None else contextlib.nullcontext()


def _mixed_precision(make_inputs, make_forward, dtype):
    """``(make_inputs, make_forward)`` of an autocast run: x (the first input) and g in
    ``dtype``, the other inputs fp32 copies (requiring grad as before); forwards called under
    ``torch.autocast``."""
    def inputs_fp32_params(shape, _):
        inputs, g = make_inputs(shape, dtype)
        params = tuple(t.detach().float().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                       for t in inputs[1:])
        return (inputs[0], *params), g

    def forward_under_autocast(impl):
        forward = make_forward(impl)

        def run(*inputs):
            with _autocast(dtype):
                return forward(*inputs)

        return peer_forward(run, adapt_inputs=getattr(forward, "adapt_inputs", None),
                            modes=getattr(forward, "modes", None))

    return inputs_fp32_params, forward_under_autocast


@contextlib.contextmanager
def timing_rounds(count: int):
    """``run_suite`` times each shape's impls in ``count`` rounds inside the block."""
    global ROUNDS
    if count < 1:
        raise ValueError(f"rounds must be >= 1, got {count}")
    before, ROUNDS = ROUNDS, count
    try:
        yield
    finally:
        ROUNDS = before


@contextlib.contextmanager
def autocast_run(dtype):
    """``run_suite`` runs mixed precision under ``torch.autocast`` in ``dtype`` (None: off)
    inside the block."""
    global AUTOCAST
    if dtype not in (None, torch.float16, torch.bfloat16):
        raise ValueError(f"autocast runs in float16 or bfloat16, got {dtype}")
    before, AUTOCAST = AUTOCAST, dtype
    try:
        yield
    finally:
        AUTOCAST = before


def summary_table(rows: list[Measurement], impl_order, peers):
    """Headers and rows: one line per (shape, mode): ms per impl, ratios to the GEMM floor
    and of each fused variant to each peer that ran (below 1 = fused is faster), peak MiB,
    and each plain fused variant's peak against each plain peer's (``fused/liger MiB``: below
    1 = fused holds less; graphed steps' peaks are not measured).
    A plain fused variant is set against the plain peers only (a graphed peer pays no host
    time); a graphed one (``*_graph``) against every peer."""
    impls = [i for i in impl_order if any(r.impl == i for r in rows)]
    fused = [i for i in impls if i.startswith("fused")]
    peers = [i for i in impls if i in peers]
    pairs = [(f, p) for f in fused for p in peers if f.endswith(GRAPHED) or not p.endswith(GRAPHED)]
    fields = list(rows[0].shape) if rows else []
    keys = list(dict.fromkeys((tuple(r.shape.values()), r.mode) for r in rows))
    lookup = {(tuple(r.shape.values()), r.mode, r.impl): r for r in rows}
    ratio = lambda a, b: (a / b) if (a is not None and b) else None  # noqa: E731
    headers = fields + ["mode"] + [f"{i} ms" for i in impls]
    if "gemm" in impls:
        headers += [f"{i}/gemm" for i in impls if i != "gemm"]
    headers += [f"{f}/{p}" for f, p in pairs]
    headers += [f"{i} MiB" for i in impls if i != "gemm"]
    peak_pairs = [(f, p) for f, p in pairs if not f.endswith(GRAPHED)]
    headers += [f"{f}/{p} MiB" for f, p in peak_pairs]
    table = []
    for shape, mode in keys:
        got = {i: lookup.get((shape, mode, i)) for i in impls}
        ms = {i: (got[i].ms if got[i] else None) for i in impls}
        line = list(shape) + [mode] + [ms[i] for i in impls]
        if "gemm" in impls:
            line += [ratio(ms[i], ms["gemm"]) for i in impls if i != "gemm"]
        line += [ratio(ms[f], ms[p]) for f, p in pairs]
        peak = {i: (got[i].peak_mib if got[i] else None) for i in impls}
        line += [peak[i] for i in impls if i != "gemm"]
        line += [ratio(peak[f], peak[p]) for f, p in peak_pairs]
        table.append(line)
    return headers, table


def module_importable(name: str) -> bool:
    """Whether a peer library imports here (a broken install counts as absent)."""
    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


def available_impls(impls, max_autotune: bool = False, optional_peers: dict | None = None) -> list[str]:
    """``impls`` in order, without compile_max unless asked for (it compiles for minutes) and
    without the optional peers (impl -> module) that do not import on this machine."""
    optional_peers = optional_peers or {}
    return [i for i in impls if (i != "compile_max" or max_autotune)
            and (i not in optional_peers or module_importable(optional_peers[i]))]
