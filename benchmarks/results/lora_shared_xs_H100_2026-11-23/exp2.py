import json, os, torch
import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_us
from fusedmlp.bench.suites.lora import sweep_operands
SHAPES = [(32768, 1024, 1024, 16), (8192, 1024, 1024, 16), (16384, 512, 1792, 16)]
torch.manual_seed(0)
rows = []
for m, k, n, r in SHAPES:
    x, w, b, a, lb = sweep_operands(m, k, n, r)
    def var(mode):
        def call():
            lora_ops._EXP.update(spin_ns=0, flag_stride=32, no_wait=mode); lora_ops.ONCHIP_MAX_K = k
            return lora_ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
        return call
    def lin(form):
        def call():
            with linear_ops.linear_forward_form.forcing(form):
                return linear_ops.linear_act_forward_impl(x, w, b, "identity", False)
        return call
    calls = {"cublas": lambda: x @ w.T}
    calls.update({f"lin_{f}": lin(f) for f in ("tma", "alternating", "cooperative", "wide")})
    calls.update({f"mode{md}": var(md) for md in (0, 1, 2, 3)})
    times = {nm: [] for nm in calls}
    for rnd in range(2):
        for nm in (list(calls) if rnd == 0 else list(calls)[::-1]):
            times[nm].append(graph_us(calls[nm]))
    row = dict(shape=[m, k, n, r], **{nm: round(min(t), 1) for nm, t in times.items()})
    rows.append(row); print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "exp2.json"), "w"), indent=1)
