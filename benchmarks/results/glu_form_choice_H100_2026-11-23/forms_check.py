"""Does the GLU forward's timed choice of form pick the fastest one? For each shape, y alone
and with h: the form the first call chose and its own ms per form, then each form timed by the
harness's median_ms (do_bench) with the form forced. Run on a GPU from the repository root:
PYTHONPATH=src python3 benchmarks/results/glu_form_choice_H100_2026-11-23/forms_check.py
(writes forms_check.json to $OUT, or the current folder)."""
import json, os, torch
import fusedmlp.kernels.configs as configs
configs.AUTOTUNE = True
import fusedmlp.ops.glu as glu
from fusedmlp.bench.harness import median_ms
shapes = [(4096,1024,4096,True,"gelu_tanh"),(8192,1024,4096,True,"gelu_tanh"),(32768,1024,4096,True,"gelu_tanh"),
          (65536,1024,4096,True,"gelu_tanh"),(16384,2048,8192,True,"gelu_tanh"),(8192,4096,16384,True,"gelu_tanh"),
          (16384,4096,16384,True,"gelu_tanh"),(8192,8192,32768,True,"gelu_tanh"),
          (16384,512,1792,False,"silu"),(16384,4096,14336,False,"silu")]
rows=[]
for m,k,out,bias,act in shapes:
    x=torch.randn(m,k,device="cuda",dtype=torch.bfloat16)
    w1=torch.randn(out,k,device="cuda",dtype=torch.bfloat16)/k**0.5
    w2=torch.randn(out,k,device="cuda",dtype=torch.bfloat16)/k**0.5
    b1=torch.randn(out,device="cuda",dtype=torch.bfloat16) if bias else None
    b2=torch.randn(out,device="cuda",dtype=torch.bfloat16) if bias else None
    for store_h in (False,True):
        fn=lambda: glu.glu_forward_impl(x,w1,w2,b1,b2,act,store_h)
        fn()  # chooser
        key=[kk for kk in glu.glu_forward_form.times if kk[2]==1<<(m-1).bit_length() and kk[3]==out and kk[4]==k and kk[7]==store_h][0]
        row=dict(m=m,k=k,out=out,store_h=store_h,chosen=glu.glu_forward_form.chosen[key],
                 chooser={n:round(v,4) for n,v in glu.glu_forward_form.times[key].items()})
        bench={}
        for form in glu.GLU_FORWARD_FORMS:
            with glu.glu_forward_form.forcing(form):
                bench[form]=round(median_ms(fn),4)
        row["do_bench"]=bench
        row["best"]=min(bench,key=bench.get)
        row["loss_pct"]=round(100*(bench[row["chosen"]]/bench[row["best"]]-1),1)
        print(json.dumps(row),flush=True); rows.append(row)
    del x,w1,w2,b1,b2
os.makedirs(os.environ.get("OUT","."),exist_ok=True)
json.dump(rows,open(os.path.join(os.environ.get("OUT","."),"forms_check.json"),"w"),indent=1)
