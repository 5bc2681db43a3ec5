"""LoRA's forward with xs given: the ping-pong kernel (xs @ B.T as the main loop's tail steps)
against the Triton kernel (xs @ B.T in the epilogue), in CUDA graphs.

    python benchmarks/lora_pingpong_sweep.py       (writes $OUT/lora_pingpong_sweep.json)

For each shape (M, K -> N, rank r; bias, identity, bf16): the bare cuBLAS GEMM (and with the
bias, addmm), the LoRA forward kernel in both forms whatever LORA_PINGPONG_MAX_K says, and
linear_act's forward in both forms (the same main loops without the rank-r product); the two
LoRA outputs are compared (max abs difference).
"""
import torch
import fusedmlp.ops._common as common
import fusedmlp.ops.lora as lora_ops
import fusedmlp.ops.linear_act as linear_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep
from fusedmlp.bench.suites.lora import sweep_operands

SHAPES = [(8192, 4096, 4096, 16), (32768, 4096, 4096, 16), (32768, 1024, 1024, 64), (16384, 4096, 14336, 16),
          (8192, 4096, 4096, 64)]
lora_ops.LORA_PINGPONG_MAX_K = 1 << 30  # the ping-pong form at every width when PINGPONG is on
torch.manual_seed(0)
rows = []
for m, k, n, r in SHAPES:
    x, w, b, a, lb = sweep_operands(m, k, n, r)
    xs = lora_ops._scaled_rank_product(x, a, 2.0)
    call = lambda: lora_ops._launch_fwd(x, w, b, a, lb, xs, 2.0, "identity", False)  # noqa: E731
    row = dict(shape=[m, k, n, r], cublas=graph_us(lambda: x @ w.T), cublas_addmm=graph_us(lambda: torch.addmm(b, x, w.T)))
    outputs = {}
    for pingpong in (True, False):
        common.PINGPONG = pingpong
        form = "pingpong" if pingpong else "triton"
        outputs[form] = call()[0]
        row["lora_" + form] = graph_us(call)
        row["linear_" + form] = graph_us(lambda: linear_ops.linear_act_forward_impl(x, w, b, "identity", False))
    common.PINGPONG = True
    row["maxdiff"] = (outputs["pingpong"].float() - outputs["triton"].float()).abs().max().item()
    rows.append(row)
    print_sweep_row(row)
write_sweep("lora_pingpong_sweep", rows)
