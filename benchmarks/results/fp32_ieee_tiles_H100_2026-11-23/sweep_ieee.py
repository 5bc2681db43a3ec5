import torch, fusedmlp, triton, json, os
from triton.testing import do_bench
import fusedmlp.ops.linear_act as la, fusedmlp.ops.glu as glu
torch.manual_seed(0)
m,k,n=16384,512,1792
dt=torch.float32
x=torch.randn(m,k,device='cuda',dtype=dt); w=torch.randn(n,k,device='cuda',dtype=dt)*0.05; b=torch.zeros(n,device='cuda',dtype=dt)
wu=torch.randn(n,k,device='cuda',dtype=dt)*0.05; wg=torch.randn(n,k,device='cuda',dtype=dt)*0.05; wd=torch.randn(k,n,device='cuda',dtype=dt)*0.05
res=[]
def rec(*a):
    print(*a, flush=True); res.append([str(v) for v in a])
def bench(f):
    try:
        f(); return do_bench(f, warmup=10, rep=40)
    except Exception as e:
        print(type(e).__name__, str(e)[:90]); return float('nan')
TILES=[(128,128,32,8,3),(128,128,16,8,3),(128,64,32,4,3),(64,128,32,4,3),(64,64,32,4,3),(128,128,16,4,3),(64,64,16,4,3),(128,64,16,4,3),(64,128,16,4,3),(64,64,32,2,3),(32,64,32,4,3)]
rec('cublas linear', do_bench(lambda: torch.nn.functional.linear(x,w,b)))
rec('cublas 2n', do_bench(lambda: x@torch.cat([wu,wg]).t()))
for (bm,bn,bk,nw,ns) in TILES:
    cfg=triton.Config({'BLOCK_M':bm,'BLOCK_N':bn,'BLOCK_K':bk,'GROUP_M':8},num_warps=nw,num_stages=ns)
    for sp in (False,True):
        with la._fwd_launcher.forcing(cfg):
            rec('linear', bm,bn,bk,nw,ns,'save_pre',sp, '%.3f'%bench(lambda: la._launch_fwd(x,w,b,'gelu_tanh',sp)))
    for sh in (False,True):
        with glu._fwd_launcher.forcing(cfg):
            rec('glu', bm,bn,bk,nw,ns,'store_h',sh, '%.3f'%bench(lambda: glu.glu_forward_impl(x, wu, wg, None, None, "silu", sh)))
xg=x.clone().requires_grad_(); wgg=wg.clone().requires_grad_(); wug=wu.clone().requires_grad_(); wdg=wd.clone().requires_grad_()
gy=torch.randn(m,k,device='cuda',dtype=dt)
def step(rc):
    y=fusedmlp.swiglu(xg,wgg,wug,wdg,recompute=rc); y.backward(gy)
rec('swiglu step default recompute F', '%.3f'%bench(lambda: step(False)))
rec('swiglu step default recompute T', '%.3f'%bench(lambda: step(True)))
for (bn,bk,nw,ns) in [(64,32,8,3),(32,32,4,3),(64,16,8,3),(32,16,4,3),(64,32,4,3),(128,16,8,3),(32,32,8,3)]:
    cfg=triton.Config({'BLOCK_N':bn,'BLOCK_K':bk,'GROUP_M':8},num_warps=nw,num_stages=ns)
    with glu._bwd_launcher.forcing(cfg):
        for rc in (False,True):
            rec('swiglu step dh', bn,bk,nw,ns,'recompute',rc,'%.3f'%bench(lambda: step(rc)))
json.dump(res, open(os.environ.get('OUT','.')+'/sweep_ieee.json','w'))
