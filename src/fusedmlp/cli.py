"""The ``fusedmlp`` command: ``fusedmlp info``, ``fusedmlp tuning-cache [--clear]``, ``fusedmlp bench SUITE``,
``fusedmlp bench-plot FILE``, ``fusedmlp dlrm {train,eval,preprocess,synth}``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
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
    print(f"ops      geglu, linear_act, swiglu, swiglu_packed, lora_linear, mlp, dot_interaction, fused_add_mul_activation; activations: {', '.join(fusedmlp.ACTIVATIONS)}")
    return 0


def cmd_tuning_cache(args) -> int:
    from fusedmlp.kernels.tuning_cache import ENV, cache_dir, read_entries

    folder = cache_dir()
    if folder is None:
        print(f"tuning cache off ({ENV}={os.environ.get(ENV)!r}): every process times its first calls")
        return 0
    files = sorted(folder.glob("tuning_*.json")) if folder.is_dir() else []
    print(f"tuning cache {folder} (set {ENV} to move it, 0 to turn it off): {len(files)} file(s)")
    for path in files:
        entries = read_entries(path)
        print(f"  {path.name}: {sum(len(keys) for keys in entries.values())} choices in {len(entries)} tables")
    if args.clear:
        for path in files:
            path.unlink(missing_ok=True)
        print(f"removed {len(files)} file(s): the next process times its first calls again")
    return 0


def cmd_bench(args) -> int:
    has_gpu = _prepare_backend()
    import torch

    from fusedmlp.bench import harness
    from fusedmlp.bench.suites import SUITES

    suite = importlib.import_module(SUITES[args.suite])
    if args.activation is not None:
        if not hasattr(suite, "set_activation"):
            print(f"--activation applies to the linear_act and swiglu suites, not {args.suite}", file=sys.stderr)
            return 2
        try:
            suite.set_activation(args.activation)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
    if args.packed and not hasattr(suite, "set_packed"):
        print(f"--packed applies to the swiglu suite, not {args.suite}", file=sys.stderr)
        return 2
    if hasattr(suite, "set_packed"):  # each run says its layout (the suite's module outlives a run)
        suite.set_packed(args.packed)
    if args.rounds < 1:
        print(f"--rounds takes a count >= 1, got {args.rounds}", file=sys.stderr)
        return 2
    if args.rounds > 1 and args.suite == "dlrm":
        print("--rounds applies to every suite but dlrm, which times its steps its own way", file=sys.stderr)
        return 2
    dtype = getattr(torch, DTYPES[args.dtype])
    if args.fp32_precision is not None:
        if dtype != torch.float32:
            print(f"--fp32-precision applies to --dtype fp32, not {args.dtype}", file=sys.stderr)
            return 2
        torch.set_float32_matmul_precision(args.fp32_precision)
    if args.autocast and (dtype == torch.float32 or args.suite in ("dlrm", "add_mul_act")):
        print("--autocast runs the geglu, linear_act, swiglu, lora and mlp suites with --dtype bf16 or fp16 "
              f"(got {args.suite}, {args.dtype})", file=sys.stderr)
        return 2
    plan = _bench_plan(args, suite)  # checked on a CPU too: a typo should not wait for a GPU machine
    if isinstance(plan, str):
        print(plan, file=sys.stderr)
        return 2
    impls, modes, shapes = plan
    env = harness.environment()
    if not has_gpu:
        headers, table = suite.run_cpu_check(dtype)
        print(f"No CUDA GPU: {args.suite} ran through the Triton interpreter on a small shape"
              + (" (in --dtype; --autocast applies to GPU timings)." if args.autocast else "."))
        print("Relative error against the float64 reference (||out - ref|| / ||ref||):\n")
        print(harness.format_table(headers, table))
        print("\nTimings and memory figures need a CUDA GPU; run this command on one (its options were checked).")
        return 0
    try:  # before any timing: an --out that cannot be written should not cost a run
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=args.out):
            pass
    except OSError as error:
        print(f"--out {args.out}: cannot write there ({error.strerror or error})", file=sys.stderr)
        return 2
    if args.rounds > 1:
        env["rounds"] = args.rounds
    env["backward_thread"] = args.backward_thread
    stem = f"{args.suite}_{args.dtype}_{env['device'].replace(' ', '_')}"
    if args.activation is not None:
        env["activation"] = args.activation
        stem += f"_{args.activation}"
    if args.packed:
        env["packed"] = True
        stem += "_packed"
    if args.backward_thread != "device":
        stem += f"_{args.backward_thread}_bwd"
    if args.autocast:
        env["autocast"] = str(dtype).replace("torch.", "")
        stem += "_autocast"
    if dtype == torch.float32:
        env["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        if env["float32_matmul_precision"] != "highest":
            stem += f"_{env['float32_matmul_precision']}"
    json_path = Path(args.out) / f"{stem}.json"

    def save(rows_so_far):  # after every shape, so an interrupted run keeps what it measured
        harness.write_json(json_path, env, rows_so_far)
        harness.write_csv(json_path.with_suffix(".csv"), env, rows_so_far)

    # thread-local: every impl's backward in this run takes the same thread
    with (torch.autograd.set_multithreading_enabled(args.backward_thread == "device"),
          harness.timing_rounds(args.rounds), harness.autocast_run(dtype if args.autocast else None)):
        rows = suite.run_gpu(shapes, dtype, impls, modes, on_shape_done=save)
    save(rows)  # again: what a suite derives once every shape is done (geglu's act_nd) goes in the files too
    headers, table = suite.summary_table(rows)
    failed = [f"{r.impl} {r.mode} {r.shape}: {r.note}" for r in rows if r.note]
    note = getattr(suite, "TABLE_NOTE",
                   "median ms, ratio to the cuBLAS GEMM floor, peak MiB above inputs (a/b MiB: peak ratio)")
    mixed = " under autocast (fp32 weights)" if args.autocast else ""
    print(f"\n{args.suite} {args.dtype}{mixed} on {env['device']} (torch {env['torch']}, triton {env['triton']}); "
          f"{note}")
    print(harness.format_table(headers, table))
    for line in failed:
        print("  " + line)
    clocks = harness.clock_line(rows, env)
    if clocks:
        print(clocks)
    print(f"\nwrote {json_path} and {json_path.with_suffix('.csv')}")
    try:
        from fusedmlp.bench.plot import plot_results

        print(f"wrote {plot_results(json_path)}")
    except ImportError:
        print("matplotlib not installed: no plot (`fusedmlp bench-plot FILE` makes it later)")
    return 0


def _bench_plan(args, suite):
    """(impls, modes, shapes) of a bench run from its options, or the message saying which is wrong."""
    available = suite.default_impls(max_autotune=True)
    impls = args.impls.split(",") if args.impls else suite.default_impls(args.max_autotune)
    modes = args.modes.split(",") if args.modes else list(suite.MODES)
    for name, given, allowed in (("impl", impls, available), ("mode", modes, suite.MODES)):
        bad = [v for v in given if v not in allowed]
        if bad:
            return f"unknown or unavailable {name}(s) {bad}; choose from {', '.join(allowed)}"
    shapes = args.shapes or suite.DEFAULT_SHAPES
    if isinstance(shapes, str):
        if shapes not in suite.SHAPE_PRESETS:
            return f"unknown shape preset {shapes!r}; choose from {', '.join(suite.SHAPE_PRESETS)} or give DxN,..."
        shapes = suite.SHAPE_PRESETS[shapes]
    check = getattr(suite, "check_shape", None)
    if check is not None:  # suites whose shapes vary in length say themselves what is wrong
        problems = [(s, check(s)) for s in shapes if check(s)]
        if problems:
            return f"{problems[0][1]}; got {[s for s, _ in problems]}"
    else:
        fields = suite.SHAPE_FIELDS
        bad = [s for s in shapes if len(s) != len(fields) or min(s) <= 0]
        if bad:
            return f"{args.suite} shapes are {'x'.join(fields).upper()} with positive sizes; got {bad}"
    return impls, modes, shapes


def cmd_bench_plot(args) -> int:
    import json

    from fusedmlp.bench.plot import plot_results

    try:
        data = json.loads(Path(args.json).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        print(f"bench-plot: cannot read {args.json}: {error}", file=sys.stderr)
        return 2
    if not (isinstance(data, dict) and isinstance(data.get("environment"), dict)
            and isinstance(data.get("results"), list)):
        print(f"bench-plot: {args.json} is not the JSON of a `fusedmlp bench` run (no environment and results)",
              file=sys.stderr)
        return 2
    if args.out is not None:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    print(f"wrote {plot_results(Path(args.json), args.out)}")
    return 0


def cmd_dlrm_train(args) -> int:
    if args.impl in ("auto", "fused"):
        _prepare_backend()
    from fusedmlp.dlrm.train import train_and_report

    at = next(i for i in range(len(args.argv) - 1) if args.argv[i:i + 2] == ["dlrm", "train"])
    return train_and_report(args, args.argv[at + 2:])  # (--nproc restarts the command under torchrun)


def cmd_dlrm_eval(args) -> int:
    if args.impl in ("auto", "fused"):
        _prepare_backend()
    from fusedmlp.dlrm.train import evaluate_checkpoint, metrics_json

    print(metrics_json(evaluate_checkpoint(args)))
    return 0


def cmd_dlrm_preprocess(args) -> int:
    from tqdm import tqdm

    from fusedmlp.dlrm.data import MalformedLineError, preprocess

    with tqdm(desc="preprocess (2 reads)", unit=" lines", unit_scale=True, disable=args.quiet) as bar:
        try:
            meta = preprocess(args.input, args.out, index=args.index, max_rows=args.max_rows, min_freq=args.min_freq,
                              val_fraction=args.val_fraction, strict=args.strict, progress=bar.update)
        except MalformedLineError as exc:
            print(f"error: {exc} (without --strict malformed lines are skipped and reported)", file=sys.stderr)
            return 1
    report = meta.pop("report")
    print(f"{args.input}: {report.summary()}")
    print(f"wrote {args.out}: train {meta['rows']['train']} rows, val {meta['rows']['val']} rows, "
          f"{meta['index']['kind']} index, table sizes {meta['cardinalities']}")
    return 0


def cmd_dlrm_synth(args) -> int:
    from fusedmlp.dlrm.data import synthesize, write_tsv

    if args.rows < 1:
        print("--rows must be at least 1", file=sys.stderr)
        return 2
    labels, dense, cats = synthesize(args.rows, seed=args.seed, signal=args.signal)
    write_tsv(args.out, labels, dense, cats)
    print(f"wrote {args.out}: {args.rows} Criteo-format lines, click rate {labels.mean():.3f}")
    return 0


def _add_dlrm_parser(sub) -> None:
    from fusedmlp.dlrm.data import DEFAULT_MAX_ROWS
    from fusedmlp.dlrm.train import IMPL_CHOICES, add_train_arguments

    dlrm = sub.add_parser("dlrm", help="DLRM on Criteo-format click logs: train, eval, preprocess, synth")
    dsub = dlrm.add_subparsers(dest="dlrm_command", required=True)
    train = dsub.add_parser("train", help="train a DLRM (default: on the shipped synthetic sample)",
                            description="Train a DLRM; prints validation AUC / log loss / accuracy and a JSON summary.")
    add_train_arguments(train)
    train.set_defaults(func=cmd_dlrm_train)

    evaluate = dsub.add_parser("eval", help="evaluate a checkpoint on a data set's validation (or training) rows")
    evaluate.add_argument("checkpoint", help="a checkpoint written by `fusedmlp dlrm train --checkpoint`")
    evaluate.add_argument("--data", default=None, help="as for train (default: the shipped sample)")
    evaluate.add_argument("--split", choices=("val", "train"), default="val")
    evaluate.add_argument("--impl", choices=IMPL_CHOICES, default="auto")
    evaluate.add_argument("--device", default="auto")
    evaluate.add_argument("--val-fraction", type=float, default=None,
                          help="a TSV's share of last lines that validates (default: the checkpoint's run's, "
                          "0.1 for checkpoints that do not record it)")
    evaluate.add_argument("--eval-batch-size", type=int, default=65536)
    evaluate.set_defaults(func=cmd_dlrm_eval)

    prep = dsub.add_parser("preprocess", help="Criteo TSV (plain or gzip) -> parquet train/val splits + metadata.json")
    prep.add_argument("input", help="Criteo-format TSV file (.gz or plain)")
    prep.add_argument("--out", required=True, help="output folder")
    prep.add_argument("--index", choices=("hash", "vocab"), default="hash",
                      help="categorical indices: modulus hash (v + 1) %% cardinality (default) or a vocabulary "
                           "(unknown values -> the reserved index 0)")
    prep.add_argument("--min-freq", type=int, default=1, help="vocab: keep values seen at least this often")
    prep.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="rows per table at most (default 2M)")
    prep.add_argument("--val-fraction", type=float, default=0.1, help="the last share of lines validates")
    prep.add_argument("--strict", action="store_true", help="fail on the first malformed line instead of skipping it")
    prep.add_argument("--quiet", action="store_true")
    prep.set_defaults(func=cmd_dlrm_preprocess)

    synth = dsub.add_parser("synth", help="write synthetic Criteo-format lines with a planted, learnable signal")
    synth.add_argument("--rows", type=int, required=True)
    synth.add_argument("--out", required=True, help="output file (.gz for gzip)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--signal", type=float, default=1.0, help="strength of the hidden model (0: labels are noise)")
    synth.set_defaults(func=cmd_dlrm_synth)


def build_parser() -> argparse.ArgumentParser:
    from fusedmlp.bench.suites import SUITES

    parser = argparse.ArgumentParser(prog="fusedmlp", description="Fused Triton kernels for MLP blocks.")
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="versions, device and which backend the ops use")
    info.set_defaults(func=cmd_info)

    tuning = sub.add_parser(
        "tuning-cache",
        help="where the tuning choices kept between processes are, how many; --clear deletes them",
        description="Kernel configs and forward forms chosen by timing on a GPU are filed per GPU model and "
        "software version (default ~/.cache/fusedmlp, or $XDG_CACHE_HOME/fusedmlp where that is set; "
        "FUSEDMLP_TUNING_CACHE=DIR moves it, =0 turns it off); "
        "a later process launches them untimed. This lists the files and, with --clear, deletes them.")
    tuning.add_argument("--clear", action="store_true", help="delete the tuning files (the next process times again)")
    tuning.set_defaults(func=cmd_tuning_cache)

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
                            "default: the DLRM bottom and top MLPs at 2048, 8192, 65536; full: 2048..65536), dlrm BATCH "
                            "(e.g. 2048,65536; default 2048, 8192, 65536; full 2048..65536)")
    bench.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="default: bf16")
    bench.add_argument("--impls", default=None,
                       help="comma-separated subset of the suite's implementations (default: all available). "
                            "geglu: fused,fused_store,eager,compile,compile_max,liger,quack,gemm,fused_graph,fused_store_graph,"
                            "eager_graph,compile_graph,liger_graph; linear_act: "
                            "fused,fused_preact,eager,compile,compile_max,quack,gemm,fused_graph,fused_preact_graph,"
                            "eager_graph,compile_graph; "
                            "swiglu: fused,fused_recompute,eager,compile,compile_max,liger,quack,quack_recompute,gemm,"
                            "fused_graph,fused_recompute_graph,eager_graph,compile_graph (with --packed no quack; "
                            "liger, quack: when liger_kernel, "
                            "quack-kernels are installed; quack runs the forward alone in geglu and linear_act); lora: fused,fused_in_loop,eager,compile,"
                            "compile_max,gemm,fused_graph,eager_graph,compile_graph (*_graph: the step replayed from a "
                            "CUDA graph, fwd and fwd+bwd); add_mul_act: fused_triton,fused_cuda,eager,"
                            "compile; mlp: fused,fused_recompute,fused_graph,eager,compile,compile_max,cuda_graph,"
                            "compile_graph; dlrm: fused,"
                            "fused_graph,eager,eager_sparse,compile,eager_graph,compile_graph")
    bench.add_argument("--activation", default=None,
                       help="linear_act: the activation every impl applies (identity, relu, squared_relu, gelu, "
                            "gelu_tanh, sigmoid, silu; default gelu_tanh); swiglu: the gate's activation (the "
                            "same names; default silu; gelu_tanh: Gemma's feed-forward); named in the output "
                            "files' names")
    bench.add_argument("--packed", action="store_true",
                       help="swiglu: the gate and up weights packed in one [2*hidden, d] tensor, as Phi-3's and "
                            "GLM's gate_up_proj: fused is fusedmlp.swiglu_packed, eager / compile / liger split "
                            "one product in two halves (chunk), the GEMM floor is the packed products; named in "
                            "the output files' names")
    bench.add_argument("--fp32-precision", choices=("highest", "high"), default=None,
                       help="with --dtype fp32: torch.set_float32_matmul_precision for every impl of the run "
                            "(highest: IEEE fp32 products, the fused ops' GEMMs then on cuBLAS; high: TF32 tensor "
                            "cores; default: PyTorch's setting, highest unless changed), named in the output "
                            "files' names when high")
    bench.add_argument("--autocast", action="store_true",
                       help="mixed precision as an AMP training loop runs it: weights and biases fp32 masters, "
                            "x and the upstream gradient in --dtype (bf16 or fp16), every impl under "
                            "torch.autocast('cuda', dtype); the GEMM floor in --dtype (geglu, linear_act, swiglu, "
                            "lora, mlp); named in the output files' names")
    bench.add_argument("--max-autotune", action="store_true",
                       help="also time torch.compile(mode='max-autotune') (compiles for minutes)")
    bench.add_argument("--modes", default=None, help="comma-separated subset of fwd,bwd,fwd+bwd (mlp: fwd,fwd+bwd; "
                                                     "dlrm: train,infer; default: all the suite has)")
    bench.add_argument("--backward-thread", choices=("device", "caller"), default="device",
                       help="where every impl's backward runs: autograd's per-device worker thread (default, "
                            "PyTorch's default) or the calling thread (torch.autograd.set_multithreading_enabled"
                            "(False), what `fusedmlp dlrm train` does); host-bound steps differ, GPU work does not")
    bench.add_argument("--rounds", type=int, default=1,
                       help="time each shape's impls N times, every other round in reverse order, and report "
                            "each one's median (default 1: once, in the order of --impls); at large shapes a "
                            "GPU's clock drifts over a run, favouring the impls timed first (not dlrm)")
    bench.add_argument("--out", default="bench-out", help="output folder (default: ./bench-out)")
    bench.set_defaults(func=cmd_bench)

    plot = sub.add_parser("bench-plot", help="make the PNG plot of a bench JSON file")
    plot.add_argument("json", help="a JSON file written by `fusedmlp bench`")
    plot.add_argument("--out", default=None, help="PNG path (default: next to the JSON)")
    plot.set_defaults(func=cmd_bench_plot)
    _add_dlrm_parser(sub)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.command != "dlrm" or os.environ.get("FUSEDMLP_TRACEBACK", "0") not in ("", "0"):
        return args.func(args)
    try:  # the data commands meet users' files: a bad file or argument is a message, not a traceback
        return args.func(args)
    except SystemExit as refusal:  # the trainer's checks refuse with a message (argparse's exits carry a number)
        if not isinstance(refusal.code, str):
            raise
        print(f"fusedmlp dlrm {args.dlrm_command}: error: {refusal.code}", file=sys.stderr)
        return 2
    except (ValueError, OSError, EOFError) as error:
        print(f"fusedmlp dlrm {args.dlrm_command}: error: {error} (FUSEDMLP_TRACEBACK=1 shows where)",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
