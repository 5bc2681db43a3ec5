"""The three failing seeds of fuzz_H100_2026-11-24/fuzz_mlp_failures.log through tests/test_fuzz.py's
test_mlp as it stands, twice each (the first call compiles), with the time of each."""
import os, sys, time
os.environ.setdefault("FUSEDMLP_AUTOTUNE", "0")
sys.path.insert(0, "tests")
import torch, test_fuzz
for case, seed in [(10, 1717869860), (3, 3866961794), (9, 1025641800)]:
    for attempt in range(2):
        torch.manual_seed(seed)
        t0 = time.time()
        try:
            test_fuzz.test_mlp(case, seed); status = "PASSED"
        except BaseException as e:
            status = f"{type(e).__name__}: {str(e)[:200]}"
        torch.cuda.synchronize()
        print(f"seed {seed} run {attempt}: {status} ({time.time() - t0:.1f} s)", flush=True)
