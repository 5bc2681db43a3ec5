"""A/B: GEGLU backward's dW GEMM beside the dx GEMM (second stream) or in order.
fwd+bwd as the bench times it (torch.autograd.grad, do_bench median, L2 flushed), and in a CUDA graph.
Rounds interleave off/on. Prints one line per (shape, mode, setting, round)."""
import json, os, sys
import torch, triton
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
import fusedmlp
from fusedmlp.ops import _common
from fusedmlp.bench.harness import median_ms, peak_mib_above_current
from fusedmlp._cuda_graph import capture_cuda_graph

shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else
          "1024x8192,2048x16384,4096x8192,1024x32768,4096x16384,1024x65536").split(",")]
rounds = int(os.environ.get("ROUNDS", "3"))
rows = []


def graph_us(replay, reps=40):
    for _ in range(5):
        replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e3

torch.manual_seed(0)
for d, n in shapes:
    x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(8 * d, d, device="cuda", dtype=torch.bfloat16) / d ** 0.5).requires_grad_()
    b = torch.randn(8 * d, device="cuda", dtype=torch.bfloat16).requires_grad_()
    g = torch.randn(n, 4 * d, device="cuda", dtype=torch.bfloat16)
    dh = torch.randn(n, 8 * d, device="cuda", dtype=torch.bfloat16)
    floor = median_ms(lambda: (x @ w.t(), dh @ w, dh.t() @ x))
    gemm1 = median_ms(lambda: x @ w.t())
    for recompute in (True, False):
        fn = lambda: torch.autograd.grad(fusedmlp.geglu(x, w, b, recompute=recompute), (x, w, b), g)
        ref = None
        for r in range(rounds):
            for beside in (False, True):
                _common.BWD_WGRAD_BESIDE = beside
                out = fn()
                if ref is None:
                    ref = out
                same = all(torch.equal(a, c) for a, c in zip(out, ref))
                ms = median_ms(fn)
                peak = peak_mib_above_current(fn) if r == 0 else None
                gus = graph_us(capture_cuda_graph(fn)[0].replay) if r == 0 else None
                row = dict(d=d, n=n, recompute=recompute, beside=beside, round=r, ms=ms, graph_us=gus,
                           peak_mib=peak, same_bits=same, gemm_ms=gemm1, floor_ms=floor)
                rows.append(row)
                print(f"d={d} n={n} rec={int(recompute)} beside={int(beside)} r={r} ms={ms:.4f} "
                      f"ratio={ms / floor:.3f} graph_us={gus} peak={peak} same={same}", flush=True)
        _common.BWD_WGRAD_BESIDE = True
    del x, w, b, g, dh
    torch.cuda.empty_cache()
out = os.environ.get("OUT", ".")
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows),
          open(os.path.join(out, "wgrad_beside.json"), "w"), indent=1)
