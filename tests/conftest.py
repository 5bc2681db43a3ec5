"""Test setup: kernels run on CUDA when there is a GPU, else through the Triton interpreter.

TRITON_INTERPRET must be set before any kernel module is imported, so it is set here, at
collection time, before the test modules import fusedmlp.
"""

import os

# Under pytest-xdist, torch.compile's tests compile in their worker process: with inductor's
# pool of compile processes in every worker, one GPU run had every test done and then hung at
# exit in the pools' shutdown (each waits up to 300 s; 2026-11-27, PyTorch 2.11).
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _interpreter_rounds_bf16_to_nearest() -> None:
    """Make the Triton interpreter convert fp32 to bf16 to nearest (even), as a GPU's cast does.

    The interpreter truncates there (toward zero, up to 2^-7 where a GPU errs by 2^-8), which
    doubles every bf16 rounding a kernel makes, and the random cases (test_fuzz.py) bound a
    kernel's error by twice eager PyTorch's: a 2-row LoRA case, whose dA cancels, was 5.6e-2
    off float64 through the truncating interpreter against a bound of 4.7e-2, and passed with
    this rounding (CI, 2026-11-29, torch.manual_seed(3061732172)). Triton's private
    ``_convert_float`` is wrapped where it exists as called there; elsewhere nothing changes."""
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    convert = getattr(interpreter, "_convert_float", None)
    if convert is None:
        return

    def to_nearest(values, input_dtype, output_dtype, rounding_mode):
        if rounding_mode is None and input_dtype == tl.float32 and output_dtype == tl.bfloat16:
            fp32 = torch.from_numpy(np.array(values, dtype=np.float32))  # a copy, shape kept
            return fp32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return convert(values, input_dtype, output_dtype, rounding_mode)

    interpreter._convert_float = to_nearest


if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    _interpreter_rounds_bf16_to_nearest()
# One config per kernel specialisation instead of autotuning: the suite compiles many
# (dtype x bias x mode) variants; tuning each would take minutes on a GPU.
os.environ.setdefault("FUSEDMLP_AUTOTUNE", "0")
# Nothing read from or filed in the user's tuning cache (kernels/tuning_cache.py); the cache's
# own tests point it at a temporary folder.
os.environ.setdefault("FUSEDMLP_TUNING_CACHE", "0")

import pytest  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def device():
    return DEVICE


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report names the seed its inputs were drawn from (``_fresh_seed``)."""
    report = (yield).get_result()
    if report.failed:
        seeds = [value for key, value in item.user_properties if key == "seed"]
        if seeds:
            report.sections.append(("torch seed", f"torch.manual_seed({seeds[0]}) reproduces this test's inputs"))


@pytest.fixture(autouse=True)
def _no_call_plans_from_other_tests():
    # A call plan (ops/_common.py CallPlans) replays what an earlier call with the same tensors
    # launched; a test that patches the op layer (a form, a grid, a launch recorder) must not
    # get one that another test filed on tensors that happened to lie at the same addresses.
    from fusedmlp.ops._common import clear_call_plans

    clear_call_plans()


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # Fresh random inputs on every run, but reproducible from the printed seed on failure.
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield seed
