"""CPU: how much eager fp32's error on dW_0 moves with the order of the sums alone, on stacks
shaped like the GPU fuzz case 175-6-488-19-32-352 (squared_relu, then sigmoid; 100 rows).
Per seed: eager fp32 against float64, and three copies of the same function with x's features
and every hidden layer's units permuted (each against float64 on the same permutation).
Run from the repository root: python3 benchmarks/results/fuzz_mlp_fixes_H100_2026-11-24/order_spread.py"""
import torch, sys
sys.path.insert(0, "tests"); sys.path.insert(0, "src")
from helpers import rel_err
import fusedmlp
sizes=[175,6,488,19,32,352]
def run(x, ws, bs, g, dt, perm=None):
    x=x.to(dt).clone(); ws=[w.to(dt).clone() for w in ws]; bs=[None if b is None else b.to(dt).clone() for b in bs]
    if perm:  # permute every hidden layer's units (same function, other accumulation order)
        for i in range(len(ws)-1):
            p=torch.randperm(ws[i].shape[0], generator=perm)
            ws[i]=ws[i][p]; bs[i]=None if bs[i] is None else bs[i][p]; ws[i+1]=ws[i+1][:,p]
        q=torch.randperm(x.shape[1], generator=perm); x=x[:,q]; ws[0]=ws[0][:,q]
        inv=torch.argsort(q)
    ws=[w.requires_grad_() for w in ws]
    y=fusedmlp.mlp_reference(x, ws, bs, "squared_relu", "sigmoid")
    y.backward(g.to(dt))
    dW0=ws[0].grad
    return dW0[:, inv] if perm else dW0, perm
ratios=[]
for s in range(20):
    torch.manual_seed(s)
    x=torch.randn(100,175,dtype=torch.float64)
    ws=[torch.randn(o,i,dtype=torch.float64)/i**.5 for i,o in zip(sizes,sizes[1:])]
    bs=[torch.randn(o,dtype=torch.float64)*.5 for o in sizes[1:]]; bs[-1]=None
    g=torch.randn(100,352,dtype=torch.float64)
    ref,_=run(x,ws,bs,g,torch.float64)
    a,_=run(x,ws,bs,g,torch.float32)
    errs=[]
    for k in range(3):
        gen=torch.Generator().manual_seed(1000*s+k)
        b,_=run(x,ws,bs,g,torch.float32,gen)
        gen=torch.Generator().manual_seed(1000*s+k)
        r,_=run(x,ws,bs,g,torch.float64,gen)
        errs.append(rel_err(b,r))
    e=rel_err(a,ref)
    print(f"seed {s}: eager {e:.2e}, reordered {[f'{v:.2e}' for v in errs]}, max/min ratio {max(errs+[e])/min(errs+[e]):.2f}")
