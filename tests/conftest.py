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
def _fresh_seed(request):
    # Fresh random inputs on every run, but reproducible from the printed seed on failure.
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield seed
