"""Record of the run (2026-11-29, H200): copied into a tree of commit a33d206 (the last with both
recompute routes and the probe's ``recompute_steps``), as ``prof.py`` beside its ``benchmarks/``, and run
``PYTHONPATH=src python3 prof.py 16384x512x1792 16384x1024x2816 256x1024x2816`` there; the profiler
tables are this folder's table_*.txt.

Where the recompute step's plain call spends its time: new route (cuBLAS h) vs old (Triton G_GEMM)."""
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "benchmarks"))
import torch  # noqa: E402

import fusedmlp.ops.glu as glu  # noqa: E402
from glu_dh_activation_probe import recompute_steps  # noqa: E402

OUT = os.environ.get("OUT", ".")


def timed_wrap(mod, name, log):
    fn = getattr(mod, name)

    def wrapped(*a, **k):
        t0 = time.perf_counter()
        r = fn(*a, **k)
        log.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)
        return r
    setattr(mod, name, wrapped)
    return fn


def main():
    for shape in sys.argv[1:]:
        m, d, hidden = (int(v) for v in shape.split("x"))
        steps = recompute_steps(m, d, hidden, "silu")
        for name, step in steps.items():
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            # (a) enqueue time of one step from an idle GPU, and its wall time to completion
            enq, wall = [], []
            for _ in range(30):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                enq.append((t1 - t0) * 1e6)
                wall.append((t2 - t0) * 1e6)
            # (b) host time inside pieces of the backward
            log = {}
            originals = {n: timed_wrap(glu, n, log) for n in ("_launch_bwd_dh", "_cublas_h")}
            for _ in range(30):
                torch.cuda.synchronize()
                step()
            torch.cuda.synchronize()
            for n, f in originals.items():
                setattr(glu, n, f)
            pieces = {n: round(statistics.median(v), 1) for n, v in log.items()}
            # (c) syncs PyTorch knows of
            torch.cuda.set_sync_debug_mode(1)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                step()
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
            syncs = sorted({str(w.message)[:160] for w in caught})
            print(f"{shape} {name}: enqueue {statistics.median(enq):.1f} us, wall {statistics.median(wall):.1f} us,"
                  f" pieces {pieces}, syncs {syncs}", flush=True)
            # (d) profiler: CUDA runtime calls and their host time
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
            tag = f"{shape}_{name.split(':')[1].strip().replace(' ', '_')}"
            prof.export_chrome_trace(os.path.join(OUT, f"trace_{tag}.json"))
            table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=40)
            with open(os.path.join(OUT, f"table_{tag}.txt"), "w") as f:
                f.write(table)
            runtime = [e for e in prof.key_averages() if e.key.startswith("cuda") or e.key.startswith("cu")]
            print("   runtime calls:", {e.key: (e.count, round(e.cpu_time_total / 3, 1)) for e in runtime}, flush=True)


if __name__ == "__main__":
    main()
