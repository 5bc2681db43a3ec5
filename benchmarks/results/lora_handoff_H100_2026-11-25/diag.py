import torch, itertools, sys
import fusedmlp.ops.lora as ops
from fusedmlp.kernels.configs import LORA_HANDOFF_CONFIG
ops.LORA_PINGPONG_MAX_K = 128
torch.manual_seed(0)
def run(m, k, n, r, group_m, sms, dtype=torch.bfloat16):
    ops.num_sms = lambda t: sms
    ops.LORA_HANDOFF_CONFIG = dict(LORA_HANDOFF_CONFIG, GROUP_M=group_m)
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    a = (torch.randn(r, k, device="cuda") / k**0.5).to(dtype)
    lb = (torch.randn(n, r, device="cuda") / r**0.5).to(dtype)
    launched = []
    real = ops.launch
    ops.launch = lambda kern, *aa, **kk: launched.append(kern.__name__ if hasattr(kern, "__name__") else str(kern)) or real(kern, *aa, **kk)
    try:
        y, _, xs = ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
    finally:
        ops.launch = real
    torch.cuda.synchronize()
    xs_ref = 2.0 * x.double() @ a.double().T
    y_ref = x.double() @ w.double().T + b.double() + xs_ref.to(dtype).double() @ lb.double().T
    def err(o, ref):
        o = o.double()
        if not torch.isfinite(o).all(): return "nonfinite %d/%d" % ((~torch.isfinite(o)).sum().item(), o.numel())
        return "%.2e" % ((o - ref).norm() / ref.norm()).item()
    bad_rows = ((y.double() - y_ref).abs().amax(1) > 0.1 * y_ref.abs().amax()).nonzero().flatten()
    print(f"m={m} k={k} n={n} r={r} G={group_m} sms={sms} {launched}: y {err(y, y_ref)} xs {err(xs, xs_ref)} bad rows {bad_rows[:3].tolist()}..{bad_rows[-3:].tolist()} ({len(bad_rows)})", flush=True)
base = dict(m=1000, k=200, n=600, r=8, group_m=3, sms=3)
variants = [{}, dict(k=256), dict(n=512), dict(m=1024), dict(group_m=16), dict(sms=132), dict(r=16), dict(k=4096),
            dict(m=1024, k=256, n=512), dict(m=1024, k=256, n=512, sms=132, group_m=16), dict(m=8192, k=4096, n=4096, r=16, sms=132, group_m=16)]
for v in variants:
    run(**dict(base, **v))
