import torch
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_us
from fusedmlp.bench.suites.lora import sweep_operands
torch.manual_seed(0)
for r in (64, 16):
    x, w, b, a, lb = sweep_operands(8192, 4096, 4096, r)
    launched = []
    real = lora_ops.launch
    def call(mode):
        def f():
            saved = lora_ops.HANDOFF_FORWARD
            lora_ops.HANDOFF_FORWARD = mode
            try:
                return lora_ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
            finally:
                lora_ops.HANDOFF_FORWARD = saved
        return f
    lora_ops.launch = lambda k, *aa, **kk: launched.append(getattr(k, "__name__", str(k))[:28]) or real(k, *aa, **kk)
    outs = {m: call(m)() for m in (True, "always", False)}
    print(r, "launched", launched)
    lora_ops.launch = real
    for m in (True, "always"):
        print(r, m, "y diff vs before", (outs[m][0].float() - outs[False][0].float()).abs().max().item(),
              "xs diff", (outs[m][2].float() - outs[False][2].float()).abs().max().item())
    times = {m: [] for m in (True, "always", False)}
    for rnd in range(4):
        for m in (list(times) if rnd % 2 == 0 else list(times)[::-1]):
            times[m].append(round(graph_us(call(m), rep_ms=100), 1))
    print(r, times, flush=True)
