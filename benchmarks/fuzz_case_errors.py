"""One random case of tests/test_fuzz.py, its errors drawn many times: fused and eager PyTorch in
the case's dtype, each against float64 on the same inputs, over DRAWS roundings of the inputs
(``perturbed``). Tells a fused op that loses precision (its errors above eager's draw after draw)
from a case whose outputs are ill-conditioned (both sets spread alike).

    python benchmarks/fuzz_case_errors.py TEST CASE SEED [DRAWS]    e.g. test_mlp 2 353572275 16

Needs the GPU's draw of the case (on a CPU machine the fuzz tests draw smaller shapes).
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import torch  # noqa: E402

import test_fuzz  # noqa: E402
from helpers import rel_err  # noqa: E402


def main():
    test, case, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    draws = int(sys.argv[4]) if len(sys.argv) > 4 else 16

    def errors(fused, reference, masters, g64, dtype, rng, what, replicas=4):
        wants = [t is not None and t.requires_grad for t in masters]
        names = ["y"] + [f"grad {i}" for i, w in enumerate(wants) if w]

        def run(fn, tensors, dt):
            leaves = [None if t is None else t.detach().to(dt).requires_grad_(w) for t, w in zip(tensors, wants)]
            y = fn(*leaves)
            wrt = [t for t in leaves if t is not None and t.requires_grad]
            return [y, *(torch.autograd.grad(y, wrt, g64.to(dt)) if wrt else ())]

        print(what, str(dtype))
        table = {name: ([], []) for name in names}
        for draw in range(draws):
            inputs = test_fuzz.perturbed(masters, dtype, draw)
            want = run(reference, inputs, torch.float64)
            for kind, fn in ((0, fused), (1, reference)):
                for name, out, ref in zip(names, run(fn, inputs, dtype), want):
                    table[name][kind].append(rel_err(out, ref))
        print(f"{'output':8s} {'fused median':>12s} {'fused max':>10s} {'eager median':>12s} {'eager max':>10s}"
              f" {'fused > eager':>13s}")
        for name, (fused_errs, eager_errs) in table.items():
            above = sum(f > e for f, e in zip(fused_errs, eager_errs))
            print(f"{name:8s} {statistics.median(fused_errs):12.3e} {max(fused_errs):10.3e} "
                  f"{statistics.median(eager_errs):12.3e} {max(eager_errs):10.3e} {above:9d}/{draws}")

    test_fuzz.check_case = errors
    torch.manual_seed(seed)
    getattr(test_fuzz, test)(case, seed)


if __name__ == "__main__":
    main()
