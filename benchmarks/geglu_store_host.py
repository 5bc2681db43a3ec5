"""GEGLU's store-mode step in plain calls at small shapes: the host's time, against compile's and eager's.

    PYTHONPATH=src python3 benchmarks/geglu_store_host.py [--d 1024] [--small 256] [--large 4096]
        [--rounds 5] [--parts] [--profile] [--tag TAG]

The bench suite's plain fwd+bwd step (``torch.autograd.grad(forward(x, W, b), (x, W, b), g)``,
bf16, the backward on autograd's device thread) for the suite's ``fused_store`` impl with its call
plans replayed (``plans``: ops/_common.py ``CALL_PLANS = True``, the library's default) and
without (``usual``), and the ``compile`` and ``eager`` impls, in interleaved rounds (every other
round in reverse order), each timed three ways:

    host_us   host microseconds per step at SMALL tokens (back-to-back steps, no sync: the GPU
              work is shorter, so this is the host's pace; ``host_us_per_call``)
    plain_ms  the suite's plain figure at LARGE tokens (``median_ms``: do_bench, L2 flushed)
    idle_us   wall microseconds of one step at LARGE tokens started on an idle GPU, to the
              step's end (synchronised): the host's enqueue and the GPU's tail together

``--parts``: one pass of the fused step (plans on) at SMALL tokens with the op layer's functions (ops/glu.py)
wrapped in timers, inclusive microseconds per step (the wrapping costs time of its own).
``--profile``: the fused step (plans on) at SMALL tokens under cProfile, the 30 functions of most own time.
Writes geglu_store_host[_TAG].json to $OUT (or /tmp).
"""
import argparse
import cProfile
import io
import pstats
import time

import torch

import fusedmlp.ops.glu as G
from call_plans_host import FIELDS as fields, step_of as suite_step_of, summary, timed_rounds
from fusedmlp.bench.harness import wrap_in_timer, write_record
from fusedmlp.bench.suites import glu

# row -> (the suite's impl, CALL_PLANS while it runs)
ROWS = {"plans": ("fused_store", True), "usual": ("fused_store", False), "compile": ("compile", True),
        "eager": ("eager", True)}
PARTS = ("geglu", "_validate", "contiguous_bias", "grad_needed", "_geglu_forward_impl", "_launch_fwd",
         "tma_eligible", "launch_pingpong", "_backward", "reuse_saved_once", "_dh_chunks", "glu_backward_dh_impl",
         "_launch_bwd_dh", "_db_of")


def step_of(impl, inputs, g):
    return suite_step_of(glu, impl, inputs, g)


def parts_pass(step, calls=200):
    totals = {}
    for name in PARTS:
        wrap_in_timer(G, name, totals)
    wrap_in_timer(G.glu_forward_form, "run", totals, "glu_forward_form.run")
    for launcher in G._stream_launchers.values():
        wrap_in_timer(launcher, "launch", totals, "stream launch")
    wrap_in_timer(G._GEGLUFunction, "forward", totals, "Function.forward")
    wrap_in_timer(G._GEGLUFunction, "backward", totals, "Function.backward")
    step()
    torch.cuda.synchronize()
    totals.clear()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    wall = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return wall, {k: v / calls / 1e3 for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def profile_table(step, calls=200, top=30):
    step()
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--small", type=int, default=256)
    parser.add_argument("--large", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parts", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    small = glu._make_inputs((args.d, args.small), torch.bfloat16)
    large = glu._make_inputs((args.d, args.large), torch.bfloat16)
    steps = {name: (step_of(impl, *small), step_of(impl, *large)) for name, (impl, _) in ROWS.items()}
    rounds = timed_rounds(steps, {name: on for name, (_, on) in ROWS.items()}, args.rounds)
    medians, ratios = summary(rounds, (("plans", "usual"), ("plans", "compile"), ("usual", "compile")))
    record = {"d": args.d, "small": args.small, "large": args.large, "rounds": rounds, "medians": medians,
              "ratios": ratios, "device": torch.cuda.get_device_name()}
    if args.parts:
        wall, parts = parts_pass(steps["plans"][0])
        record["parts"] = {"wall_us": wall, "inclusive_us": parts}
        print(f"parts (fused step at {args.small} tokens, wrapped: {wall:.0f} us per step):")
        for name, us in parts.items():
            print(f"  {name:28s} {us:7.1f}")
    if args.profile:
        record["profile"] = profile_table(steps["plans"][0])
        print(record["profile"])
    print(f"d = {args.d}: host us at {args.small} tokens / plain ms at {args.large} / idle us at {args.large}")
    for name, v in medians.items():
        print(f"  {name:14s} {v['host_us']:7.0f} {v['plain_ms']:8.3f} {v['idle_us']:7.0f}")
    for pair, v in ratios.items():  # the medians of the rounds' ratios
        print(f"  {pair:14s} " + " ".join(f"{v[f]:7.3f}" for f in fields))
    write_record("geglu_store_host", "geglu_store_host" + (f"_{args.tag}" if args.tag else ""), **record)


if __name__ == "__main__":
    main()
