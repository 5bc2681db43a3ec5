"""GEGLU's recompute fwd+bwd with dh in one piece, in the library's chunks or in other chunks:
the GPU's time (plain and graphed), the peak, and the host's time per step with its parts.

    PYTHONPATH=src python3 benchmarks/geglu_chunk_host.py [SHAPES] [--rounds 3] [--plans one,r2]

SHAPES: d x N, comma-separated (default 1024x8192). Plans: ``one`` (dh in one piece), ``lib`` (the
library's ``_dh_chunks``: two chunks for a recompute dh of 64-256 MiB, by rows where the rows
number at least 8192, else by columns; above 256 MiB row chunks of at most 512 MiB where
4096-row chunks allow it), ``rK`` (K equal row chunks, whole 128-row blocks) and
``cK`` (K column chunks, whole 128-column multiples). (In the run of 2026-11-29 ``lib`` was a
rule tried then and not kept: a dh of 64-256 MiB in row chunks of at most 64 MiB.) Per round,
every plan in turn (every other round reversed): the bench's plain step (``measure``: do_bench,
L2 flushed), the step replayed from a CUDA graph, the peak MiB above the inputs, and the host's
microseconds per step timed from an idle GPU (synchronise, then the call's wall time: the GPU
work queued by the call does not hold the host back). Then one pass of 20 steps per plan with
the op layer's functions wrapped in timers (inclusive host microseconds per step).
Floor: three cuBLAS GEMMs of the shape. bf16; writes geglu_chunk_host.json to $OUT (or /tmp).
"""
import argparse
import time

import torch
import triton

import fusedmlp.ops.glu as glu
from fusedmlp.bench.harness import graph_steps, host_us_from_idle, measure, median_ms, wrap_in_timer, write_record
from fusedmlp.bench.suites.glu import _gemm_steps, _make_inputs

library_rule = glu._dh_chunks


def one_piece(m, out, row_bytes, columns_allowed):
    return False, [(0, m)]


def plan_of(name):
    if name in ("one", "lib"):
        return one_piece if name == "one" else library_rule
    count = int(name[1:])

    def row_chunks(m, out, row_bytes, columns_allowed):
        height = triton.cdiv(triton.cdiv(m, count), 128) * 128
        return False, [(start, min(start + height, m)) for start in range(0, m, height)]

    def column_chunks(m, out, row_bytes, columns_allowed):
        return True, glu.column_ranges(out, count)
    return {"r": row_chunks, "c": column_chunks}[name[0]]




def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes", nargs="?", default="1024x8192")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plans", default="one,r2")
    args = parser.parse_args()
    plans = {name: plan_of(name) for name in args.plans.split(",")}
    forward = lambda x, w, b: glu.geglu(x, w, b, recompute=True)  # noqa: E731
    rows, parts = [], {}
    for d, n in (tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")):
        inputs, g = _make_inputs((d, n), torch.bfloat16)
        floor_ms, _, _ = measure(None, "fwd+bwd", inputs, g, steps=_gemm_steps(inputs, g))
        x, w, b = inputs

        def step():
            return torch.autograd.grad(forward(x, w, b), inputs, g)

        graphs = {}
        for name, rule in plans.items():
            glu._dh_chunks = rule
            graphs[name] = graph_steps(forward, inputs, g)["fwd+bwd"]
        for repeat in range(args.rounds):
            for name in (list(plans) if repeat % 2 == 0 else list(plans)[::-1]):
                glu._dh_chunks = plans[name]
                ms, peak, _ = measure(forward, "fwd+bwd", inputs, g)
                graph_ms = median_ms(graphs[name])
                host = host_us_from_idle(step)
                chunks = len(plans[name](n, 4 * d, 2 * 4 * d * 2, True)[1])
                rows.append({"d": d, "N": n, "plan": name, "chunks": chunks, "round": repeat, "ms": ms,
                             "graph_ms": graph_ms, "peak_mib": peak, "host_us": host, "floor_ms": floor_ms})
                print(f"{d:5d} {n:6d} {name:3s} ({chunks} chunks) plain {ms:7.3f} ({ms / floor_ms:5.3f}x) "
                      f"graphed {graph_ms:7.3f} ({graph_ms / floor_ms:5.3f}x) {peak:6.0f} MiB host {host:7.1f} us",
                      flush=True)
        totals = {}
        wrapped = [(glu, name) for name in ("_backward", "glu_backward_dh_impl", "_launch_bwd_dh", "launch_pingpong",
                                            "glu_forward_impl")] + [(torch, "mm")]
        originals = [(owner, name, getattr(owner, name)) for owner, name in wrapped]
        for owner, name in wrapped:
            wrap_in_timer(owner, name, totals, f"{owner.__name__.split('.')[-1]}.{name}")
        try:
            for name, rule in plans.items():
                glu._dh_chunks = rule
                step()
                torch.cuda.synchronize()
                totals.clear()
                start = time.perf_counter()
                for _ in range(20):
                    step()
                    torch.cuda.synchronize()
                wall = (time.perf_counter() - start) / 20 * 1e6
                parts[f"{d}x{n} {name}"] = {"step_with_sync_us": wall, **{k: v / 20 / 1e3 for k, v in totals.items()}}
                print(f"  {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in parts[f"{d}x{n} {name}"].items()))
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)
        glu._dh_chunks = library_rule
        graphs.clear()
        torch.cuda.empty_cache()
    write_record("geglu_chunk_host", rows=rows, timed_parts=parts)


if __name__ == "__main__":
    main()
