"""Where the host time of a plain training step goes: cProfile and torch.profiler over fused steps.

    PYTHONPATH=src python3 benchmarks/step_host_profile.py [STEPS]

STEPS: comma-separated names (default every one): ``mlp_top`` and ``mlp_bottom`` (DLRM's top
367-512-256-1 and bottom 13-512-256-64-16 MLPs at 65536 rows, the mlp suite's inputs),
``geglu`` (GEGLU recompute at d = 1024, N = 8192, the glu suite's inputs), ``swiglu`` (SwiGLU,
h kept, 256 tokens x 512 -> 1792, the swiglu suite's inputs) and ``swiglu_eager`` (the suite's
eager SwiGLU on the same inputs, for its autograd engine's share). Each step is
fwd + bwd (``torch.autograd.grad`` with the suite's upstream gradient), bf16. Per step: the
wall time per step from an idle GPU (synchronise first) and back to back (no synchronise),
then 20 steps under cProfile (the 25 functions with the most cumulative time, and the 25 with
the most own time, printed), then 20 under torch.profiler with CPU and CUDA activities (the 25
ops with the most CPU time, printed, and the GPU's busy time per step). Writes step_host_profile.json to $OUT (or .).
"""
import cProfile
import io
import pstats
import sys

import torch

import fusedmlp
import fusedmlp.ops.glu as glu
from fusedmlp.bench.harness import host_us_from_idle, host_us_per_call, write_record
from fusedmlp.bench.suites.glu import _make_inputs as glu_inputs
from fusedmlp.bench.suites.mlp import _make_inputs as mlp_inputs
from fusedmlp.bench.suites.swiglu import _forward_fn as swiglu_forward
from fusedmlp.bench.suites.swiglu import _make_inputs as swiglu_inputs

MLPS = {"mlp_top": ((367, 512, 256, 1), "sigmoid"), "mlp_bottom": ((13, 512, 256, 64, 16), "relu")}


def make_step(name):
    if name in MLPS:
        sizes, last = MLPS[name]
        inputs, g = mlp_inputs((65536, *sizes), torch.bfloat16)
        x, ws, bs = inputs[0], list(inputs[1::2]), list(inputs[2::2])
        return lambda: torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", last), inputs, g)
    if name.startswith("swiglu"):
        inputs, g = swiglu_inputs((256, 512, 1792), torch.bfloat16)
        forward = swiglu_forward("eager" if name == "swiglu_eager" else "fused")
        return lambda: torch.autograd.grad(forward(*inputs), inputs, g)
    inputs, g = glu_inputs((1024, 8192), torch.bfloat16)
    return lambda: torch.autograd.grad(glu.geglu(*inputs, recompute=True), inputs, g)




def main():
    names = (sys.argv[1] if len(sys.argv) > 1 else "mlp_top,mlp_bottom,geglu,swiglu,swiglu_eager").split(",")
    record = {}
    for name in names:
        step = make_step(name)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        idle, back_to_back = host_us_from_idle(step), host_us_per_call(step, calls=50)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        own = io.StringIO()
        pstats.Stats(profiler, stream=own).sort_stats("tottime").print_stats(25)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                step()
            torch.cuda.synchronize()
        averages = prof.key_averages()
        table = averages.table(sort_by="cpu_time_total", row_limit=25)
        gpu_us = sum(e.self_device_time_total for e in averages) / 20
        print(f"== {name}: {idle:.1f} us per step from an idle GPU, {back_to_back:.1f} back to back, "
              f"GPU busy {gpu_us:.1f} us per step")
        print(text.getvalue()[-6000:])
        print(own.getvalue()[-6000:])
        print(table)
        record[name] = {"from_idle_us": idle, "back_to_back_us": back_to_back, "gpu_busy_us": gpu_us,
                        "cprofile": text.getvalue(),
                        "cprofile_own": own.getvalue(), "profiler": table}
    write_record("step_host_profile", steps=record)


if __name__ == "__main__":
    main()
