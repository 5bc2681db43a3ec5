"""Tuning choices kept on disk, so that a new process launches what an earlier one chose.

On a GPU the first call of each shape times its candidates: the autotuned kernels' configs
(``Launcher``, kernels/configs.py) and the interchangeable forms of a launch (``FastestForm``,
ops/_common.py: the GLU, linear and LoRA forwards). That costs seconds per new shape in every
process (each form is timed in blocks of about 60 ms, three rounds; each config by Triton's
do_bench), and two processes can choose differently, so their results can differ in the last
bits. Here each choice is filed in a JSON file per GPU model and software version, and a
later process takes it from there instead of timing again:

    $FUSEDMLP_TUNING_CACHE (default ``$XDG_CACHE_HOME/fusedmlp``, else ``~/.cache/fusedmlp``)
        tuning_<GPU name>_sm<capability>_triton<version>_torch<version>_<code hash>.json

The code hash covers the library's version and the sources of ``fusedmlp/kernels`` and
``fusedmlp/ops`` (the kernels, their config tables and the rules that offer the forms), so
any change there starts a new file. ``FUSEDMLP_TUNING_CACHE=0`` turns the cache off; so does ``FUSEDMLP_AUTOTUNE=0``, which
times nothing. Deleting the file makes the next process time everything again (a choice made
while another job loaded the GPU stays until then). Several processes may share the file:
each write merges its entries into what is on disk and replaces the file in one rename, so
a reader never sees half a file; two processes tuning the same key at once each file their
own choice, and the last write wins. A file that cannot be read is ignored with a warning,
one that cannot be written turns writing off for the process, with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Optional

import torch
import triton

ENV = "FUSEDMLP_TUNING_CACHE"
_FORMAT = 1  # the file's layout; a file of another layout is ignored
_PACKAGE = Path(__file__).resolve().parent.parent


def cache_dir() -> Optional[Path]:
    """The folder of the tuning files, or None where the cache is off."""
    value = os.environ.get(ENV)
    if value is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "fusedmlp"
    if value.strip() in ("", "0"):
        return None
    return Path(value).expanduser()


@functools.lru_cache(maxsize=None)
def code_hash() -> str:
    """sha256 (first 12 hex digits) of the library's version and the kernels' and the ops'
    sources, in path order."""
    from .. import __version__

    digest = hashlib.sha256(__version__.encode())
    for folder in ("kernels", "ops"):
        for path in sorted((_PACKAGE / folder).glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def device_identity(device: int) -> str:
    """The part of the file name that names the GPU: its model and compute capability."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{_safe(torch.cuda.get_device_name(device))}_sm{major}{minor}"


def _file_name(identity: str) -> str:
    return (f"tuning_{identity}_triton{_safe(triton.__version__)}_torch{_safe(torch.__version__)}"
            f"_{code_hash()}.json")


def encode_key(key) -> Optional[str]:
    """A key (a tuple of numbers, strings, bools, None, dtypes and such tuples) as JSON text;
    None for a key with anything else in it (such a choice is not filed)."""
    def plain(part):
        if isinstance(part, (tuple, list)):
            return [plain(p) for p in part]
        if isinstance(part, torch.dtype):
            return str(part)
        if part is None or isinstance(part, (bool, int, float, str)):
            return part
        raise TypeError(type(part).__name__)

    try:
        return json.dumps(plain(key))
    except (TypeError, ValueError):
        return None


def decode_key(text: str):
    """The tuple ``encode_key`` wrote (lists back to tuples; dtypes stay their names)."""
    def tupled(part):
        return tuple(tupled(p) for p in part) if isinstance(part, list) else part

    return tupled(json.loads(text))


def read_entries(path: Path) -> dict:
    """``{section: {encoded key: value}}`` of a tuning file; empty where there is none, where it
    has another layout, or where it cannot be read (with a warning)."""
    try:
        with open(path) as f:
            payload = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except (OSError, ValueError) as error:
        warnings.warn(f"fusedmlp: ignoring the tuning cache {path} ({error}); shapes will be timed again",
                      stacklevel=3)
        return {}
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT or not isinstance(
            payload.get("entries"), dict):
        return {}
    return {section: dict(entries) for section, entries in payload["entries"].items()
            if isinstance(entries, dict)}


class TuningCache:
    """The entries of the tuning files, per device: ``{section: {encoded key: value}}``.
    ``get`` / ``put`` / ``section`` read the device's file on first use; ``put`` writes."""

    def __init__(self):
        self._tables = {}  # file path -> {section: {key: value}}
        self._lock = threading.Lock()
        self._write_failed = False

    def path(self, device: int) -> Optional[Path]:
        folder = cache_dir()
        if folder is None:
            return None
        return folder / _file_name(device_identity(device))

    def _table(self, device: int) -> tuple[Optional[Path], dict]:
        path = self.path(device)
        if path is None:
            return None, {}
        table = self._tables.get(path)
        if table is None:
            table = self._tables[path] = read_entries(path)
        return path, table

    def section(self, name: str, device: int) -> dict:
        """``{encoded key: value}`` of one section (empty where the cache is off)."""
        return dict(self._table(device)[1].get(name, {}))

    def get(self, name: str, key, device: int):
        text = encode_key(key)
        return None if text is None else self._table(device)[1].get(name, {}).get(text)

    def put(self, name: str, key, value, device: int) -> None:
        """File ``value`` (JSON-serialisable) under ``key`` and write the device's file."""
        text = encode_key(key)
        if text is None:
            return
        with self._lock:
            path, table = self._table(device)
            if path is None:
                return
            table.setdefault(name, {})[text] = value
            if self._write_failed:
                return
            try:
                self._write(path, table, device)
            except OSError as error:
                self._write_failed = True
                warnings.warn(f"fusedmlp: cannot write the tuning cache {path} ({error}); "
                              f"choices are kept for this process only", stacklevel=3)

    def _write(self, path: Path, table: dict, device: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = read_entries(path)  # entries other processes filed since this one read the file
        for name, entries in table.items():
            merged.setdefault(name, {}).update(entries)
        table.update(merged)
        payload = {"format": _FORMAT, "fusedmlp_code": code_hash(), "device": device_identity(device),
                   "triton": triton.__version__, "torch": torch.__version__, "entries": merged}
        handle, temporary = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
        try:
            with os.fdopen(handle, "w") as f:
                json.dump(payload, f, indent=1, sort_keys=True)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):  # (already gone)
                os.unlink(temporary)
            raise


TUNING_CACHE = TuningCache()


def restore_tuner(tuner, section: str, device: int) -> None:
    """Fill a Triton autotuner's per-key choices from the cache (the entries are indices into
    ``tuner.configs``; one out of range, or a key already chosen in this process, is left)."""
    for text, index in TUNING_CACHE.section(section, device).items():
        if isinstance(index, int) and 0 <= index < len(tuner.configs):
            tuner.cache.setdefault(decode_key(text), tuner.configs[index])


def file_tuner(tuner, section: str, device: int, known: set) -> None:
    """File each choice of ``tuner`` made since ``known`` (its keys before the launch)."""
    for key, config in list(tuner.cache.items()):
        if key in known:
            continue
        index = next((i for i, c in enumerate(tuner.configs) if c is config), None)
        if index is not None:
            TUNING_CACHE.put(section, key, index, device)
