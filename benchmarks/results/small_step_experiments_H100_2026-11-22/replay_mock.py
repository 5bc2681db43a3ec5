import time, torch, triton.language as tl
from types import SimpleNamespace
import fusedmlp.kernels.launch as L
import triton.backends.nvidia.driver as driver
from triton.runtime.jit import JITFunction
L.FAST_LAUNCH = True
torch.cuda.current_device = lambda: 0
torch._C._cuda_getCurrentRawStream = lambda d: 0
driver.make_tensordesc_arg = lambda desc, meta: [object(), *desc.shape, *desc.strides]
def k(x_desc, w1_desc, w2_desc, y_desc, h1_desc, h2_desc, b1_ptr, b2_ptr, M, OUT, K, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_H: tl.constexpr,
      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr, COOPERATIVE: tl.constexpr):
    pass
def wrapper(launcher, tensordesc_indices, tensordesc_meta):
    def inner(*args): return launcher, tensordesc_indices, tensordesc_meta
    return inner
class C:
    packed_metadata = "p"; function = "f"
    def __init__(self):
        self.run = SimpleNamespace(launch=wrapper(lambda *a: None, set(range(6)), [{"block_size": [64, 64]}] * 6),
                                   global_scratch_size=0, profile_scratch_size=0, launch_cooperative_grid=False, launch_pdl=False)
fast = L.FastLaunch(JITFunction(k))
c = C()
run = lambda: (c, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_STAGES": 4, "COOPERATIVE": False})
ts = [torch.empty(64, 64) for _ in range(8)]
kw = dict(x_desc=ts[0], w1_desc=ts[1], w2_desc=ts[2], y_desc=ts[3], h1_desc=ts[4], h2_desc=ts[5], b1_ptr=ts[6], b2_ptr=ts[7], M=16384, OUT=1792, K=512, ACT="silu", HAS_BIAS=False, STORE_H=True)
for rep in (True, False):
    L.REPLAY = rep
    for _ in range(3): fast.call(run, (132,), (), kw)
    n = 20000; t = time.perf_counter()
    for _ in range(n): fast.call(run, (132,), (), kw)
    print(rep, f"{(time.perf_counter()-t)/n*1e6:.2f} us", fast.replayed)
