"""The down projection's weight gradient ``dW = gy.T @ z`` in the forms cuBLAS can be asked for it.

    python benchmarks/wgrad_forms_probe.py      (writes $OUT/wgrad_forms_probe.json)

``gy [tokens, d]``, ``z [tokens, hidden]``, dW ``[d, hidden]`` (the weight's layout). Its output
is small and its K long (tokens), so cuBLAS runs it split-K at d = 512 (1.23x a GEMM's time in
the SwiGLU step's profile). Forms, in CUDA graphs (us): ``gy.t() @ z`` (the library's);
``(z.t() @ gy).t()`` (the transposed problem: cuBLAS may pick another kernel), as a view and
made contiguous (what autograd's accumulation would copy into the weight's layout); the same
two under cuBLASLt as PyTorch's BLAS; and the GEMM of the same size with a short K and many
tiles (``[tokens, d] x [d, hidden]``, the dh kernel's g) for scale. Each form is checked
against the first (max abs difference).
"""
import torch

from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep

SHAPES = [(16384, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632), (16384, 4096, 14336), (8192, 512, 1792)]
FORMS = {
    "gyT_z": lambda gy, z: gy.t() @ z,
    "zT_gy_view": lambda gy, z: (z.t() @ gy).t(),
    "zT_gy_contiguous": lambda gy, z: (z.t() @ gy).t().contiguous(),
}

rows = []
torch.manual_seed(0)
for tokens, d, hidden in SHAPES:
    gy = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    z = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(d, hidden, device="cuda", dtype=torch.bfloat16)
    ref = FORMS["gyT_z"](gy, z).float()
    r = dict(shape=[tokens, d, hidden], short_k_gemm=graph_us(lambda: gy @ w))
    for library in ("default", "cublaslt"):
        if library == "cublaslt":
            torch.backends.cuda.preferred_blas_library("cublaslt")
        for name, form in FORMS.items():
            key = name if library == "default" else f"{name}_lt"
            r[key + "_maxdiff"] = (form(gy, z).float() - ref).abs().max().item()
            r[key] = graph_us(lambda: form(gy, z))
        torch.backends.cuda.preferred_blas_library("default")
    rows.append(r)
    print_sweep_row(r)
write_sweep("wgrad_forms_probe", rows)
