"""What sets a plain fused step's two host-time levels: the host thread, or the GPU behind it.

    PYTHONPATH=src python3 benchmarks/host_levels.py [--suite lora] [--runs 8] [--steps 200]

The suite's fused fwd+bwd step at a small shape (lora: 8192 x 1024, r 16; geglu: 1024 x
4096; bf16, the backward on the calling thread), eager's after it, in runs of back-to-back
steps with no sync inside a run. Per run: wall microseconds per step, the calling thread's CPU
time per step (``time.thread_time``: where wall time exceeds it, the thread waited, e.g. in a
launch that found the GPU's queue full), the GPU's time per step (CUDA events around the
run), the tensor descriptors the launch cache filled and the memory segments the allocator
took from CUDA during the run, the time of a fixed pure-Python loop just before it (the CPU's
own pace), and the SM clock nvidia-smi reports during the run (sampled every 20 ms from a
second process). ``--profile``: each fused run under cProfile, and the functions whose own
time differs most between the slowest run and the fastest."""

import argparse
import cProfile
import pstats
import statistics
import subprocess
import time

import torch

from fusedmlp.bench.suites import glu, lora

CASES = {"lora": (lora, (8192, 1024, 16)), "geglu": (glu, (1024, 4096))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="lora", choices=sorted(CASES))
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--profile", action="store_true",
                        help="cProfile each fused run; print the functions whose own time differs most "
                             "between the slowest run and the fastest")
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)
    import triton.backends.nvidia.driver as nvidia_driver

    fills = [0]  # tensor descriptors filled by the launch cache (kernels/launch.py's _DirectLaunch)
    fill = nvidia_driver.make_tensordesc_arg

    def counted_fill(*fill_args):
        fills[0] += 1
        return fill(*fill_args)

    nvidia_driver.make_tensordesc_arg = counted_fill
    suite, shape = CASES[args.suite]
    inputs, g = suite._make_inputs(shape, torch.bfloat16)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm", "--format=csv,noheader", "-lms", "20"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    marks, profiles = [], []
    print(f"{args.suite} {shape} {torch.cuda.get_device_name()}: per step, us")
    for impl in ("fused", "eager"):
        forward = suite._forward_fn(impl)
        step = lambda: torch.autograd.grad(forward(*inputs), wrt, g)  # noqa: E731
        step()
        torch.cuda.synchronize()
        for run in range(args.runs):
            loop0 = time.perf_counter()
            total = 0
            for i in range(200_000):  # a fixed piece of pure Python: the CPU's own pace
                total += i
            loop_ms = (time.perf_counter() - loop0) * 1e3
            fills_before, segments_before = fills[0], torch.cuda.memory_stats().get("segment.all.allocated", 0)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            profiler = cProfile.Profile() if args.profile and impl == "fused" else None
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            start.record()
            if profiler is not None:
                profiler.enable()
            for _ in range(args.steps):
                step()
            if profiler is not None:
                profiler.disable()
                profiles.append(((time.perf_counter() - wall0), pstats.Stats(profiler).stats))
            end.record()
            wall1, cpu1 = time.perf_counter(), time.thread_time()
            torch.cuda.synchronize()
            wall2 = time.perf_counter()
            marks.append((impl, run, time.time() - (wall2 - wall0), time.time()))
            print(f"  {impl} run {run}: wall {(wall1 - wall0) / args.steps * 1e6:6.1f} (to the sync "
                  f"{(wall2 - wall0) / args.steps * 1e6:6.1f}), thread CPU {(cpu1 - cpu0) / args.steps * 1e6:6.1f}, "
                  f"GPU {start.elapsed_time(end) / args.steps * 1e3:6.1f}; descriptors filled {fills[0] - fills_before}, "
                  f"segments allocated {torch.cuda.memory_stats().get('segment.all.allocated', 0) - segments_before}, "
                  f"Python loop {loop_ms:.1f} ms", flush=True)
    if profiles:
        (slow_time, slow), (fast_time, fast) = max(profiles, key=lambda p: p[0]), min(profiles, key=lambda p: p[0])
        print(f"  cProfile, slowest fused run ({slow_time / args.steps * 1e6:.0f} us a step) against the fastest "
              f"({fast_time / args.steps * 1e6:.0f}): own time per step, us")
        own = lambda stats, key: stats.get(key, (0, 0, 0.0))[2] / args.steps * 1e6  # noqa: E731
        for key in sorted(set(slow) | set(fast), key=lambda k: own(fast, k) - own(slow, k))[:15]:
            print(f"    {own(slow, key):8.1f} {own(fast, key):8.1f}  {key[2]} ({key[0].split('/')[-1]}:{key[1]})")
    time.sleep(0.1)
    smi.terminate()
    samples = []
    for line in smi.stdout.read().splitlines():
        stamp, clock = (part.strip() for part in line.split(","))
        seconds = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + stamp.split(".")[1])
        samples.append((seconds, float(clock.split()[0])))
    for impl, run, begin, finish in marks:
        inside = [clock for t, clock in samples if begin <= t <= finish]
        if inside:
            print(f"  {impl} run {run}: SM clock {min(inside):.0f}-{max(inside):.0f} MHz, median "
                  f"{statistics.median(inside):.0f} ({len(inside)} samples)")


if __name__ == "__main__":
    main()
