"""Record of the run (2026-11-29, H200, the tree of commit ff547d5, before the memo):
``PYTHONPATH=src python3 host_parts_probe.py 256x512x1792 store recompute`` and ``... 16384x512x1792 store``;
its output is host_parts_before_memo.txt.

Inclusive host time per step of the library's functions in a fused SwiGLU step (wall-clock
wrappers on every thread), and the cost of the ATen/Triton building blocks for scale."""
import collections
import functools
import sys
import time

import torch

import fusedmlp
import fusedmlp.kernels.launch as kl
from fusedmlp.bench.harness import host_us_per_call

TOTAL = collections.defaultdict(float)
COUNT = collections.defaultdict(int)


def wrap(fn, label):
    @functools.wraps(fn)
    def wrapped(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            TOTAL[label] += time.perf_counter() - t0
            COUNT[label] += 1
    return wrapped


def patch_everywhere(fn, label):
    w = wrap(fn, label)
    for name, mod in list(sys.modules.items()):
        if not name.startswith("fusedmlp") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if value is fn:
                setattr(mod, attr, w)


def main():
    m, d, hidden = (int(v) for v in sys.argv[1].split("x"))
    gen = torch.Generator(device="cuda").manual_seed(1)
    ls = tuple((torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=gen) / s[1]**0.5).requires_grad_()
               for s in ((m, d), (hidden, d), (hidden, d), (d, hidden)))
    gy = torch.randn(m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    x = ls[0].detach()
    w = ls[1].detach()
    print("torch.mm", round(host_us_per_call(lambda: torch.mm(x, w.t()), calls=200), 1))
    print("torch.empty", round(host_us_per_call(lambda: torch.empty((m, d), device="cuda"), calls=200), 1))
    print("x.new_empty", round(host_us_per_call(lambda: x.new_empty((m, d)), calls=200), 1))
    print("x[0:m]", round(host_us_per_call(lambda: x[0:m], calls=200), 1))
    print("data_ptr", round(host_us_per_call(lambda: x.data_ptr(), calls=200), 2))
    print("current_device", round(host_us_per_call(lambda: torch.cuda.current_device(), calls=200), 2))
    print("raw stream", round(host_us_per_call(lambda: torch._C._cuda_getCurrentRawStream(0), calls=200), 2))
    print("is_capturing", round(host_us_per_call(lambda: torch.cuda.is_current_stream_capturing(), calls=200), 2))
    xg, wg, wu, wd = ls
    eager = lambda: torch.autograd.grad(  # noqa: E731
        (torch.nn.functional.silu(xg @ wg.t()) * (xg @ wu.t())) @ wd.t(), ls, gy)
    print("eager step", round(host_us_per_call(eager, calls=50), 1))
    for mode in sys.argv[2:]:
        recompute = mode == "recompute"
        step = lambda: torch.autograd.grad(fusedmlp.swiglu(*ls, recompute=recompute), ls, gy)  # noqa: E731
        fwd = lambda: fusedmlp.swiglu(*ls, recompute=recompute)  # noqa: E731
        print(mode, "step", round(host_us_per_call(step, calls=50), 1),
              "fwd", round(host_us_per_call(fwd, calls=50), 1))
    import fusedmlp.ops._common as common
    import fusedmlp.ops.glu as glu
    import fusedmlp.ops.swiglu as sw
    import fusedmlp.kernels.configs as configs
    targets = [(sw, n) for n in ("_forward_impl", "_backward", "_input_grad", "_validate", "_dispatch", "swiglu",
                                 "glu_forward_impl", "glu_backward_dh_impl", "reuse_saved_once",
                                 "backward_row_chunks", "_g_scratch")]
    targets += [(glu, n) for n in ("_launch_fwd", "_launch_bwd_dh", "_cublas_h", "dh_halves_of")]
    targets += [(common, n) for n in ("launch_pingpong", "pingpong_eligible", "tma_eligible", "num_sms",
                                      "pingpong_device", "scratch_matrix")]
    targets += [(kl, n) for n in ("launch", "bind_cuda_context", "_hooks_installed", "as_descriptors")]
    for mod, name in targets:
        fn = getattr(mod, name, None)
        if fn is not None:
            patch_everywhere(fn, f"{mod.__name__.split('.')[-1]}.{name}")
    for cls, names in ((kl.FastLaunch, ("call", "_key")), (kl._DirectLaunch, ("__call__", "_expanded"))):
        for n in names:
            setattr(cls, n, wrap(getattr(cls, n), f"{cls.__name__}.{n}"))
    for cls_name in dir(configs):
        cls = getattr(configs, cls_name)
        if isinstance(cls, type) and "launch" in vars(cls) and cls.__module__ == configs.__name__:
            setattr(cls, "launch", wrap(vars(cls)["launch"], f"{cls_name}.launch"))
    for mode in sys.argv[2:]:
        recompute = mode == "recompute"
        for _ in range(10):
            torch.autograd.grad(fusedmlp.swiglu(*ls, recompute=recompute), ls, gy)
        torch.cuda.synchronize()
        TOTAL.clear()
        COUNT.clear()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            torch.autograd.grad(fusedmlp.swiglu(*ls, recompute=recompute), ls, gy)
        wall = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        print(f"== {sys.argv[1]} {mode}: wrapped step {wall:.1f} us; inclusive us per step (calls per step):")
        for label, total in sorted(TOTAL.items(), key=lambda kv: -kv[1]):
            print(f"   {total / n * 1e6:8.1f}  ({COUNT[label] / n:.0f})  {label}")


if __name__ == "__main__":
    main()
