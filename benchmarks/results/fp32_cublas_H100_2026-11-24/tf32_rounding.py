"""Does Triton's TF32 dot truncate its fp32 operands (cuBLAS rounding them)? One GEMM, K 512."""
import torch, fusedmlp
torch.manual_seed(0)
torch.set_float32_matmul_precision("high")

def rna_tf32(t):  # round to nearest (ties away) at 10 mantissa bits
    i = t.view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)

def trunc_tf32(t):
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

for k in (64, 512, 4096):
    x = torch.randn(4096, k, device="cuda"); w = torch.randn(1024, k, device="cuda") / k ** 0.5
    w.requires_grad_(False)
    ref = x.double() @ w.double().t()
    e = lambda y: ((y.double() - ref).norm() / ref.norm()).item()
    tri = fusedmlp.linear_act(x, w, None, "identity")
    tri_r = fusedmlp.linear_act(rna_tf32(x), rna_tf32(w), None, "identity")
    cub = x @ w.t()
    cub_r = rna_tf32(x) @ rna_tf32(w).t()
    cub_t = trunc_tf32(x) @ trunc_tf32(w).t()
    exact_r = rna_tf32(x).double() @ rna_tf32(w).double().t()
    exact_t = trunc_tf32(x).double() @ trunc_tf32(w).double().t()
    print(f"K={k:5d} triton {e(tri):.2e} triton(rna inputs) {e(tri_r):.2e} cublas {e(cub):.2e} cublas(rna) {e(cub_r):.2e} "
          f"cublas(trunc) {e(cub_t):.2e} | exact on rna {e(exact_r):.2e} exact on trunc {e(exact_t):.2e}")
