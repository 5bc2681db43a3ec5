"""The GLU forward's forms at K = 512 (SwiGLU's gate and up at d = 512, silu) against cuBLAS's
GEMM of the same size, with and without h stored.

    PYTHONPATH=src python3 benchmarks/glu_forward_forms_probe.py

Results: benchmarks/results/glu_forward_forms_H200_2026-11-29/. Why: the linear forward at
K = 512 gained a resident-x form that beat the alternating ping-pong kernel by 2-8%; the same
for the GLU forward (the paired weight tile) was the next idea for SwiGLU at d = 512, and this
asks first how far the GLU forward's forms are from the GEMM there. Each form forced
(``glu_forward_form.forcing``), x @ [W1; W2].T on cuBLAS as the floor, CUDA graphs, 5
interleaved rounds.
"""
import torch
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
import fusedmlp.ops.glu as glu

rows = []
for m, k, out in [(16384, 512, 1792), (65536, 512, 1792)]:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(out, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    w2 = torch.randn(out, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    wcat = torch.cat([w1, w2])
    calls = {"gemm": lambda: torch.mm(x, wcat.t())}
    for store_h in (False, True):
        for form in glu.GLU_FORWARD_FORMS:
            def call(form=form, store_h=store_h):
                with glu.glu_forward_form.forcing(form):
                    return glu.glu_forward_impl(x, w1, w2, None, None, "silu", store_h)
            calls[f"{form} store_h={store_h}"] = call
    for c in calls.values():
        c()
    torch.cuda.synchronize()
    replays = {name: capture_cuda_graph(c)[0].replay for name, c in calls.items()}
    row = interleaved_us_row(replays, 5, shape=f"{m}x{k}->2x{out}")
    print({n: round(row[n] / row["gemm"], 3) for n in calls})
    rows.append(row)
write_record("glu_forward_forms_probe", rows=rows)
