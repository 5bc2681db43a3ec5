"""The GPU's SM clock, board power and temperature while a benchmark times something.

A large step's time follows the SM clock, and under sustained load an H100 or H200 sits at its
board power cap with the clock 20-30% below its 1980 MHz maximum (measured here), lower as it warms
(benchmarks/NOTES.md: "The linear forward at K = 512 under the power cap", "SwiGLU's separate
weights against the packed weight"). Two impls timed minutes apart can then differ by more than
their kernels do. ``sampling()`` records, in a background thread, what NVML reports every
``INTERVAL_S`` during a timing, so that each figure carries the clock it was measured at.

NVML is read through ``ctypes`` from the driver's ``libnvidia-ml.so.1`` (no Python package
needed). Where it cannot be loaded (no NVIDIA driver: the CPU machines) the sampler records
nothing and the figures go without clocks.
"""

from __future__ import annotations

import ctypes
import statistics
import threading

import torch

INTERVAL_S = 0.02  # a sample every 20 ms: a 0.5 s timing gets ~25 (NVML's calls release the GIL)
KEYS = ("sm_mhz", "sm_mhz_min", "power_w", "temp_c")  # a summary's keys
_NVML_CLOCK_SM = 1
_NVML_TEMPERATURE_GPU = 0
_nvml = None  # the loaded library, False once loading failed


def _library():
    global _nvml
    if _nvml is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _nvml = lib if lib.nvmlInit_v2() == 0 else False
        except (OSError, AttributeError):
            _nvml = False
    return _nvml or None


def _handle(device: int):
    """NVML's handle of CUDA device ``device`` (NVML numbers devices by PCI order, CUDA may not,
    and CUDA_VISIBLE_DEVICES renumbers them: PyTorch's mapping, where it has one)."""
    lib = _library()
    if lib is None:
        return None
    to_nvml = getattr(torch.cuda, "_get_nvml_device_index", None)
    try:
        index = to_nvml(device) if to_nvml is not None else device
    except Exception:  # an unusual CUDA_VISIBLE_DEVICES (UUIDs PyTorch cannot map): no clocks
        return None
    handle = ctypes.c_void_p()
    return handle if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) == 0 else None


def _read(lib, handle) -> tuple | None:
    """(SM MHz, board W, GPU C) now, or None where NVML refuses."""
    clock, milliwatts, celsius = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    if (lib.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_SM, ctypes.byref(clock))
            or lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts))
            or lib.nvmlDeviceGetTemperature(handle, _NVML_TEMPERATURE_GPU, ctypes.byref(celsius))):
        return None
    return clock.value, milliwatts.value / 1000.0, celsius.value


def device_limits(device: int | None = None) -> dict:
    """The GPU's maximum SM clock and enforced power limit (for a run's environment), or {}."""
    lib = _library()
    handle = _handle(torch.cuda.current_device() if device is None else device) if lib is not None else None
    if handle is None:
        return {}
    limits = {}
    clock, milliwatts = ctypes.c_uint(), ctypes.c_uint()
    if lib.nvmlDeviceGetMaxClockInfo(handle, _NVML_CLOCK_SM, ctypes.byref(clock)) == 0:
        limits["sm_max_mhz"] = clock.value
    if lib.nvmlDeviceGetEnforcedPowerLimit(handle, ctypes.byref(milliwatts)) == 0:
        limits["power_limit_w"] = milliwatts.value / 1000.0
    return limits


class Sampler:
    """Samples ``read() -> (SM MHz, W, C) | None`` every ``interval`` seconds between ``start``
    and ``stop`` (one sample at each end too, so a short timing has two); ``summary()`` gives
    the SM clock's median and minimum, the power's median and the highest temperature."""

    def __init__(self, read, interval: float = INTERVAL_S):
        self.read, self.interval = read, interval
        self.samples: list[tuple] = []
        self._stop = threading.Event()
        self._thread = None

    def _sample(self):
        sample = self.read()
        if sample is not None:
            self.samples.append(sample)

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> "Sampler":
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="fusedmlp-gpu-clock", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def summary(self) -> dict:
        if not self.samples:
            return {}
        clocks, watts, celsius = zip(*self.samples)
        return {"sm_mhz": statistics.median(clocks), "sm_mhz_min": min(clocks),
                "power_w": round(statistics.median(watts), 1), "temp_c": max(celsius)}


def merge(summaries: list[dict]) -> dict:
    """One summary of several timings' (a measurement's rounds): the median of their clock
    medians, the lowest clock, the median power, the highest temperature; {} for none."""
    summaries = [s for s in summaries if s]
    if not summaries:
        return {}
    return {"sm_mhz": statistics.median(s["sm_mhz"] for s in summaries),
            "sm_mhz_min": min(s["sm_mhz_min"] for s in summaries),
            "power_w": round(statistics.median(s["power_w"] for s in summaries), 1),
            "temp_c": max(s["temp_c"] for s in summaries)}


def run_line(summaries: list[dict], limits: dict) -> str | None:
    """A sentence on the clocks of a whole run (its measurements' summaries), or None."""
    summaries = [s for s in summaries if s]
    if not summaries:
        return None
    medians = [s["sm_mhz"] for s in summaries]
    peak_power = max(s["power_w"] for s in summaries)
    of_max = f" of {limits['sm_max_mhz']}" if "sm_max_mhz" in limits else ""
    of_limit = f" (limit {limits['power_limit_w']:.0f} W)" if "power_limit_w" in limits else ""
    return (f"GPU during the timings: SM clock medians {min(medians):.0f}-{max(medians):.0f} MHz{of_max}, lowest "
            f"sample {min(s['sm_mhz_min'] for s in summaries):.0f}; board power medians up to {peak_power:.0f} W"
            f"{of_limit}; up to {max(s['temp_c'] for s in summaries)} C (per measurement: sm_mhz, power_w, "
            f"temp_c in the JSON and CSV)")


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    @staticmethod
    def summary() -> dict:
        return {}


def sampling(device: int | None = None):
    """A context that samples the current (or the given) CUDA device while it is open; its
    ``summary()`` afterwards is {} where NVML is not available."""
    if not torch.cuda.is_available():
        return _Nothing()
    handle = _handle(torch.cuda.current_device() if device is None else device)
    if handle is None:
        return _Nothing()
    lib = _library()
    return Sampler(lambda: _read(lib, handle))
