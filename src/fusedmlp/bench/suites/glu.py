"""Bench suite ``geglu``: the fused GEGLU projection d -> 8d (out = 4d) against its peers.

Implementations, side by side in one run on one device:
    fused          fusedmlp.geglu(recompute=True)  (saves x only)
    fused_store    fusedmlp.geglu(recompute=False) (saves h too)
    eager          F.linear + chunk + F.gelu(tanh) + mul, PyTorch eager
    compile        the same function under torch.compile (default mode)
    compile_max    the same under torch.compile(mode="max-autotune") (only with --max-autotune:
                   it compiles for minutes)
    liger          Liger-Kernel's GEGLU path when liger_kernel is installed: two linears (the
                   two halves of the packed weight) and its fused GELU-mul kernel
    gemm           the bare cuBLAS GEMM(s) of the same shape: the floor a fused GEMM+epilogue
                   must reach (fwd: x @ W.T; bwd: dh @ W and dh.T @ x; fwd+bwd: all three)

Modes: fwd (a training forward: inputs require grad), bwd (backward of a kept forward),
fwd+bwd. TFLOP/s counts the model's GEMM work (2*N*d*8d per GEMM, 3 GEMMs for fwd+bwd)
whatever an implementation does extra (recompute mode runs a fourth GEMM). Peak memory is
above the inputs x, W, b, g. ``act_nd`` is the forward's activation footprint (x plus all
memory still held after the forward: output and saved state) in units of N*d elements; the
analysis gives 5 for the ideal (input + output) and at least 9 when h is kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..harness import Measurement, median_ms, peak_mib_above_current, progress

NAME = "geglu"
SHAPE_PRESETS = {
    # the anchor shapes of DESIGN.md plus one long-N shape
    "default": [(1024, 8192), (2048, 16384), (4096, 8192), (1024, 32768)],
    # the sweep where N > d and fusion saves most memory
    "full": [(d, n) for d in (1024, 2048, 4096, 8192) for n in (4096, 8192, 16384, 32768, 65536)],
}
DEFAULT_SHAPES = SHAPE_PRESETS["default"]
IMPLS = ("fused", "fused_store", "eager", "compile", "compile_max", "liger", "gemm")
PEERS = ("eager", "compile", "compile_max", "liger")
MODES = ("fwd", "bwd", "fwd+bwd")


def liger_available() -> bool:
    try:
        import liger_kernel.ops.geglu  # noqa: F401
    except Exception:  # ImportError, or a broken install of a peer: leave it out
        return False
    return True


def default_impls(max_autotune: bool = False) -> list[str]:
    """Every implementation this machine can run (compile_max only when asked for)."""
    impls = [i for i in IMPLS if i not in ("compile_max", "liger")]
    if max_autotune:
        impls.insert(impls.index("compile") + 1, "compile_max")
    if liger_available():
        impls.insert(impls.index("gemm"), "liger")
    return impls


def eager_geglu(x, weight, bias):
    h = F.linear(x, weight, bias)
    x1, x2 = h.chunk(2, dim=-1)
    return x1 * F.gelu(x2, approximate="tanh")


def _gemm_flops(n: int, d: int) -> float:
    return 2.0 * n * d * 8 * d


def liger_geglu(x, weight, bias):
    """Liger-Kernel's GEGLU: x1 and x2 from two linears, then its GELU-mul kernel on (x2, x1)."""
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    out = weight.shape[0] // 2
    x1 = F.linear(x, weight[:out], None if bias is None else bias[:out])
    x2 = F.linear(x, weight[out:], None if bias is None else bias[out:])
    return LigerGELUMulFunction.apply(x2, x1)  # gelu_tanh(first) * second


def _forward_fn(impl: str):
    from ...ops.glu import geglu

    if impl == "fused":
        return lambda x, w, b: geglu(x, w, b, recompute=True)
    if impl == "fused_store":
        return lambda x, w, b: geglu(x, w, b, recompute=False)
    if impl == "eager":
        return eager_geglu
    if impl == "compile":
        return torch.compile(eager_geglu, dynamic=False)
    if impl == "compile_max":
        return torch.compile(eager_geglu, dynamic=False, mode="max-autotune")
    if impl == "liger":
        return liger_geglu
    raise ValueError(impl)


def _measure_impl(impl, forward, mode, x, w, b, g, n, d):
    """(ms, peak MiB, extra) of one implementation (``forward``, None for gemm) in one mode."""
    extra = {}
    if impl == "gemm":
        dh = torch.randn(n, 8 * d, device=x.device, dtype=x.dtype)
        xd, wd = x.detach(), w.detach()
        steps = {
            "fwd": lambda: torch.mm(xd, wd.t()),
            "bwd": lambda: (torch.mm(dh, wd), torch.mm(dh.t(), xd)),
            "fwd+bwd": lambda: (torch.mm(xd, wd.t()), torch.mm(dh, wd), torch.mm(dh.t(), xd)),
        }
        fn = steps[mode]
        fn()
        return median_ms(fn), peak_mib_above_current(fn), extra
    inputs = (x, w, b)
    if mode == "fwd":
        fn = lambda: forward(x, w, b)  # noqa: E731
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        y = forward(x, w, b)
        torch.cuda.synchronize()
        retained = torch.cuda.memory_allocated() - before
        extra["act_nd"] = (x.numel() * x.element_size() + retained) / (n * d * x.element_size())
        del y
        return median_ms(fn), peak_mib_above_current(fn), extra
    if mode == "fwd+bwd":
        fn = lambda: torch.autograd.grad(forward(x, w, b), inputs, g)  # noqa: E731
        for _ in range(2):
            fn()
        return median_ms(fn), peak_mib_above_current(fn), extra
    # bwd: the backward of one kept forward graph
    y = forward(x, w, b)
    fn = lambda: torch.autograd.grad(y, inputs, g, retain_graph=True)  # noqa: E731
    for _ in range(2):
        fn()
    return median_ms(fn), peak_mib_above_current(fn), extra


def run_gpu(shapes, dtype, impls, modes, on_shape_done=None) -> list[Measurement]:
    """Every (shape, impl, mode); ``on_shape_done(rows)`` after each shape (to save partial results)."""
    rows = []
    bar = progress(len(shapes) * len(impls) * len(modes), "bench geglu")
    for d, n in shapes:
        torch._dynamo.reset()  # each shape compiles afresh; no recompile limit in the way
        x = torch.randn(n, d, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.randn(8 * d, d, device="cuda") / d**0.5).to(dtype).requires_grad_()
        b = torch.randn(8 * d, device="cuda", dtype=dtype, requires_grad=True)
        g = torch.randn(n, 4 * d, device="cuda", dtype=dtype)
        # one function per impl and shape, so torch.compile compiles each graph once per shape
        forwards = {impl: (None if impl == "gemm" else _forward_fn(impl)) for impl in impls}
        for impl in impls:
            for mode in modes:
                bar.set_postfix_str(f"d={d} N={n} {impl} {mode}")
                row = Measurement(NAME, {"d": d, "N": n}, str(dtype).replace("torch.", ""), impl, mode)
                try:
                    ms, peak, extra = _measure_impl(impl, forwards[impl], mode, x, w, b, g, n, d)
                    gemms = {"fwd": 1, "bwd": 2, "fwd+bwd": 3}[mode]
                    row.ms, row.peak_mib, row.extra = ms, peak, extra
                    row.tflops = gemms * _gemm_flops(n, d) / (ms * 1e-3) / 1e12
                except Exception as exc:  # a peer failing must not lose the other figures
                    row.note = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                rows.append(row)
                torch.cuda.empty_cache()
                bar.update()
        del x, w, b, g
        if on_shape_done is not None:
            on_shape_done(rows)
    bar.close()
    return rows


def summary_table(rows: list[Measurement]):
    """Headers and rows: one line per (shape, mode): ms per impl, ratios to the GEMM floor
    and of each fused mode to each peer that ran (below 1 = fused is faster), peak MiB."""
    impls = [i for i in IMPLS if any(r.impl == i for r in rows)]
    fused = [i for i in impls if i.startswith("fused")]
    peers = [i for i in impls if i in PEERS]
    keys = list(dict.fromkeys((r.shape["d"], r.shape["N"], r.mode) for r in rows))
    lookup = {(r.shape["d"], r.shape["N"], r.mode, r.impl): r.ms for r in rows}
    peaks = {(r.shape["d"], r.shape["N"], r.mode, r.impl): r.peak_mib for r in rows}
    ratio = lambda a, b: (a / b) if (a is not None and b) else None  # noqa: E731
    headers = ["d", "N", "mode"] + [f"{i} ms" for i in impls]
    if "gemm" in impls:
        headers += [f"{i}/gemm" for i in impls if i != "gemm"]
    headers += [f"{f}/{p}" for f in fused for p in peers]
    headers += [f"{i} MiB" for i in impls if i != "gemm"]
    table = []
    for d, n, mode in keys:
        ms = {i: lookup.get((d, n, mode, i)) for i in impls}
        line = [d, n, mode] + [ms[i] for i in impls]
        if "gemm" in impls:
            line += [ratio(ms[i], ms["gemm"]) for i in impls if i != "gemm"]
        line += [ratio(ms[f], ms[p]) for f in fused for p in peers]
        line += [peaks.get((d, n, mode, i)) for i in impls if i != "gemm"]
        table.append(line)
    return headers, table


def run_cpu_check(dtype) -> tuple[list[str], list[list]]:
    """No GPU: a small interpreted run against the float64 reference (no timings)."""
    from ...ops.glu import geglu, geglu_reference

    n, d_in, out = 96, 48, 40
    headers = ["dtype", "mode", "err y", "err dx", "err dW", "err db"]
    table = []
    x64 = torch.randn(n, d_in, dtype=torch.float64)
    w64 = torch.randn(2 * out, d_in, dtype=torch.float64) / d_in**0.5
    b64 = torch.randn(2 * out, dtype=torch.float64)
    g64 = torch.randn(n, out, dtype=torch.float64)
    ref_leaves = [t.clone().requires_grad_() for t in (x64, w64, b64)]
    geglu_reference(*ref_leaves).backward(g64)
    err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
    for dt in dict.fromkeys([dtype, torch.float32]):
        for recompute in (True, False):
            leaves = [t.to(dt).requires_grad_() for t in (x64, w64, b64)]
            y = geglu(*leaves, recompute=recompute)
            y.backward(g64.to(dt))
            ref_y = geglu_reference(x64, w64, b64)
            table.append(
                [str(dt).replace("torch.", ""), "recompute" if recompute else "store", err(y, ref_y)]
                + [err(t.grad, r.grad) for t, r in zip(leaves, ref_leaves)]
            )
    return headers, table
