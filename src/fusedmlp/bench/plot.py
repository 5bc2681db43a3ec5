"""PNG plots of a bench JSON file (needs matplotlib: ``pip install fusedmlp[plot]``).

geglu: one column per model width d, x axis N (rows, log scale), one line per implementation:
forward time, forward+backward time, the forward's activation footprint and the
forward+backward peak memory (not for the graphed impls, whose memory is the graph's pool),
the memory panels with the 5Nd (input + output, the ideal) and 9Nd (+ the pre-activation h)
lines of the analysis. Other suites: grouped bars per shape,
time and peak memory for each mode.
"""

from __future__ import annotations

import json
from pathlib import Path

_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}
_PANELS = [
    ("fwd", "ms", "forward (ms)"),
    ("fwd+bwd", "ms", "forward+backward (ms)"),
    ("fwd", "act_mib", "forward activation footprint (MiB)"),
    ("fwd+bwd", "peak_mib", "forward+backward peak above inputs (MiB)"),
]


def plot_results(json_path: Path, png_path: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(Path(json_path).read_text())
    env, rows = data["environment"], [r for r in data["results"] if r["ms"] is not None]
    if not rows:
        raise ValueError(f"{json_path} holds no successful measurement to plot")
    if set(rows[0]["shape"]) != {"d", "N"}:
        return _plot_bars(env, rows, json_path, png_path, plt)
    dtype = rows[0]["dtype"]
    elem = _BYTES.get(dtype, 2)
    widths = sorted({r["shape"]["d"] for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig, axes = plt.subplots(len(_PANELS), len(widths), figsize=(4.2 * len(widths), 3.2 * len(_PANELS)),
                             squeeze=False)
    for col, d in enumerate(widths):
        ns = sorted({r["shape"]["N"] for r in rows if r["shape"]["d"] == d})
        for row, (mode, metric, title) in enumerate(_PANELS):
            ax = axes[row][col]
            for impl in impls:
                if metric != "ms" and (impl == "gemm" or impl.endswith("_graph")):
                    continue  # a bare GEMM keeps no activations; a graph's pool reads as 0
                points = []
                for r in rows:
                    if r["shape"]["d"] != d or r["impl"] != impl or r["mode"] != mode:
                        continue
                    if metric == "act_mib":
                        act_nd = r["extra"].get("act_nd")
                        retained = r["extra"].get("retained_bytes")  # files written before act_nd reached them
                        if act_nd is None and retained is not None:
                            act_nd = 1.0 + retained / (d * r["shape"]["N"] * elem)
                        value = None if act_nd is None else act_nd * d * r["shape"]["N"] * elem / 2**20
                    else:
                        value = r[metric]
                    if value is not None:
                        points.append((r["shape"]["N"], value))
                if points:
                    points.sort()
                    ax.plot(*zip(*points), marker="o", ms=3, label=impl)
            if metric == "act_mib":  # the analysis counts x, y, h: the footprint's baseline, not the peak's
                for factor, color, label in ((5, "black", "5Nd (x + y)"), (9, "red", "9Nd (x + h, at least)")):
                    ax.plot(ns, [factor * n * d * elem / 2**20 for n in ns], color=color, ls="--", lw=1,
                            label=label, marker="_", ms=14)  # the marker shows the level where a column has one N
            ax.set_xscale("log", base=2)
            ax.set_title(f"d={d}: {title}", fontsize=9)
            ax.set_xlabel("N (rows)", fontsize=8)
            ax.tick_params(labelsize=7)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
    fig.suptitle(f"{rows[0]['suite']} {dtype} on {env.get('device')} (torch {env.get('torch')}, "
                 f"triton {env.get('triton')}, {env.get('date')})", fontsize=10)
    fig.tight_layout()
    png_path = Path(png_path) if png_path else Path(json_path).with_suffix(".png")
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path


def _plot_bars(env, rows, json_path, png_path, plt):
    """Grouped bars: one panel per (mode, metric), one group per shape, one bar per impl."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    shapes = list(dict.fromkeys(tuple(r["shape"].values()) for r in rows))
    labels = ["x".join(map(str, s)) for s in shapes]
    # long labels (mlp's 2048x13-512-256-64-16) overlap when drawn level: tilt them
    tilted = {"rotation": 25, "ha": "right"} if max(map(len, labels)) > 12 else {}
    values = {(tuple(r["shape"].values()), r["mode"], r["impl"]): r for r in rows}
    fig, axes = plt.subplots(2, len(modes), figsize=(4.5 * len(modes), 6.4), squeeze=False)
    width = 0.8 / len(impls)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, mode in enumerate(modes):
        for row, (metric, title) in enumerate((("ms", "time (ms)"), ("peak_mib", "peak MiB above inputs"))):
            ax = axes[row][col]
            for k, impl in enumerate(impls):
                heights = [(values.get((s, mode, impl)) or {}).get(metric) or 0.0 for s in shapes]
                # the GEMM floor's memory is not the op's; a graph's pool reads as 0; a mode an impl lacks
                if (metric == "peak_mib" and impl == "gemm") or not any(heights):
                    continue
                ax.bar([i + k * width for i in range(len(shapes))], heights, width, label=impl,
                       color=colors[k % len(colors)])  # one colour per impl in every panel
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))], labels, fontsize=7,
                          **tilted)
            ax.set_yscale("log")
            ax.set_title(f"{mode}: {title}", fontsize=9)
            ax.tick_params(labelsize=7)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
    fields = "x".join(rows[0]["shape"])
    fig.suptitle(f"{rows[0]['suite']} {rows[0]['dtype']} ({fields}) on {env.get('device')} "
                 f"(torch {env.get('torch')}, triton {env.get('triton')}, {env.get('date')})", fontsize=10)
    fig.tight_layout()
    png_path = Path(png_path) if png_path else Path(json_path).with_suffix(".png")
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
