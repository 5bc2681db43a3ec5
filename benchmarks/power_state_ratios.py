"""Step ratios in two power states: a burst after the GPU idled, and under sustained load.

    python benchmarks/power_state_ratios.py            (writes $OUT/power_state_ratios.json)

Graphed fwd+bwd steps of `fusedmlp bench`'s suites, built from the suites' own inputs and
impls: LoRA 8192 x 4096 -> 4096 r 16 (fused with dB, dA beside the dgrad kernel and after
it, eager PEFT-style, the two-GEMM floor) and GEGLU d 1024 x 32768 rows (recompute, store,
eager, the three-GEMM floor). The floors are the suites' plain cuBLAS calls. Every call is
CUDA-event timed alone after a 256 MiB write that flushes the L2 cache, as do_bench does.
burst: the GPU idles 0.5 s, then 8 calls of one impl (median of the last 6); sustained:
0.5 s of back-to-back calls of that impl, then 30 timed calls (median). The SM clock
(NVML, when available) is read right after each timed block. 3 rounds, the impls' order
rotated each round; a row's figure is the median over the rounds.
"""
import json, os, statistics, time
import torch
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import environment, flushed_event_times_ms, graph_steps
from fusedmlp.bench.suites import glu, lora

flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")


def clock_mhz():
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no NVML
        return None


def timed_calls(fn, count):
    return [ms * 1e3 for ms in flushed_event_times_ms(fn, count, flush)]


def burst(fn):
    torch.cuda.synchronize()
    time.sleep(0.5)
    us = timed_calls(fn, 8)[2:]
    return statistics.median(us), clock_mhz()


def sustained(fn):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        for _ in range(5):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    us = timed_calls(fn, 30)
    return statistics.median(us), clock_mhz()


def lora_steps():
    inputs, g = lora._make_inputs((8192, 4096, 16), torch.bfloat16)
    steps = {}
    for name, threshold in (("fused (beside)", lora_ops.BESIDE_DGRAD_MIN_MACS), ("fused (after)", 1 << 62)):
        saved, lora_ops.BESIDE_DGRAD_MIN_MACS = lora_ops.BESIDE_DGRAD_MIN_MACS, threshold
        try:
            steps[name] = graph_steps(lora._forward_fn("fused"), inputs, g)["fwd+bwd"]
        finally:
            lora_ops.BESIDE_DGRAD_MIN_MACS = saved
    steps["eager"] = graph_steps(lora._forward_fn("eager"), inputs, g)["fwd+bwd"]
    steps["floor"] = lora._gemm_steps(inputs, g)["fwd+bwd"]
    return steps


def geglu_steps():
    inputs, g = glu._make_inputs((1024, 32768), torch.bfloat16)
    steps = {name: graph_steps(glu._forward_fn(impl), inputs, g)["fwd+bwd"]
             for name, impl in (("fused (recompute)", "fused"), ("fused (store)", "fused_store"), ("eager", "eager"))}
    steps["floor"] = glu._gemm_steps(inputs, g)["fwd+bwd"]
    return steps


results = {}
for case, make in (("lora 8192x4096 r16 fwd+bwd", lora_steps), ("geglu d1024 N32768 fwd+bwd", geglu_steps)):
    steps = make()
    for fn in steps.values():
        fn()
    names = list(steps)
    rows = {name: {"burst": [], "sustained": []} for name in names}
    for round_ in range(3):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for state, measure in (("burst", burst), ("sustained", sustained)):
            for name in order:
                rows[name][state].append(measure(steps[name]))
    table = {}
    for name in names:
        table[name] = {state: {"us": statistics.median(u for u, _ in v), "rounds_us": [round(u, 1) for u, _ in v],
                               "sm_mhz": [c for _, c in v]} for state, v in rows[name].items()}
    for state in ("burst", "sustained"):
        floor, eager = table["floor"][state]["us"], table["eager"][state]["us"]
        for name in names:
            entry = table[name][state]
            entry["vs_floor"] = entry["us"] / floor
            entry["eager_over_this"] = eager / entry["us"]
            print(f"{case:28s} {state:9s} {name:18s} {entry['us']:8.1f} us  x{entry['vs_floor']:.3f} floor  "
                  f"eager/this {entry['eager_over_this']:.3f}  MHz {entry['sm_mhz']}", flush=True)
    results[case] = table
    del steps
    torch.cuda.empty_cache()
env = environment()
env["command"] = "python benchmarks/power_state_ratios.py"
json.dump(dict(environment=env, results=results),
          open(os.path.join(os.environ.get("OUT", "."), "power_state_ratios.json"), "w"), indent=1)
