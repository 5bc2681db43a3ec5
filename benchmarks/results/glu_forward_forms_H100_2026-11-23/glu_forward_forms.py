import torch
import fusedmlp.ops._common as common, fusedmlp.ops.glu as glu
from triton.testing import do_bench
torch.manual_seed(0)
def g(f):
    s=torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s): f(); f()
    torch.cuda.current_stream().wait_stream(s)
    gr=torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr): f()
    return do_bench(lambda: gr.replay(), warmup=50, rep=300)
PP, COOP = glu.GLU_PINGPONG_CONFIG, glu.GLU_COOPERATIVE_CONFIG
for (m,k,n,bias,act) in [(32768,1024,4096,True,'gelu_tanh'),(65536,1024,4096,True,'gelu_tanh'),(16384,4096,16384,True,'gelu_tanh'),(8192,8192,32768,True,'gelu_tanh'),(16384,512,1792,False,'silu'),(16384,4096,14336,False,'silu')]:
    x=torch.randn(m,k,device='cuda',dtype=torch.bfloat16); w1=torch.randn(n,k,device='cuda',dtype=torch.bfloat16)*0.02; w2=torch.randn(n,k,device='cuda',dtype=torch.bfloat16)*0.02
    b1=torch.randn(n,device='cuda',dtype=torch.bfloat16) if bias else None; b2=torch.randn(n,device='cuda',dtype=torch.bfloat16) if bias else None
    wcat=torch.cat([w1,w2])
    row=['%dx%d->%d'%(m,k,n),'cublas %.3f'%g(lambda: x@wcat.t())]
    for sh in (False,True):
        for name,pp,cfg_alt,mink in (('alt',True,PP,10**9),('coop',True,COOP,0),('triton',False,PP,10**9)):
            common.PINGPONG=pp; glu.GLU_PINGPONG_CONFIG=cfg_alt; glu.GLU_COOPERATIVE_MIN_K=mink
            try: t='%.3f'%g(lambda: glu.glu_forward_impl(x,w1,w2,b1,b2,act,sh))
            except Exception as e: t='ERR '+type(e).__name__
            row.append('%s%s %s'%(name,'+h' if sh else '',t))
    common.PINGPONG=True; glu.GLU_PINGPONG_CONFIG=PP; glu.GLU_COOPERATIVE_MIN_K=2048
    print(' | '.join(row), flush=True)
