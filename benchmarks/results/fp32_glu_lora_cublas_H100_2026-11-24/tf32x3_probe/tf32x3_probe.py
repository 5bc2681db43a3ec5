"""fp32 products on tensor cores with fp32-level accuracy (tf32x3 / bf16x3 / bf16x6 splits):
(gemm) one GEMM's error against float64 and its speed per tl.dot input precision, cuBLAS
"highest" and "high" beside; (mlp MODE) DLRM's MLPs through fusedmlp.mlp with the fp32 dots
forced to MODE ("cublas" = the library as is at "highest"), errors of y and every gradient
against float64, graphed fwd and fwd+bwd against graphed eager at "highest"."""
import json, os, sys
import torch, triton, triton.language as tl
import torch.nn.functional as F

OUT = os.environ.get("OUT", ".")
PRECS = ["ieee", "tf32", "tf32x3", "bf16x3", "bf16x6"]


@triton.jit
def mm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        av = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :])
        bv = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(av, bv, acc, input_precision=PREC)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


def tmm(a, b, prec):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device="cuda")
    mm_kernel[(M // 128, N // 128)](a, b, c, M, N, K, BM=128, BN=128, BK=32, PREC=prec, num_warps=8, num_stages=3)
    return c


def rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def gemm():
    torch.manual_seed(0)
    rows = []
    for k in (64, 512, 4096):
        a = torch.randn(4096, k, device="cuda")
        b = torch.randn(k, 1024, device="cuda") / k ** 0.5
        ref = a.double() @ b.double()
        for setting in ("highest", "high"):
            torch.set_float32_matmul_precision(setting)
            rows.append(dict(k=k, impl=f"cublas_{setting}", err=rel(a @ b, ref)))
        torch.set_float32_matmul_precision("highest")
        for p in PRECS:
            try:
                rows.append(dict(k=k, impl=f"triton_{p}", err=rel(tmm(a, b, p), ref)))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(k=k, impl=f"triton_{p}", err=None, error=f"{type(e).__name__}: {str(e)[:150]}"))
    n = 4096
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for setting in ("highest", "high"):
        torch.set_float32_matmul_precision(setting)
        ms = triton.testing.do_bench(lambda: a @ b)
        rows.append(dict(k=n, impl=f"cublas_{setting}", ms_4096cube=ms, tflops=2 * n ** 3 / ms / 1e9))
    torch.set_float32_matmul_precision("highest")
    for p in PRECS:
        try:
            ms = triton.testing.do_bench(lambda: tmm(a, b, p))
            rows.append(dict(k=n, impl=f"triton_{p}", ms_4096cube=ms, tflops=2 * n ** 3 / ms / 1e9))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(k=n, impl=f"triton_{p}", error=f"{type(e).__name__}: {str(e)[:150]}"))
    for r in rows:
        print("gemm", json.dumps(r), flush=True)
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows),
              open(f"{OUT}/gemm.json", "w"), indent=1)


def mlp(mode):
    import fusedmlp
    from fusedmlp.ops import _common
    from fusedmlp.bench.harness import graph_steps
    torch.set_float32_matmul_precision("highest")
    if mode != "cublas":
        orig = _common.dot_precision
        _common.dot_precision = lambda dtype: mode if dtype == torch.float32 else orig(dtype)
    torch.manual_seed(0)
    rows = []
    for name, sizes in (("bottom", (13, 512, 256, 64, 16)), ("top", (367, 512, 256, 1))):
        last = "sigmoid" if sizes[-1] == 1 else "relu"
        L = len(sizes) - 1
        ws = [(torch.randn(sizes[i + 1], sizes[i], device="cuda") / sizes[i] ** 0.5).requires_grad_() for i in range(L)]
        bs = [(torch.randn(sizes[i + 1], device="cuda") * 0.1).requires_grad_() for i in range(L)]
        for m in (2048, 8192, 65536):
            x = torch.randn(m, sizes[0], device="cuda", requires_grad=True)
            params = [x] + ws + bs
            act = lambda t, i: torch.sigmoid(t) if (i == L - 1 and last == "sigmoid") else torch.relu(t)  # noqa

            def eager(x, ws, bs):
                h = x
                for i in range(L):
                    h = act(F.linear(h, ws[i], bs[i]), i)
                return h

            fused = lambda x, ws, bs: fusedmlp.mlp(x, ws, bs, "relu", last)  # noqa
            g = torch.randn(m, sizes[-1], device="cuda")
            row = dict(mode=mode, stack=name, m=m)
            for impl, fn in (("fused", fused), ("eager", eager)):
                torch.cuda.synchronize()
                steps = graph_steps(lambda x, *p: fn(x, p[:L], p[L:]), tuple(params), g)
                for label, mode_name in (("fwd", "fwd"), ("fwdbwd", "fwd+bwd")):
                    row[f"{impl}_{label}_us"] = triton.testing.do_bench(steps[mode_name]) * 1e3
            d = [p.detach().double().requires_grad_() for p in params]
            y64 = eager(d[0], d[1:1 + L], d[1 + L:])
            grads64 = torch.autograd.grad(y64, d, g.double())
            for impl, fn in (("fused", fused), ("eager", eager)):
                y = fn(x, ws, bs)
                grads = torch.autograd.grad(y, params, g)
                row[f"{impl}_err_y"] = rel(y, y64)
                row[f"{impl}_err_dx"] = rel(grads[0], grads64[0])
                row[f"{impl}_err_dw"] = max(rel(a, b) for a, b in zip(grads[1:1 + L], grads64[1:1 + L]))
                row[f"{impl}_err_db"] = max(rel(a, b) for a, b in zip(grads[1 + L:], grads64[1 + L:]))
            for label in ("fwd", "fwdbwd"):
                row[f"eager_over_fused_{label}"] = row[f"eager_{label}_us"] / row[f"fused_{label}_us"]
            rows.append(row)
            print("mlp", json.dumps(row), flush=True)
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows),
              open(f"{OUT}/mlp_{mode}.json", "w"), indent=1)


if __name__ == "__main__":
    gemm() if sys.argv[1] == "gemm" else mlp(sys.argv[2])
