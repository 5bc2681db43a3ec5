"""dx = dh @ W ([M, K] x [K, N], N short, K long): cuBLAS against the library's linear ping-pong
kernel (identity, no bias) on W.T made contiguous, rounds interleaved, medians."""
import json
import os
import statistics

import torch
from triton.testing import do_bench

from fusedmlp.ops import _common
from fusedmlp.ops import linear_act as la

dev = torch.device("cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(8192, 8192, 1024), (32768, 8192, 1024), (65536, 8192, 1024), (16384, 16384, 2048),
          (8192, 32768, 4096), (16384, 28672, 4096), (16384, 3584, 512)]
ROUNDS = 5


def ours(a, wt, y, form):
    m, k = a.shape
    common = dict(M=m, N=wt.shape[0], K=k, M_KEY=_common.autotune_m_key(m), ACT="identity", HAS_BIAS=False,
                  STORE_PRE=False)
    la._launch_fwd_pingpong(a, wt, y, y, y, common, form)


res = {"device": torch.cuda.get_device_name(), "rounds": ROUNDS, "shapes": []}
for m, k, n in SHAPES:
    torch.manual_seed(0)
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(k, n, device=dev) / k ** 0.5).to(torch.bfloat16)
    wt = w.t().contiguous()
    y = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    ref = a.double() @ w.double()
    variants = {"cublas": lambda: torch.mm(a, w, out=y), "copy_wt": lambda: wt.copy_(w.t())}
    for form in ("alternating", "cooperative", "wide"):
        variants[form] = (lambda f: lambda: ours(a, wt, y, f))(form)
    errs = {}
    for name, fn in variants.items():
        if name == "copy_wt":
            continue
        y.zero_()
        fn()
        torch.cuda.synchronize()
        errs[name] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            times[name].append(do_bench(fn, warmup=10, rep=60))
    med = {name: statistics.median(v) for name, v in times.items()}
    row = dict(m=m, k=k, n=n, median_ms=med, rounds_ms=times, max_rel_err=errs)
    res["shapes"].append(row)
    best = min(("alternating", "cooperative", "wide"), key=med.get)
    print(f"{m}x{k}->{n}: cublas {med['cublas']:.4f}  ours {best} {med[best]:.4f} "
          f"(+copy {med['copy_wt']:.4f})  ratio {med[best] / med['cublas']:.3f} "
          f"[{', '.join(f'{f} {med[f]:.4f}' for f in ('alternating', 'cooperative', 'wide'))}] err {errs}",
          flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "dx_forms.json"), "w") as f:
    json.dump(res, f, indent=1)
