"""The ``fusedmlp`` command: ``fusedmlp info``, ``fusedmlp bench SUITE``, ``fusedmlp bench-plot FILE``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _prepare_backend() -> bool:
    """True with a CUDA GPU; otherwise turn on the Triton interpreter before kernels load."""
    import torch

    if torch.cuda.is_available():
        return True
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return False


def _parse_shapes(text: str):
    """A preset name (kept as a string, resolved by the suite) or a list like 1024x8192 or 16384x512x1792."""
    if text.isidentifier():
        return text
    shapes = []
    for item in text.split(","):
        try:
            shapes.append(tuple(int(v) for v in item.lower().split("x")))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"shape {item!r} is not a list of integers joined by x (e.g. 1024x8192)"
            ) from None
    return shapes


def cmd_info(args) -> int:
    has_gpu = _prepare_backend()
    import torch
    import triton

    import fusedmlp
    from fusedmlp.kernels.configs import INTERPRET

    print(f"fusedmlp {fusedmlp.__version__}")
    print(f"python   {sys.version.split()[0]}")
    print(f"torch    {torch.__version__} (CUDA {torch.version.cuda})")
    print(f"triton   {triton.__version__}")
    if has_gpu:
        print(f"device   {torch.cuda.get_device_name()} (capability {torch.cuda.get_device_capability()})")
        print("backend  Triton kernels on CUDA tensors")
    else:
        print("device   no CUDA GPU")
        print(f"backend  {'Triton interpreter' if INTERPRET else 'PyTorch reference'} on CPU tensors")
    print(f"ops      geglu, linear_act, swiglu, lora_linear, mlp, fused_add_mul_activation; activations: {', '.join(fusedmlp.ACTIVATIONS)}")
    return 0


def cmd_bench(args) -> int:
    has_gpu = _prepare_backend()
    import torch

    from fusedmlp.bench import harness
    from fusedmlp.bench.suites import SUITES

    suite = importlib.import_module(SUITES[args.suite])
    dtype = getattr(torch, DTYPES[args.dtype])
    env = harness.environment()
    if not has_gpu:
        headers, table = suite.run_cpu_check(dtype)
        print(f"No CUDA GPU: {args.suite} ran through the Triton interpreter on a small shape.")
        print("Relative error against the float64 reference (||out - ref|| / ||ref||):\n")
        print(harness.format_table(headers, table))
        print("\nTimings and memory figures need a CUDA GPU; run this command on one.")
        return 0
    available = suite.default_impls(max_autotune=True)
    impls = args.impls.split(",") if args.impls else suite.default_impls(args.max_autotune)
    modes = args.modes.split(",") if args.modes else list(suite.MODES)
    for name, given, allowed in (("impl", impls, available), ("mode", modes, suite.MODES)):
        bad = [v for v in given if v not in allowed]
        if bad:
            print(f"unknown or unavailable {name}(s) {bad}; choose from {', '.join(allowed)}", file=sys.stderr)
            return 2
    shapes = args.shapes or suite.DEFAULT_SHAPES
    if isinstance(shapes, str):
        if shapes not in suite.SHAPE_PRESETS:
            print(f"unknown shape preset {shapes!r}; choose from {', '.join(suite.SHAPE_PRESETS)} "
                  f"or give DxN,...", file=sys.stderr)
            return 2
        shapes = suite.SHAPE_PRESETS[shapes]
    fields = suite.SHAPE_FIELDS
    check = getattr(suite, "check_shape", None)
    if check is not None:  # suites whose shapes vary in length say themselves what is wrong
        problems = [(s, check(s)) for s in shapes if check(s)]
        if problems:
            print(f"{problems[0][1]}; got {[s for s, _ in problems]}", file=sys.stderr)
            return 2
    else:
        bad = [s for s in shapes if len(s) != len(fields) or min(s) <= 0]
        if bad:
            print(f"{args.suite} shapes are {'x'.join(fields).upper()} with positive sizes; got {bad}",
                  file=sys.stderr)
            return 2
    stem = f"{args.suite}_{args.dtype}_{env['device'].replace(' ', '_')}"
    json_path = Path(args.out) / f"{stem}.json"

    def save(rows_so_far):  # after every shape, so an interrupted run keeps what it measured
        harness.write_json(json_path, env, rows_so_far)
        harness.write_csv(json_path.with_suffix(".csv"), env, rows_so_far)

    rows = suite.run_gpu(shapes, dtype, impls, modes, on_shape_done=save)
    headers, table = suite.summary_table(rows)
    failed = [f"{r.impl} {r.mode} {r.shape}: {r.note}" for r in rows if r.note]
    print(f"\n{args.suite} {args.dtype} on {env['device']} (torch {env['torch']}, triton {env['triton']}); "
          f"median ms, ratio to the cuBLAS GEMM floor, peak MiB above inputs")
    print(harness.format_table(headers, table))
    for line in failed:
        print("  " + line)
    print(f"\nwrote {json_path} and {json_path.with_suffix('.csv')}")
    try:
        from fusedmlp.bench.plot import plot_results

        print(f"wrote {plot_results(json_path)}")
    except ImportError:
        print("matplotlib not installed: no plot (`fusedmlp bench-plot FILE` makes it later)")
    return 0


def cmd_bench_plot(args) -> int:
    from fusedmlp.bench.plot import plot_results

    print(f"wrote {plot_results(Path(args.json), args.out)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from fusedmlp.bench.suites import SUITES

    parser = argparse.ArgumentParser(prog="fusedmlp", description="Fused Triton kernels for MLP blocks.")
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="versions, device and which backend the ops use")
    info.set_defaults(func=cmd_info)

    bench = sub.add_parser(
        "bench",
        help="benchmark a fused op against eager, torch.compile, Liger-Kernel (if installed) and the cuBLAS GEMM floor",
        description="On a CUDA GPU: median ms, TFLOP/s and peak memory of every implementation, "
        "side by side, written as JSON + CSV (+ PNG if matplotlib is installed) to --out. Without a GPU: "
        "a small interpreted accuracy check against the float64 reference.",
    )
    bench.add_argument("suite", choices=sorted(SUITES), help="which op to benchmark")
    bench.add_argument("--shapes", type=_parse_shapes, default=None,
                       help="a preset (every suite has 'default'; geglu, linear_act, swiglu and mlp also 'full', lora "
                            "'small') or a comma-separated list of shapes: geglu DxN "
                            "(model width x rows, e.g. 1024x8192; full: d in 1024..8192 x N in 4096..65536), "
                            "linear_act TOKENSxINxOUT (e.g. 16384x512x1792), swiglu TOKENSxDxHIDDEN "
                            "(e.g. 16384x4096x14336), lora TOKENSxDxR (e.g. 32768x4096x16), add_mul_act "
                            "ROWSxCOLS (e.g. 32768x4096), mlp BATCHxINx...xOUT (e.g. 2048x13x512x256x64x16; "
                            "default: the DLRM bottom and top MLPs at 2048, 8192, 65536; full: 2048..65536)")
    bench.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="default: bf16")
    bench.add_argument("--impls", default=None,
                       help="comma-separated subset of the suite's implementations (default: all available). "
                            "geglu: fused,fused_store,eager,compile,compile_max,liger,gemm; linear_act: "
                            "fused,fused_preact,eager,compile,compile_max,gemm; swiglu: fused,fused_recompute,"
                            "eager,compile,compile_max,liger,gemm (liger when liger_kernel is installed); lora: "
                            "fused,fused_in_loop,eager,compile,compile_max,gemm; add_mul_act: fused_triton,fused_cuda,eager,"
                            "compile; mlp: fused,fused_recompute,eager,compile,compile_max,cuda_graph")
    bench.add_argument("--max-autotune", action="store_true",
                       help="also time torch.compile(mode='max-autotune') (compiles for minutes)")
    bench.add_argument("--modes", default=None, help="comma-separated subset of fwd,bwd,fwd+bwd (mlp: fwd,fwd+bwd; default: all the suite has)")
    bench.add_argument("--out", default="bench-out", help="output folder (default: ./bench-out)")
    bench.set_defaults(func=cmd_bench)

    plot = sub.add_parser("bench-plot", help="make the PNG plot of a bench JSON file")
    plot.add_argument("json", help="a JSON file written by `fusedmlp bench`")
    plot.add_argument("--out", default=None, help="PNG path (default: next to the JSON)")
    plot.set_defaults(func=cmd_bench_plot)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
