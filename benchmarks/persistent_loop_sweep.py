"""Sweep of the persistent (TMA) kernels' loop options on one Hopper GPU, bf16: FLATTEN (one
software-pipelined loop over tiles x K steps) off and on for the first tiles of each table, and
tiles that fit two programs per SM (PROGRAMS_PER_SM = 2), against the cuBLAS GEMM of the shape.

    python benchmarks/persistent_loop_sweep.py [glu] [lin] [bwd] [lora]   (writes $OUT/flat.json)

Cases: the GEGLU forward (d -> 8d; d=1024 at 4096 and 32768 rows, 2048 x 16384, 4096 x 8192,
and the store mode), the linear_act forward (512 -> 1792 and 4096 -> 14336 at 16384 rows,
gelu_tanh, with and without the pre-activation), the GEGLU recompute backward (dh kernel) and
the LoRA forward (4096, r=16). Each config runs through ``Launcher.forcing`` (the op's own
launch), is checked against an fp32 reference (max error over max |reference|) and timed
(triton.testing.do_bench). Prints every config and the best per case. The choices in
kernels/configs.py (FLATTEN on for the linear forward only; one two-program tile there) come
from it; benchmarks/results/persistent_loop_sweep_H200_2026-11-21_{flatten,programs_per_sm}.json
are its two halves as first run (table tiles off/on; then the two-program tiles).
"""
import json, os, sys
import torch, triton
from triton.testing import do_bench
from fusedmlp.ops import glu, linear_act as la, lora
from fusedmlp.ops.activations import activation_reference

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
rows = []


def err(out, ref):
    return ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def variants(launcher, extra, ntiles, flats=(False,)):
    """The table's first ntiles configs (flatten off/on as given), then the extra (meta, warps, stages)."""
    out = []
    for cfg in launcher.configs[:ntiles]:
        for flat in flats:
            out.append((dict(cfg.kwargs, FLATTEN=flat), cfg.num_warps, cfg.num_stages))
    for meta, w, st in extra:
        out.append((dict({"GROUP_M": 8, "FLATTEN": False, "PROGRAMS_PER_SM": 2}, **meta), w, st))
    return out


def sweep(name, launcher, run, ref, floor_fn, configs):
    floor = do_bench(floor_fn, warmup=10, rep=100)
    hook = launcher.configs[0].pre_hook
    for meta, warps, stages in configs:
        c = triton.Config(meta, num_warps=warps, num_stages=stages, pre_hook=hook)
        tag = "x".join(str(meta[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in meta)
        tag += f" w{warps} s{stages} p{meta['PROGRAMS_PER_SM']}"
        flat = meta["FLATTEN"]
        try:
            with launcher.forcing(c):
                e = err(run(), ref)
                t = do_bench(run, warmup=10, rep=100)
        except Exception as exc:  # noqa: BLE001
            print(f"{name:28s} {tag:22s} flat={flat:d} FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            rows.append(dict(case=name, tile=tag, flatten=flat, error=None, ms=None, floor_ms=floor))
            continue
        rows.append(dict(case=name, tile=tag, flatten=flat, error=e, ms=t, floor_ms=floor))
        print(f"{name:28s} {tag:22s} flat={flat:d} err {e:.2e}  {t:.4f} ms  floor {floor:.4f}  {t / floor:.3f}x",
              flush=True)


GLU_EXTRA = [
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, 4, 2),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, 4, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, 4, 2),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, 8, 3),
    ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, 4, 4),
]
LIN_EXTRA = [
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, 4, 2),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, 8, 2),
    ({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64}, 4, 2),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, 4, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "FLATTEN": True}, 8, 2),
    ({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "FLATTEN": True}, 4, 2),
]
BWD_EXTRA = [
    ({"BLOCK_N": 64, "BLOCK_K": 64}, 4, 2),
    ({"BLOCK_N": 64, "BLOCK_K": 64}, 8, 2),
    ({"BLOCK_N": 64, "BLOCK_K": 32}, 8, 3),
]


def glu_fwd(d, n, store):
    x = torch.randn(n, d, device=dev, dtype=dt)
    w = torch.randn(8 * d, d, device=dev, dtype=dt) / d ** 0.5
    b = torch.randn(8 * d, device=dev, dtype=dt) * 0.1
    w1, w2 = w[: 4 * d], w[4 * d:]
    b1, b2 = b[: 4 * d], b[4 * d:]
    h = x.float() @ w.float().T + b.float()
    ref = h[:, : 4 * d] * activation_reference(h[:, 4 * d:], "gelu_tanh")
    run = lambda: glu._launch_fwd(x, w1, w2, b1, b2, "gelu_tanh", store)[0]  # noqa: E731
    sweep(f"geglu fwd {d}x{n}{' store' if store else ''}", glu._fwd_tma_launcher, run, ref, lambda: x @ w.T,
          variants(glu._fwd_tma_launcher, GLU_EXTRA, 3, (False, True)))


def glu_bwd(d, n):
    x = torch.randn(n, d, device=dev, dtype=dt)
    w = torch.randn(8 * d, d, device=dev, dtype=dt) / d ** 0.5
    g = torch.randn(n, 4 * d, device=dev, dtype=dt)
    w1, w2 = w[: 4 * d], w[4 * d:]
    h = x.float() @ w.float().T
    x1, x2 = h[:, : 4 * d], h[:, 4 * d:]
    x2r = x2.clone().requires_grad_()
    act = activation_reference(x2r, "gelu_tanh")
    (dact,) = torch.autograd.grad(act, x2r, torch.ones_like(act))
    ref = torch.cat([g.float() * act.detach(), g.float() * x1 * dact], dim=1)
    run = lambda: glu._launch_bwd_dh(g, x, w1, w2, None, None, None, "gelu_tanh", None, False)[0]  # noqa: E731
    sweep(f"geglu bwd-dh recompute {d}x{n}", glu._bwd_tma_launcher, run, ref, lambda: x @ w.T,
          variants(glu._bwd_tma_launcher, BWD_EXTRA, 2, (False, True)))


def lin_fwd(k, n, m, store):
    x = torch.randn(m, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
    b = torch.randn(n, device=dev, dtype=dt) * 0.1
    ref = activation_reference(x.float() @ w.float().T + b.float(), "gelu_tanh")
    run = lambda: la._launch_fwd(x, w, b, "gelu_tanh", store)[0]  # noqa: E731
    sweep(f"linear_act fwd {k}->{n} x{m}{' pre' if store else ''}", la._fwd_tma_launcher, run, ref, lambda: x @ w.T,
          variants(la._fwd_tma_launcher, LIN_EXTRA, 3, (False, True)))


def lora_fwd(d, r, m):
    x = torch.randn(m, d, device=dev, dtype=dt)
    w = torch.randn(d, d, device=dev, dtype=dt) / d ** 0.5
    a = torch.randn(r, d, device=dev, dtype=dt) / d ** 0.5
    bb = torch.randn(d, r, device=dev, dtype=dt) / r ** 0.5
    ref = x.float() @ w.float().T + 2.0 * (x.float() @ a.float().T) @ bb.float().T
    run = lambda: lora._launch_fwd(x, w, None, a, bb, None, 2.0, "identity", False)[0]  # noqa: E731
    sweep(f"lora fwd {d} r{r} x{m}", lora._fwd_tma_launcher, run, ref, lambda: x @ w.T,
          variants(lora._fwd_tma_launcher, LIN_EXTRA[:4], 2, (False, True)))


which = sys.argv[1:] or ["glu", "lin", "bwd", "lora"]
if "glu" in which:
    for d, n in [(1024, 4096), (1024, 32768), (2048, 16384), (4096, 8192)]:
        glu_fwd(d, n, False)
    glu_fwd(1024, 32768, True)
if "lin" in which:
    lin_fwd(512, 1792, 16384, True)
    lin_fwd(512, 1792, 16384, False)
    lin_fwd(4096, 14336, 16384, False)
if "bwd" in which:
    glu_bwd(1024, 32768)
if "lora" in which:
    lora_fwd(4096, 16, 16384)
out = os.environ.get("OUT", "/tmp")
with open(os.path.join(out, "flat.json"), "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows), f,
              indent=1)
print("\n== best per case: table configs (1 program/SM) vs 2 programs/SM (ms, x floor)")
for case in dict.fromkeys(r["case"] for r in rows):
    best = {}
    for pps in ("p1", "p2"):
        ok = [r for r in rows if r["case"] == case and r["tile"].endswith(pps) and r["ms"] is not None]
        best[pps] = min(ok, key=lambda r: r["ms"]) if ok else None
    fmt = lambda r: f"{r['ms']:.4f} {r['ms'] / r['floor_ms']:.3f}x ({r['tile']}{' flat' if r['flatten'] else ''})" if r else "-"  # noqa: E731
    print(f"{case:34s} p1 {fmt(best['p1']):44s} p2 {fmt(best['p2'])}")
