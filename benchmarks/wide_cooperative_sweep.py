"""The linear, GLU and LoRA forwards with 128 x 256 cooperative tiles (each consumer 64 rows x 256
columns, one m64n256 MMA per K step) against the library's forms and cuBLAS.

Why: both consumers of the cooperative form share each tile; with 2 x 128 rows of 128 columns
each consumer issues two m64n128 MMAs per K step, which read the weight tile from shared
memory twice. With 2 x 64 rows of 256 columns one MMA per K step reads x's 64 rows and the
256 weight rows once: 17% less shared-memory traffic per multiply-add, the same L2 traffic
per output (a tile reads 128 + 256 rows of K for 128 x 256 outputs, as 256 + 128 for 256 x 128).

For each shape (bf16; a bias except at SwiGLU's shapes): every form's output checked against
the fp32 product of the same inputs, then each form and the cuBLAS GEMM(s) timed with do_bench
in ROUNDS rounds, every other round in reverse order (harness.interleaved_ms); medians. The
candidate forms are added to the ops' form tables in this process only. LoRA at K = 4096
(where the library runs its Triton kernel, ``lora_forward_impl``): xs from cuBLAS, then its
ping-pong kernel in each form (the rank-r product as the main loop's last K steps), each
timed with its xs; the floor is the base GEMM x @ W.T. Run on a GPU from the repository root:
    PYTHONPATH=src python3 benchmarks/wide_cooperative_sweep.py [linear|glu|lora ...]
(writes wide_cooperative_sweep.json to $OUT, or the current folder)."""
import json
import os
import statistics
import sys

import torch

import fusedmlp.kernels.configs as configs
import fusedmlp.ops.glu as glu_ops
import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.kernels.lora import lora_fwd_pingpong_kernel
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.bench.harness import interleaved_ms

ROUNDS = int(os.environ.get("ROUNDS", "2"))
LINEAR_CANDIDATES = {
    "wide": dict(configs.LINEAR_COOPERATIVE_CONFIG, BLOCK_M=64, BLOCK_N=256),
    "wide_g16": dict(configs.LINEAR_COOPERATIVE_CONFIG, BLOCK_M=64, BLOCK_N=256, GROUP_M=16),
}
GLU_CANDIDATES = {
    "wide": dict(configs.GLU_COOPERATIVE_CONFIG, BLOCK_M=64, BLOCK_N=128),
    "wide_s3": dict(configs.GLU_COOPERATIVE_CONFIG, BLOCK_M=64, BLOCK_N=128, STAGES=3),
}
LINEAR_SHAPES = [  # M, K, N, activation, pre stored
    (16384, 4096, 14336, "gelu_tanh", False), (16384, 4096, 14336, "identity", False),
    (16384, 4096, 14336, "gelu_tanh", True), (8192, 4096, 4096, "gelu_tanh", False),
    (32768, 4096, 4096, "gelu_tanh", False), (16384, 2048, 8192, "gelu_tanh", False),
    (8192, 1024, 4096, "gelu_tanh", False), (16384, 512, 1792, "gelu_tanh", False),
]
LORA_SHAPES = [(8192, 4096, 4096, 16), (32768, 4096, 4096, 16), (32768, 4096, 4096, 64)]  # M, K, N, r
GLU_SHAPES = [  # M, K, OUT, activation, bias, h stored (GEGLU: d -> 8d over N rows; SwiGLU's LLM shape)
    (16384, 4096, 16384, "gelu_tanh", True, False), (8192, 8192, 32768, "gelu_tanh", True, False),
    (8192, 4096, 16384, "gelu_tanh", True, False), (16384, 2048, 8192, "gelu_tanh", True, False),
    (32768, 1024, 4096, "gelu_tanh", True, False), (16384, 4096, 14336, "silu", False, False),
    (16384, 4096, 14336, "silu", False, True),
]


def timed_row(fields: dict, errors: dict, calls: dict) -> dict:
    """The row of one shape: every form (and cuBLAS) timed in ROUNDS interleaved rounds."""
    times = interleaved_ms(calls, ROUNDS)
    medians = {name: statistics.median(v) for name, v in times.items()}
    row = dict(fields, rel_err=errors, ms_rounds=times, median_ms=medians,
               ratio_to_cublas={name: round(v / medians["cublas"], 4) for name, v in medians.items()})
    print(json.dumps(row), flush=True)
    torch.cuda.empty_cache()
    return row


def rel_err(a, ref):
    return ((a.float() - ref).norm() / ref.norm()).item()


def _act(pre, act):
    from fusedmlp.ops.activations import activation_reference
    return activation_reference(pre, act)


def linear_rows():
    forms = dict(linear_ops.LINEAR_FORWARD_PINGPONG_FORMS, **LINEAR_CANDIDATES)
    linear_ops.LINEAR_FORWARD_PINGPONG_FORMS.update(LINEAR_CANDIDATES)
    linear_ops.LINEAR_FORWARD_FORMS = ("tma", *forms)  # the names a forced form must be among
    rows = []
    for m, k, n, act, store_pre in LINEAR_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        pre_ref = torch.addmm(b.float(), x.float(), w.float().t())
        y_ref = _act(pre_ref, act)
        errors, calls = {}, {}
        for form in ("tma", *forms):
            def call(form=form):
                with linear_ops.linear_forward_form.forcing(form):
                    return linear_ops.linear_act_forward_impl(x, w, b, act, store_pre)
            try:
                y, pre = call()
            except Exception as error:  # a form that does not compile or launch: reported, not timed
                errors[form] = repr(error)[:300]
                continue
            errors[form] = [round(rel_err(y, y_ref), 6)] + ([round(rel_err(pre, pre_ref), 6)] if store_pre else [])
            calls[form] = call
        calls["cublas"] = lambda: torch.mm(x, w.t())
        rows.append(timed_row(dict(op="linear", m=m, k=k, n=n, activation=act, store_pre=store_pre), errors, calls))
    return rows


def glu_rows():
    forms = dict(glu_ops.GLU_FORWARD_PINGPONG_FORMS, **GLU_CANDIDATES)
    glu_ops.GLU_FORWARD_PINGPONG_FORMS.update(GLU_CANDIDATES)
    glu_ops.GLU_FORWARD_FORMS = ("tma", *forms)
    rows = []
    for m, k, out, act, bias, store_h in GLU_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w1 = torch.randn(out, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        w2 = torch.randn(out, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        b1 = torch.randn(out, device="cuda", dtype=torch.bfloat16) if bias else None
        b2 = torch.randn(out, device="cuda", dtype=torch.bfloat16) if bias else None
        a1 = x.float() @ w1.float().t()
        a2 = x.float() @ w2.float().t()
        if bias:
            a1 += b1.float()
            a2 += b2.float()
        y_ref = a1 * _act(a2, act)
        del a1, a2  # (fp32 products: 2-4 GiB at the largest shapes)
        errors, calls = {}, {}
        for form in ("tma", *forms):
            def call(form=form):
                with glu_ops.glu_forward_form.forcing(form):
                    return glu_ops._launch_fwd(x, w1, w2, b1, b2, act, store_h)
            try:
                y, _ = call()
            except Exception as error:
                errors[form] = repr(error)[:300]
                continue
            errors[form] = round(rel_err(y, y_ref), 6)
            calls[form] = call
        w_cat = torch.cat([w1, w2])
        calls["cublas"] = lambda: torch.mm(x, w_cat.t())
        rows.append(timed_row(dict(op="glu", m=m, k=k, out=out, activation=act, bias=bias, store_h=store_h),
                              errors, calls))
    return rows


def lora_rows():
    forms = {"alternating": configs.LINEAR_PINGPONG_CONFIG, "cooperative": configs.LINEAR_COOPERATIVE_CONFIG,
             **LINEAR_CANDIDATES}
    scale = 2.0
    rows = []
    for m, k, n, r in LORA_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        lora_a = torch.randn(r, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        lora_b = torch.randn(n, r, device="cuda", dtype=torch.bfloat16) / r**0.5
        y_ref = (torch.addmm(b.float(), x.float(), w.float().t())
                 + scale * (x.float() @ lora_a.float().t()) @ lora_b.float().t())
        calls = {"library": lambda: lora_ops.lora_forward_impl(x, w, b, lora_a, lora_b, None, None, scale, "identity",
                                                                False)[0]}
        for form, config in forms.items():
            def call(config=config):
                xs = lora_ops._scaled_rank_product(x, lora_a, scale)
                y = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
                launch_pingpong(lora_fwd_pingpong_kernel, config, m, n, num_sms(x), {"x_desc": x, "xs_desc": xs},
                                {"w_desc": w, "lora_b_desc": lora_b}, {"y_desc": y, "pre_desc": y}, b_ptr=b,
                                M=m, N=n, K=k, R=r, ACT="identity", HAS_BIAS=True, STORE_PRE=False)
                return y
            calls[form] = call
        errors = {}
        for form, call in list(calls.items()):
            try:
                errors[form] = round(rel_err(call(), y_ref), 6)
            except Exception as error:
                errors[form] = repr(error)[:300]
                del calls[form]
        calls["cublas"] = lambda: torch.mm(x, w.t())
        rows.append(timed_row(dict(op="lora", m=m, k=k, n=n, r=r, activation="identity"), errors, calls))
    return rows


if __name__ == "__main__":
    configs.AUTOTUNE = True
    which = sys.argv[1:] or ["linear", "glu", "lora"]
    rows = [row for name, run in (("linear", linear_rows), ("glu", glu_rows), ("lora", lora_rows)) if name in which
            for row in run()]
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "wide_cooperative_sweep.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": ROUNDS,
                   "rows": rows}, f, indent=1)
    for row in rows:  # time / cuBLAS's, per form
        shape = f"{row['m']}x{row['k']}->{row.get('n', row.get('out'))} {row['activation'][:4]}"
        shape += " +stored" if row.get("store_pre") or row.get("store_h") else ""
        print(f"{row['op']:6} {shape:32} " + " ".join(f"{n}={v:.3f}" for n, v in row["ratio_to_cublas"].items()))
