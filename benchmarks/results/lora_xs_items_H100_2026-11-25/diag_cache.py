import torch, sys
import fusedmlp
import fusedmlp.ops.lora as ops
from fusedmlp.kernels.configs import LORA_HANDOFF_CONFIG
ops.LORA_PINGPONG_MAX_K = 128
torch.manual_seed(0)
def run(m=1000, k=200, n=600, r=8, group_m=3, sms=3, dtype=torch.bfloat16, via_op=False, act="identity"):
    ops.num_sms = lambda t: sms
    ops.LORA_HANDOFF_CONFIG = dict(LORA_HANDOFF_CONFIG, GROUP_M=group_m)
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    a = (torch.randn(r, k, device="cuda") / k**0.5).to(dtype)
    lb = (torch.randn(n, r, device="cuda") / r**0.5).to(dtype)
    launched = []
    real = ops.launch
    ops.launch = lambda kern, *aa, **kk: launched.append(getattr(kern, "__name__", str(kern))[:24]) or real(kern, *aa, **kk)
    try:
        if via_op:
            a.requires_grad_(); lb.requires_grad_(); x.requires_grad_()
            y = fusedmlp.lora_linear(x, w, b, a, lb, 2.0, act)
            xs = None
        else:
            y, _, xs = ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, act, False)
    finally:
        ops.launch = real
    torch.cuda.synchronize()
    xs_ref = 2.0 * x.detach().double() @ a.detach().double().T
    y_ref = x.detach().double() @ w.double().T + b.double() + xs_ref.to(dtype).double() @ lb.detach().double().T
    def err(o, ref):
        if o is None: return "-"
        o = o.detach().double()
        if not torch.isfinite(o).all(): return "nonfinite %d/%d" % ((~torch.isfinite(o)).sum().item(), o.numel())
        return "%.2e" % ((o - ref).norm() / ref.norm()).item()
    yd = y.detach().double()
    bad = ((yd - y_ref).abs() > 0.1 * y_ref.abs().amax())
    bad_rows = bad.any(1).nonzero().flatten(); bad_cols = bad.any(0).nonzero().flatten()
    print(f"m={m} k={k} n={n} r={r} G={group_m} sms={sms} op={via_op} {launched}: y {err(y, y_ref)} xs {err(xs, xs_ref)} "
          f"bad rows {len(bad_rows)} {bad_rows[:4].tolist()} cols {len(bad_cols)} {bad_cols[:4].tolist()}..{bad_cols[-2:].tolist()}", flush=True)
def xs_detail(m, k, n, r, sms, group_m=3):
    ops.num_sms = lambda t: sms
    ops.LORA_HANDOFF_CONFIG = dict(LORA_HANDOFF_CONFIG, GROUP_M=group_m)
    dtype = torch.bfloat16
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    a = (torch.randn(r, k, device="cuda") / k**0.5).to(dtype)
    lb = (torch.randn(n, r, device="cuda") / r**0.5).to(dtype)
    y, _, xs = ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
    torch.cuda.synchronize()
    xs_ref = 2.0 * x.double() @ a.double().T
    bad = ~((xs.double() - xs_ref).abs() <= 0.05 * xs_ref.abs().amax())
    rows = bad.any(1).nonzero().flatten(); cols = bad.any(0).nonzero().flatten()
    print(f"xs m={m} k={k} n={n} r={r} sms={sms}: bad {bad.sum().item()}/{bad.numel()} rows {len(rows)} first {rows[:6].tolist()} "
          f"row%128 set {sorted(set((rows % 128).tolist()))[:10]} cols {cols.tolist()[:40]}", flush=True)
for r in (32, 24, 64, 16):
    for m, k, n in ((1000, 200, 600), (1000, 4096, 600), (8192, 200, 600), (8192, 4096, 4096), (1024, 256, 512)):
        for sms in (3, 132):
            xs_detail(m, k, n, r, sms)
raise SystemExit
import os
print(os.environ.get("FUSEDMLP_AUTOTUNE"))
for r, n, group_m, sms, dtype in ((8, 600, 3, 3, torch.bfloat16), (16, 600, 3, 1, torch.bfloat16), (16, 600, 16, 7, torch.bfloat16),
             (24, 600, 3, 132, torch.bfloat16), (32, 200, 3, 3, torch.bfloat16), (16, 600, 3, 3, torch.float16),
             (64, 600, 3, 7, torch.bfloat16), (72, 600, 3, 3, torch.bfloat16), (3, 600, 3, 3, torch.bfloat16)):
    for via_op in (False, True):
        try:
            run(r=r, n=n, group_m=group_m, sms=sms, dtype=dtype, via_op=via_op)
        except Exception as e:
            print("ERR", r, n, sms, dtype, via_op, repr(e)[:300])
