"""Per-thread stack (ptxas spills) of the recompute-dpre ping-pong kernel at both tile widths,
for gelu_tanh, silu and gelu, with and without bias and db sums, compiled by the installed
Triton for sm_90a (tests/helpers.py's child compile). Run from the repository root."""
import json, os, subprocess, sys

sys.path.insert(0, "tests")
from helpers import _COMPILE_PINGPONG  # noqa: E402

env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
out = {}
for config in ("LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG", "LINEAR_DPRE_RECOMPUTE_CONFIG"):
    # the helper alternates the STORE_ flags by position: these orders give each activation both
    for order in (["gelu_tanh", "silu", "gelu"], ["silu", "gelu", "gelu_tanh"], ["gelu", "gelu_tanh"]):
        run = subprocess.run([sys.executable, "-c", _COMPILE_PINGPONG, "linear_act",
                              "linear_act_dpre_recompute_pingpong_kernel", config, *order],
                             env=env, capture_output=True, text=True)
        facts = json.loads(run.stdout.strip().splitlines()[-1])
        for i, act in enumerate(order):
            for bias in ("bias", "no bias"):
                out[f"{config} {act} {bias} store_db={bool(i % 2)}"] = facts[f"{act}/{bias}"]["stack"]
for key, stack in out.items():
    print(f"{stack:6d}  {key}")
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "dpre_recompute_stack.json"), "w"), indent=1)
