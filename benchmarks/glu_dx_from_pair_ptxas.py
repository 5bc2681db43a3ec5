"""Compile benchmarks/glu_dx_from_pair.py's kernel for sm_90a without a GPU and show ptxas's verdict.

    python benchmarks/glu_dx_from_pair_ptxas.py [CONFIG [WRITE_DH]]     (CONFIG of its CONFIGS; WRITE_DH 1 or 0)

Builds the kernel's Gluon source into PTX with this machine's Triton (``triton.compile`` with an
explicit target: no driver needed) and runs the ptxas bundled with Triton (``ptxas-blackwell``
where present: the plain one may be too old for the PTX version a newer Triton writes) with
``-v``, printing the lines about serialised MMAs, registers and spills. This is how
benchmarks/NOTES.md, "GEGLU's store dx with dh formed on the tile", checked the kernel forms
between GPU runs; the GPU's own Triton (3.6 there) may generate different PTX.
"""
import importlib.util
import os
import subprocess
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type

from fusedmlp.kernels.launch import gluon_descriptors

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("glu_dx_from_pair", os.path.join(HERE, "glu_dx_from_pair.py"))
experiment = importlib.util.module_from_spec(spec)
spec.loader.exec_module(experiment)


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else next(iter(experiment.CONFIGS))
    write_dh = sys.argv[2] != "0" if len(sys.argv) > 2 else True
    c = experiment.CONFIGS[name]
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    m, d, out = 8192, 1024, 4096
    pair = torch.empty(m, 2 * out, dtype=torch.bfloat16)
    descs = gluon_descriptors(
        dict(a_desc=pair[:, :out], b_desc=pair[:, out:], gy_desc=torch.empty(m, out, dtype=torch.bfloat16),
             w_desc=torch.empty(2 * out, d, dtype=torch.bfloat16), dx_desc=torch.empty(m, d, dtype=torch.bfloat16),
             dh1_desc=pair[:, :out], dh2_desc=pair[:, out:]),
        {"a_desc": (bm, bk), "b_desc": (bm, bk), "gy_desc": (bm, bk), "w_desc": (bk, bn), "dx_desc": (bm, bn),
         "dh1_desc": (bm, bk), "dh2_desc": (bm, bk)})
    fn = experiment.glu_dx_from_pair_kernel
    args = dict(descs, M=m, N=d, OUT=out)
    consts = dict(GROUP_M=c["GROUP_M"], STAGES=c["STAGES"], WRITE_DH=write_dh, WARPS=c["WARPS"], LOADER_REGS=40)
    signature = {p: "constexpr" if p in consts else (mangle_type(args[p]) if not isinstance(args[p], int) else "i32")
                 for p in fn.arg_names}
    source = GluonASTSource(fn, signature, {(fn.arg_names.index(k),): v for k, v in consts.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": c["WARPS"]})
    ptx = f"/tmp/glu_dx_from_pair_{name}.ptx"
    with open(ptx, "w") as f:
        f.write(kernel.asm["ptx"])
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    ptxas = next(p for p in (os.path.join(bin_dir, "ptxas-blackwell"), os.path.join(bin_dir, "ptxas"))
                 if os.path.exists(p))
    result = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx, "-o", ptx + ".cubin"], capture_output=True, text=True)
    print(name, "WRITE_DH" if write_dh else "no dh", "ptxas exit", result.returncode)
    for line in result.stderr.splitlines():
        if any(word in line for word in ("serialized", "Used", "spill", "rror")):
            print("  " + line.strip())


if __name__ == "__main__":
    main()
