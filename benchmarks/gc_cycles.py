"""Reference cycles a fused training step leaves for Python's garbage collector, per op.

    PYTHONPATH=src python3 benchmarks/gc_cycles.py

For each suite's fused fwd+bwd step at a small shape (the suites' inputs, bf16, the backward
on the calling thread) and eager PyTorch's: the objects a step leaves unreachable (found
with ``gc.DEBUG_SAVEALL`` over 10 steps), by type, the functions and frames among them (name,
file, line) and the tensors' storages they hold; then host microseconds per step of
back-to-back steps with the collector on and off. Objects in cycles live until a collection:
tensors among them keep their memory, and a collection walks them."""

import collections
import gc
import time

import torch

from fusedmlp.bench.suites import glu, linear_act, lora, mlp, swiglu

CASES = {
    "lora": (lora, (8192, 1024, 16)),
    "geglu": (glu, (1024, 4096)),
    "swiglu": (swiglu, (4096, 512, 1792)),
    "linear_act": (linear_act, (4096, 512, 1792)),
    "mlp": (mlp, mlp.DEFAULT_SHAPES[0]),
}


def step_fn(suite, shape, impl):
    inputs, g = suite._make_inputs(shape, torch.bfloat16)
    forward = suite._forward_fn(shape)(impl) if suite is mlp else suite._forward_fn(impl)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return lambda: torch.autograd.grad(forward(*inputs), wrt, g)


def unreachable(step, steps=10):
    """(objects per step, Counter of types, sorted names of the functions and code among them)."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    for _ in range(steps):
        step()
    found = gc.collect()
    gc.set_debug(0)
    garbage = list(gc.garbage)
    gc.garbage.clear()
    gc.enable()
    kinds = collections.Counter(type(o).__name__ for o in garbage)
    names = collections.Counter()
    for o in garbage:
        if type(o).__name__ == "function":
            names[f"function {o.__qualname__} ({o.__code__.co_filename.split('/')[-1]}:{o.__code__.co_firstlineno})"] += 1
        elif type(o).__name__ == "frame":
            names[f"frame {o.f_code.co_name} ({o.f_code.co_filename.split('/')[-1]}:{o.f_lineno})"] += 1
        elif type(o).__name__ == "method":
            names[f"method {getattr(o, '__qualname__', o.__func__.__qualname__)}"] += 1
    del garbage
    return found / steps, kinds, names


def host_us(step, steps=200):
    step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / steps * 1e6


def main():
    torch.autograd.set_multithreading_enabled(False)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for name, (suite, shape) in CASES.items():
        for impl in ("fused", "eager"):
            step = step_fn(suite, shape, impl)
            per_step, kinds, names = unreachable(step)
            times = []
            for collector in (True, False, True, False):
                (gc.enable if collector else gc.disable)()
                times.append(host_us(step))
            gc.enable()
            print(f"{name} {shape} {impl}: {per_step:.1f} unreachable objects a step {dict(kinds.most_common(8))}; "
                  f"host us/step gc on {times[0]:.0f} / {times[2]:.0f}, off {times[1]:.0f} / {times[3]:.0f}", flush=True)
            for line, count in names.most_common(12):
                print(f"    {count:4d} {line}")


if __name__ == "__main__":
    main()
