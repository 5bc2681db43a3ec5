"""Plain (ungraphed) top-MLP fwd+bwd at 65536 rows: where the host time goes."""
import time, torch
from torch.profiler import profile, ProfilerActivity
import fusedmlp
from fusedmlp.bench.suites.mlp import _forward_fn, _make_inputs
from fusedmlp.bench.harness import median_ms
for sizes in ((367, 512, 256, 1), (13, 512, 256, 64, 16)):
    shape = (65536, *sizes)
    inputs, g = _make_inputs(shape, torch.bfloat16)
    fwd = _forward_fn(shape)("fused")
    wrt = [t for t in inputs if t.requires_grad]
    step = lambda: torch.autograd.grad(fwd(*inputs), wrt, g)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    print(sizes, "do_bench ms", median_ms(step), flush=True)
    t = time.perf_counter()
    for _ in range(20):
        step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(sizes, "host us per step (no sync)", (t1 - t) / 20 * 1e6, "with sync", (time.perf_counter() - t) / 20 * 1e6, flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
