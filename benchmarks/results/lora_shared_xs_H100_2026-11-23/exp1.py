import json, os, torch
import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_us
from fusedmlp.bench.suites.lora import sweep_operands
SHAPES = [(32768, 1024, 1024, 16), (8192, 1024, 1024, 16), (16384, 512, 1792, 16), (8192, 4096, 4096, 16)]
VARIANTS = {"s1": dict(spin_ns=0, flag_stride=1, no_wait=False), "s32": dict(spin_ns=0, flag_stride=32, no_wait=False),
            "s32n100": dict(spin_ns=100, flag_stride=32, no_wait=False), "s32n500": dict(spin_ns=500, flag_stride=32, no_wait=False),
            "s1n200": dict(spin_ns=200, flag_stride=1, no_wait=False), "nowait": dict(spin_ns=0, flag_stride=1, no_wait=True)}
torch.manual_seed(0)
rows = []
for m, k, n, r in SHAPES:
    x, w, b, a, lb = sweep_operands(m, k, n, r)
    def var(v):
        def call():
            lora_ops._EXP.update(VARIANTS[v]); lora_ops.ONCHIP_MAX_K = k
            return lora_ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)
        return call
    calls = {"cublas": lambda: x @ w.T, "linear_act": lambda: linear_ops.linear_act_forward_impl(x, w, b, "identity", False)}
    calls.update({v: var(v) for v in VARIANTS})
    times = {nm: [] for nm in calls}
    for rnd in range(2):
        for nm in (list(calls) if rnd == 0 else list(calls)[::-1]):
            times[nm].append(graph_us(calls[nm]))
    row = dict(shape=[m, k, n, r], **{nm: round(min(t), 1) for nm, t in times.items()})
    ref = var("s1")()[0].float()
    row["s32n100_diff"] = (var("s32n100")()[0].float() - ref).abs().max().item()
    rows.append(row); print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "exp1.json"), "w"), indent=1)
