"""Writes scratch/hx_<name>.py: copies of lora_fwd_handoff_kernel with one change each (timing experiments)."""
import re, pathlib
src = pathlib.Path("src/fusedmlp/kernels/lora.py").read_text()
start = src.index("@gluon.jit\ndef handoff_tile(")
end = src.index("@triton.jit\ndef lora_merge_kernel(")
body = src[start:end]
header = '''from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from fusedmlp.kernels.activations import activation
from fusedmlp.kernels.pingpong import (_tma_load, _tma_store, accumulator_layout, pingpong_setup, program_tiles,
                                       ring_mma_steps, tile_bias, tma_store_tile)

'''
FENCE = "\\\\n\\\\tfence.proxy.async.global;"
assert FENCE.replace("\\\\", "\\") in body, "fence"
WAIT = "        wait_for_xs(flags_ptr, tile_m)\n"
assert WAIT in body
RANK = "k_tiles, CONSUMER, STAGES, False, True, True, rank_bufs)"
assert RANK in body
loader_old = '''        for kk in range(k_tiles):
            stage = count % STAGES
            mbarrier.wait(empty.index(stage), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(stage)
            if tile_n == 0:'''
assert loader_old in body
tail = '''        stage = count % STAGES
        mbarrier.wait(empty.index(stage), ((count // STAGES) & 1) ^ 1)
        wait_for_xs(flags_ptr, tile_m)
        bar = ready.index(stage)
        mbarrier.expect(bar, stage_bytes)
        _tma_load(xs_desc, [row_start, 0], bar, a_bufs.index(stage))
        _tma_load(lora_b_desc, [col_start, 0], bar, b_bufs.index(stage))
        count += 1
'''
assert tail in body
def tail_first(b):
    # readers: the xs step first (the consumer takes stages in order; which step a stage holds does not matter to it)
    first = tail.replace("        ", "            ")
    b = b.replace(loader_old, "        if tile_n != 0:\n" + first + loader_old)
    return b.replace(tail, "        if tile_n == 0:\n" + tail.replace("        ", "            "))
variants = {
    "E0": body,
    "E1": body.replace(FENCE.replace("\\\\", "\\"), ""),
    "E2": body.replace(WAIT, "        pass\n"),
    "E3": body.replace(WAIT, "        pass\n").replace(RANK, "k_tiles, CONSUMER, STAGES, False, True, False, rank_bufs)"),
    "E4": tail_first(body),
    "E5": tail_first(body).replace(FENCE.replace("\\\\", "\\"), ""),
}
for name, b in variants.items():
    pathlib.Path(f"scratch/hx_{name}.py").write_text(header + b)
print("ok", list(variants))
