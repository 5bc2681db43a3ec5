"""Host us per call of SwiGLU's dx: the dgrad kernel path against cuBLAS mm + addmm (calls queued behind
torch.cuda._sleep so no launch waits for the GPU), 7 interleaved rounds of 200 calls, medians."""
import json, os, statistics, time
import torch
import fusedmlp.ops.swiglu as ops

real = ops.pingpong_eligible
res = {}
for tokens, d, hidden in ((16384, 512, 1792), (16384, 4096, 14336)):
    dh = torch.randn(tokens, 2 * hidden, device="cuda", dtype=torch.bfloat16)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty(tokens, d, device="cuda", dtype=torch.bfloat16)
    def kernel():  # as the backward calls it: the halves sliced from dh each time
        ops._input_grad(dh[:, :hidden], dh[:, hidden:], w_up, w_gate, out, False)

    def cublas():
        torch.mm(dh[:, :hidden], w_up, out=out)
        out.addmm_(dh[:, hidden:], w_gate)

    calls = {"kernel": kernel, "cublas": cublas}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    times = {k: [] for k in calls}
    n = 20 if hidden > 2000 else 200
    for r in range(7):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            torch.cuda._sleep(int(2e9))  # keep the GPU busy so launches never wait
            t0 = time.perf_counter()
            for _ in range(n):
                calls[name]()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
    res[f"{tokens}x{d}x{hidden}"] = {k: dict(median_us=statistics.median(v), rounds_us=v) for k, v in times.items()}
    print(tokens, d, hidden, {k: round(statistics.median(v), 1) for k, v in times.items()}, flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "dx_host.json"), "w"), indent=1)
