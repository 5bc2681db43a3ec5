"""As run (H100, 2026-11-23) on the working tree before the L2 bound of the units rule and with
rank blocks 16 and 32 on chip: kernel time in CUDA graphs (us) of the LoRA forward with xs formed
on chip, the runs per row block forced (s1, s2, ...), against torch.addmm(b, x, W.T); identity,
bf16, scale 2. Output: segments_sweep.txt."""
import json, sys, torch
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import graph_us
torch.manual_seed(0)
lora_ops.LORA_PINGPONG_MAX_K = 1 << 30
CASES = [((32768, 1024, 1024, 16), (1, 2, 4, 8)), ((8192, 1024, 1024, 16), (1, 2, 4)),
         ((16384, 1024, 4096, 16), (1, 2, 4, 8, 16)), ((8192, 4096, 4096, 16), (2, 4, 8, 16, 32)),
         ((32768, 4096, 4096, 16), (2, 4, 8, 16, 32)), ((16384, 512, 1792, 16), (1, 2, 7)),
         ((32768, 1024, 1024, 32), (1, 2, 4))]
real = lora_ops._onchip_segments
for (m, k, n, r), segs in CASES:
    dt = torch.bfloat16
    x = torch.randn(m, k, device="cuda", dtype=dt); w = torch.randn(n, k, device="cuda", dtype=dt) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dt); a = torch.randn(r, k, device="cuda", dtype=dt) / k**0.5
    lb = torch.randn(n, r, device="cuda", dtype=dt) / r**0.5
    row = {"shape": [m, k, n, r], "rule": real(m, n, 132, 128, 128), "addmm": graph_us(lambda: torch.addmm(b, x, w.T))}
    for s in segs:
        lora_ops._onchip_segments = lambda *a, s=s: s
        row[f"s{s}"] = round(graph_us(lambda: lora_ops.lora_forward_impl(x, w, b, a, lb, None, None, 2.0, "identity", False)), 1)
    lora_ops._onchip_segments = real
    print(json.dumps(row), flush=True)
