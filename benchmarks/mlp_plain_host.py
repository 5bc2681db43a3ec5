"""Plain (ungraphed) calls of the fused MLP at small batches: the host's time, with the cached
launches' two switches of kernels/launch.py turned on and off in one process.

    PYTHONPATH=src python3 benchmarks/mlp_plain_host.py [--rounds 3] [--batches 2048,8192]

Variants (launch.py's module switch, set before each round's rows):
  cache          FINISHED_CALLS = False: every launch through the compiled-launch cache
  finished       FINISHED_CALLS = True: the whole-MLP op's launches named by memo keys, a
                 repeated call being the finished call (a pointer kernel's through Triton's
                 C launcher, its tensors as addresses)
(Two earlier runs of this script had a third variant, built on every hit of a pointer kernel:
the C launcher with tensors as addresses but nothing filed, against compiled.run; see
benchmarks/NOTES.md.)
Rows per DLRM MLP (bf16): the fused training forward, the fused forward under no_grad and the
fused fwd+bwd step, and eager's forward and step (untouched by the switches: the host's noise
between rounds). Each row is timed two ways: host microseconds per call (back-to-back calls,
``host_us_per_call``) and the bench's plain figure (``median_ms``: do_bench, L2 flushed before
each call). Rounds interleave the variants, every other round in reverse order. Then one
pass of the fused training forward and step with the op layer's functions wrapped in timers
(inclusive microseconds per call; the wrapping costs time of its own). Writes
mlp_plain_host.json to $OUT (or /tmp).
"""
import argparse
import json
import os
import statistics
import time

import torch

import fusedmlp
import fusedmlp.kernels.launch as launch_mod
import fusedmlp.ops.mlp as M
from fusedmlp.bench.harness import host_us_per_call, median_ms, wrap_in_timer
from fusedmlp.bench.suites.mlp import _eager_fn, _make_inputs

VARIANTS = {"cache": False, "finished": True}
MLPS = {"bottom": ((13, 512, 256, 64, 16), "relu"), "top": ((367, 512, 256, 1), "sigmoid")}  # sizes, last act


def rows_of(inputs, g, last):
    x, ws, bs = inputs[0], list(inputs[1::2]), list(inputs[2::2])
    eager = _eager_fn(last)

    def no_grad():
        with torch.no_grad():
            return fusedmlp.mlp(x, ws, bs, "relu", last)

    return {
        "fused fwd": lambda: fusedmlp.mlp(x, ws, bs, "relu", last),
        "fused fwd no_grad": no_grad,
        "fused fwd+bwd": lambda: torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", last), inputs, g),
        "eager fwd": lambda: eager(*inputs),
        "eager fwd+bwd": lambda: torch.autograd.grad(eager(*inputs), inputs, g),
    }


def set_variant(name):
    launch_mod.FINISHED_CALLS = VARIANTS[name]


ACC = {}  # label -> nanoseconds inside the wrapped function since the last clear


def instrumented(rows, calls=200):
    for name in ("check_mlp_inputs", "autocast_dtype", "grad_needed", "gemms_on_cublas", "use_triton",
                 "mlp_forward_impl", "_launch_forward", "_aligned_first_layer", "_launch_stack",
                 "mlp_backward_impl", "_launch_backward", "_split_grads", "launch", "_wgrad_geometry"):
        wrap_in_timer(M, name, ACC)
    wrap_in_timer(M._MLPFunction, "forward", ACC, "Function.forward")
    wrap_in_timer(M._fwd_launcher, "launch", ACC, "fwd Launcher.launch")
    wrap_in_timer(M._dgrad_launcher, "launch", ACC, "dgrad Launcher.launch")
    out = {}
    for name in ("fused fwd", "fused fwd+bwd"):
        fn = rows[name]
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            ACC.clear()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            total = (time.perf_counter() - start) / calls * 1e6
            samples.append((total, {k: round(v / calls / 1e3, 1) for k, v in ACC.items()}))
            torch.cuda.synchronize()
        samples.sort(key=lambda s: s[0])
        out[name] = {"us": round(samples[2][0], 1), "parts": samples[2][1]}
        print(f"  instrumented {name}: {out[name]['us']} us;",
              ", ".join(f"{k} {v}" for k, v in sorted(out[name]["parts"].items(), key=lambda kv: -kv[1])))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="2048")
    args = parser.parse_args()
    dtype = torch.bfloat16
    record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "cases": {}}
    cases = {}
    for batch in map(int, args.batches.split(",")):
        for mlp_name, (sizes, last) in MLPS.items():
            inputs, g = _make_inputs((batch, *sizes), dtype)
            cases[f"{mlp_name} {batch}"] = (inputs, g, last)
    for case, (inputs, g, last) in cases.items():
        rows = rows_of(inputs, g, last)
        # every variant's launches once (compiles, tunes, files the finished calls)
        for variant in VARIANTS:
            set_variant(variant)
            for fn in rows.values():
                fn(), fn()
        torch.cuda.synchronize()
        # the variants' outputs agree (the same kernels, launched three ways)
        results = {}
        for variant in VARIANTS:
            set_variant(variant)
            results[variant] = [rows["fused fwd"]().detach().clone(), *rows["fused fwd+bwd"]()]
        for variant in VARIANTS:
            assert all(torch.equal(a, b) for a, b in zip(results[variant], results["cache"])), variant
        table = {variant: {row: {"host_us": [], "plain_us": []} for row in rows} for variant in VARIANTS}
        order = list(VARIANTS)
        for round_ in range(args.rounds):
            for variant in order if round_ % 2 == 0 else order[::-1]:
                set_variant(variant)
                for row, fn in rows.items():
                    table[variant][row]["host_us"].append(round(host_us_per_call(fn), 1))
                    table[variant][row]["plain_us"].append(round(median_ms(fn) * 1e3, 1))
        print(f"\n{case} (bf16): host us per call / do_bench plain us, median of {args.rounds} rounds")
        print(f"  {'row':20s}" + "".join(f"{v:>24s}" for v in VARIANTS))
        for row in rows:
            medians = [(statistics.median(table[v][row]["host_us"]), statistics.median(table[v][row]["plain_us"]))
                       for v in VARIANTS]
            cells = [f"{host:10.1f} / {plain:8.1f}" for host, plain in medians]
            print(f"  {row:20s}" + "".join(f"{c:>24s}" for c in cells))
        record["cases"][case] = table
    set_variant("finished")
    print(f"\nop layer timers ({next(iter(cases))}, variant finished)")
    record["instrumented"] = instrumented(rows_of(*cases[next(iter(cases))]))
    out = os.environ.get("OUT", "/tmp")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "mlp_plain_host.json"), "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
