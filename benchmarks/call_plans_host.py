"""Call plans on against off in one process: a fused op's plain training step at small shapes.

    PYTHONPATH=src python3 benchmarks/call_plans_host.py --suite SUITE --impl IMPL --small SHAPE
        --large SHAPE [--rounds 5] [--tag TAG]

    e.g. --suite swiglu --impl fused --small 256x512x1792 --large 16384x512x1792

The bench suite's plain fwd+bwd step (``torch.autograd.grad(forward(*inputs), wrt, g)``, bf16, the
backward on autograd's device thread) of SUITE's fused impl IMPL with its call plans replayed
(``plans``: ops/_common.py ``CALL_PLANS = True``, the library's default) and without (``usual``),
and the suite's ``compile`` and ``eager`` impls, in interleaved rounds (every other round in
reverse order), each timed three ways:

    host_us   host microseconds per step at the SMALL shape (back-to-back steps, no sync: the
              GPU work is shorter, so this is the host's pace; ``host_us_per_call``)
    plain_ms  the suite's plain figure at the LARGE shape (``median_ms``: do_bench, L2 flushed)
    idle_us   wall microseconds of one step at the LARGE shape started on an idle GPU, to the
              step's end (synchronised): the host's enqueue and the GPU's tail together

Shapes in the suite's fields (``fusedmlp bench SUITE --help``): geglu d x N, swiglu tokens x d x
hidden, linear_act tokens x in x out, lora tokens x d x r. A process's host pace differs from
another's by more than the plans save (benchmarks/NOTES.md, "Plain steps' host time"), so only
rows of one process are set against each other. The replays per step of every op's plans are
printed too. Writes call_plans_host_SUITE_IMPL[_TAG].json to $OUT (or /tmp).
"""
import argparse
import importlib
import statistics
import time

import torch

import fusedmlp.ops._common as common
from fusedmlp.bench.harness import host_us_per_call, median_ms, write_record
from fusedmlp.bench.suites import SUITES

FIELDS = ("host_us", "plain_ms", "idle_us")


def step_of(suite, impl, inputs, g):
    forward = suite._forward_fn(impl)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return lambda: torch.autograd.grad(forward(*inputs), wrt, g)


def idle_us(step, count=30):
    samples = []
    for _ in range(count):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def timed_rounds(steps: dict, switches: dict, rounds: int) -> list:
    """[{row: {host_us, plain_ms, idle_us}}] per round; ``steps``: row -> (small step, large
    step), ``switches``: row -> CALL_PLANS while it runs. Compiles and tunes first."""
    for name, (small_step, large_step) in steps.items():
        common.CALL_PLANS = switches[name]
        for _ in range(3):
            small_step(), large_step()
    torch.cuda.synchronize()
    names, out = list(steps), []
    for r in range(rounds):
        row = {}
        for name in (names if r % 2 == 0 else names[::-1]):
            common.CALL_PLANS = switches[name]
            small_step, large_step = steps[name]
            row[name] = {"host_us": host_us_per_call(small_step), "plain_ms": median_ms(large_step),
                         "idle_us": idle_us(large_step)}
        out.append(row)
        cells = [f"{name} {v['host_us']:.0f} us / {v['plain_ms']:.3f} ms / {v['idle_us']:.0f} us"
                 for name, v in row.items()]
        print(f"round {r}: " + "; ".join(cells), flush=True)
    common.CALL_PLANS = True
    return out


def summary(rounds: list, pairs) -> tuple:
    """(medians per row, medians of the rounds' ratios per pair)."""
    names = list(rounds[0])
    medians = {name: {f: statistics.median(row[name][f] for row in rounds) for f in FIELDS} for name in names}
    ratios = {f"{a}/{b}": {f: statistics.median(row[a][f] / row[b][f] for row in rounds) for f in FIELDS}
              for a, b in pairs}
    return medians, ratios


def replays_per_step(step, calls=20) -> dict:
    """{plans' owner: replays per step} of every op's call plans over ``calls`` steps."""
    owners = {id(plans): name.removeprefix("fusedmlp.ops.") for name, plans in common.call_plans_by_name().items()}
    before = {id(p): p.hits for p in common.CallPlans.instances}
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return {owners.get(id(p), "?"): (p.hits - before[id(p)]) / calls
            for p in common.CallPlans.instances if p.hits > before[id(p)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, choices=("geglu", "swiglu", "linear_act", "lora"))
    parser.add_argument("--impl", default="fused")
    parser.add_argument("--small", required=True)
    parser.add_argument("--large", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    suite = importlib.import_module(SUITES[args.suite])
    torch.manual_seed(0)
    shapes = [tuple(int(v) for v in text.split("x")) for text in (args.small, args.large)]
    small, large = (suite._make_inputs(shape, torch.bfloat16) for shape in shapes)
    rows = {"plans": (args.impl, True), "usual": (args.impl, False), "compile": ("compile", True),
            "eager": ("eager", True)}
    steps = {name: (step_of(suite, impl, *small), step_of(suite, impl, *large)) for name, (impl, _) in rows.items()}
    rounds = timed_rounds(steps, {name: on for name, (_, on) in rows.items()}, args.rounds)
    medians, ratios = summary(rounds, (("plans", "usual"), ("plans", "compile"), ("usual", "compile"),
                                       ("plans", "eager")))
    replays = {"small": replays_per_step(steps["plans"][0]), "large": replays_per_step(steps["plans"][1])}
    print(f"{args.suite} {args.impl}: host us at {args.small} / plain ms at {args.large} / idle us at {args.large}")
    for name, v in medians.items():
        print(f"  {name:14s} {v['host_us']:7.0f} {v['plain_ms']:8.3f} {v['idle_us']:7.0f}")
    for pair, v in ratios.items():  # the medians of the rounds' ratios
        print(f"  {pair:14s} " + " ".join(f"{v[f]:7.3f}" for f in FIELDS))
    print(f"  replays per step: {replays}")
    stem = f"call_plans_host_{args.suite}_{args.impl}" + (f"_{args.tag}" if args.tag else "")
    write_record("call_plans_host", stem,
                 suite=args.suite, impl=args.impl, small=args.small, large=args.large, rounds=rounds,
                 medians=medians, ratios=ratios, replays_per_step=replays, device=torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
