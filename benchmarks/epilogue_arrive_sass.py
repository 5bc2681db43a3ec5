"""How many epilogue instructions ptxas places between a ping-pong consumer's last MMA wait and
its release of the ring's last stage (sm_90a SASS; no GPU needed).

    PYTHONPATH=src python3 benchmarks/epilogue_arrive_sass.py [ACT ...]   (default: identity gelu_tanh)

Compiles linear_act's ping-pong forward (``LINEAR_PINGPONG_CONFIG``, with a bias) for sm_90a
with the installed Triton, disassembles it with the cuobjdump Triton ships, and for each
``WARPGROUP.DEPBAR.LE gsb0, 0x0`` (a wait that retires every MMA in flight: the main loop's last)
counts the instructions up to the next ``SYNCS.ARRIVE`` (an mbarrier arrive: the stage's
release) and the MUFU among them. benchmarks/NOTES.md, "The linear forward at K = 512 under the
power cap", found about 150 of gelu_tanh's instructions there (about 20 for the identity) on
Triton 3.6: the loader refills that stage later.
"""

import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

import fusedmlp.kernels.configs as configs
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel as kernel


def descriptor(block):
    base = torch.empty(256, 256, dtype=torch.bfloat16)
    return mangle_type(TensorDescriptor.from_tensor(base, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)))


def sass(act: str) -> str:
    config = configs.LINEAR_PINGPONG_CONFIG
    blocks = {"x_desc": ["BLOCK_M", "BLOCK_K"], "w_desc": ["BLOCK_N", "BLOCK_K"]}
    signature, constants = {}, {}
    for p in kernel.params:
        if p.is_constexpr:
            constants[p.name] = (act if p.name == "ACT" else config[p.name] if p.name in config
                                 else p.name == "HAS_BIAS")
            signature[p.name] = "constexpr"
        elif p.name.endswith("_desc"):
            signature[p.name] = descriptor([config[k] for k in blocks.get(p.name, ["BLOCK_M", "BLOCK_N"])])
        else:
            signature[p.name] = "*bf16" if p.name.endswith("_ptr") else "i32"
    positions = {(kernel.arg_names.index(k),): v for k, v in constants.items()}
    compiled = triton.compile(GluonASTSource(kernel, signature, constexprs=positions), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": config["num_warps"], "maxnreg": config["maxnreg"]})
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        return subprocess.run([cuobjdump, "-sass", cubin.name], capture_output=True, text=True, check=True).stdout


def main():
    for act in sys.argv[1:] or ["identity", "gelu_tanh"]:
        lines = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", sass(act))]
        spans = []
        for i, line in enumerate(lines):
            if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
                j = next((j for j in range(i + 1, len(lines)) if "SYNCS.ARRIVE" in lines[j]), None)
                if j is not None:
                    between = lines[i + 1:j]
                    spans.append((len(between), sum("MUFU" in op for op in between)))
        print(f"triton {triton.__version__}, {act} with a bias: (instructions, MUFU) from each full MMA wait "
              f"to the next arrive: {spans}", flush=True)


if __name__ == "__main__":
    main()
