"""The backward's dpre with save_preact=False (gelu_tanh, bias; bf16): the recompute forward
(writes pre) + the dpre stream (reads it back), against the ping-pong kernel that recomputes
pre on the tile, at two tile widths (configs.py: 64 and 128 columns); the bare GEMM x @ W.T
for scale. ms per launch as the library's form timer measures them (L2 flushed, blocks of
launches, alternating rounds)."""
import json, os
import torch
import fusedmlp.ops.linear_act as ops
from fusedmlp.kernels.configs import LINEAR_DPRE_RECOMPUTE_CONFIG, LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG
from fusedmlp.ops._common import _cuda_times

torch.manual_seed(0)
dt = torch.bfloat16
chosen_config = ops.dpre_recompute_config
out = {}
for m, k, n in [(16384, 512, 1792), (16384, 1024, 4096), (16384, 4096, 14336)]:
    x = torch.randn(m, k, device="cuda", dtype=dt)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dt)
    b = torch.randn(n, device="cuda", dtype=dt)
    g = torch.randn(m, n, device="cuda", dtype=dt)

    def two_kernels():
        pre = ops.linear_act_forward_impl(x, w, b, "identity", False)[0]
        return ops._launch_backward(g, pre, w, "gelu_tanh", False, True, True, False)[1:]

    def tile(config):
        def run():
            ops.dpre_recompute_config = lambda k: config
            try:
                return ops.recompute_dpre(x, w, b, g, "gelu_tanh", True)
            finally:
                ops.dpre_recompute_config = chosen_config
        return run

    forms = {"two_kernels": two_kernels, "tile_128x64": tile(LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG),
             "tile_128x128": tile(LINEAR_DPRE_RECOMPUTE_CONFIG),
             "gemm": lambda: torch.mm(x, w.t())}
    ref_dpre, ref_db = two_kernels()
    errors = {}
    for name in ("tile_128x128", "tile_128x64"):
        dpre, db = forms[name]()
        errors[name] = {"dpre_max_abs": (dpre.float() - ref_dpre.float()).abs().max().item(),
                        "db_rel": ((db - ref_db).norm() / ref_db.norm()).item()}
    times = _cuda_times(forms)
    out[f"{m}x{k}->{n}"] = {"ms": times, "diff_vs_two_kernels": errors}
    print(f"{m}x{k}->{n}: " + "  ".join(f"{name} {ms:.4f}" for name, ms in times.items()), errors, flush=True)
path = os.path.join(os.environ.get("OUT", "."), "dpre_recompute_timing.json")
json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": out}, open(path, "w"),
          indent=1)
