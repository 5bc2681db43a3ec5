"""Timing, peak memory and reporting shared by every bench suite."""

from __future__ import annotations

import csv
import datetime
import json
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch


@dataclass
class Measurement:
    suite: str
    shape: dict
    dtype: str
    impl: str
    mode: str  # "fwd", "bwd" or "fwd+bwd"
    ms: float | None = None
    tflops: float | None = None
    peak_mib: float | None = None  # above the inputs (and, for bwd, above the saved forward state)
    note: str = ""
    extra: dict = field(default_factory=dict)


def median_ms(fn, warmup_ms: int = 100, rep_ms: int = 500) -> float:
    """Median time of ``fn`` in ms over CUDA-event-timed repeats (L2 flushed by do_bench)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def peak_mib_above_current(fn) -> float:
    """Peak memory ``fn`` allocates beyond what is allocated when it starts, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def environment() -> dict:
    import triton

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["fusedmlp"] + sys.argv[1:]) if sys.argv else "",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
    else:
        env["device"] = f"CPU ({platform.processor() or platform.machine()}), Triton interpreter"
    return env


def write_json(path: Path, env: dict, rows: list[Measurement]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"environment": env, "results": [asdict(r) for r in rows]}
    path.write_text(json.dumps(payload, indent=1))


def write_csv(path: Path, env: dict, rows: list[Measurement]) -> None:
    """One line per measurement; shape and extras flattened into columns; env in every line."""
    flat = []
    for r in rows:
        rec = asdict(r)
        shape, extra = rec.pop("shape"), rec.pop("extra")
        flat.append({**{f"shape_{k}": v for k, v in shape.items()}, **rec, **extra,
                     "device": env.get("device"), "torch": env.get("torch"), "triton": env.get("triton"),
                     "date": env.get("date")})
    columns = list(dict.fromkeys(k for rec in flat for k in rec))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)


def format_table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table (readable in a terminal and pasteable into the README)."""
    cells = [[("" if c is None else (f"{c:.3g}" if isinstance(c, float) else str(c))) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


def progress(total: int, desc: str):
    """A tqdm progress bar on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)
