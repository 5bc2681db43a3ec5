"""PNG plots of a bench JSON file (needs matplotlib: ``pip install fusedmlp[plot]``)."""

from __future__ import annotations

import json
from pathlib import Path


def plot_results(json_path: Path, png_path: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(Path(json_path).read_text())
    env, rows = data["environment"], [r for r in data["results"] if r["ms"] is not None]
    shapes = list(dict.fromkeys((r["shape"]["d"], r["shape"]["N"]) for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    lookup = {(r["shape"]["d"], r["shape"]["N"], r["impl"], r["mode"]): r for r in rows}
    panels = [
        ("fwd", "ms", "forward time (ms)"),
        ("fwd+bwd", "ms", "forward+backward time (ms)"),
        ("fwd+bwd", "peak_mib", "forward+backward peak memory above inputs (MiB)"),
        ("fwd", "act_nd", "forward activation footprint (N*d elements)"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    width = 0.8 / max(len(impls), 1)
    labels = [f"d={d}\nN={n}" for d, n in shapes]
    for ax, (mode, metric, title) in zip(axes.flat, panels):
        for i, impl in enumerate(impls):
            if metric == "act_nd" and impl == "gemm":
                continue  # a bare GEMM keeps no activations
            values = []
            for d, n in shapes:
                r = lookup.get((d, n, impl, mode))
                v = None if r is None else (r["extra"].get(metric) if metric == "act_nd" else r[metric])
                values.append(float("nan") if v is None else v)
            ax.bar([j + i * width for j in range(len(shapes))], values, width, label=impl)
        if metric == "act_nd":
            ax.axhline(5, color="k", ls="--", lw=1, label="5Nd ideal (x + y)")
            ax.axhline(9, color="r", ls=":", lw=1, label="9Nd (x + y + h)")
        ax.set_xticks([j + width * (len(impls) - 1) / 2 for j in range(len(shapes))], labels)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(f"{rows[0]['suite'] if rows else ''} {rows[0]['dtype'] if rows else ''} on {env.get('device')} "
                 f"(torch {env.get('torch')}, triton {env.get('triton')}, {env.get('date')})", fontsize=10)
    fig.tight_layout()
    png_path = Path(png_path) if png_path else Path(json_path).with_suffix(".png")
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
