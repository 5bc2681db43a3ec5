"""The bench harness and CLI: the no-GPU path, the report table, CSV/JSON and the plot."""

import csv
import importlib.util
import importlib.metadata
import json
import statistics

import pytest
import torch

from fusedmlp import cli
from fusedmlp.bench import harness
from fusedmlp.bench.suites import glu as glu_suite
from fusedmlp.bench.suites import mlp as mlp_suite


def _synthetic_rows():
    """Measurements as run_gpu would record them (values made up: this tests the reporting)."""
    rows = []
    for d, n in ((64, 128), (64, 256), (128, 128)):
        for mode in glu_suite.MODES:
            for k, impl in enumerate(("fused", "fused_store", "eager", "compile", "gemm", "fused_graph")):
                if impl == "fused_graph" and mode == "bwd":
                    continue  # a graphed backward alone is not measured
                row = harness.Measurement("geglu", {"d": d, "N": n}, "bfloat16", impl, mode,
                                          ms=0.1 * (k + 1), tflops=1.0, peak_mib=10.0 * (k + 1))
                if mode == "fwd" and impl not in ("gemm", "fused_graph"):
                    row.extra = {"act_nd": 5.0 + k}
                rows.append(row)
    rows.append(harness.Measurement("geglu", {"d": 128, "N": 256}, "bfloat16", "compile", "fwd",
                                    note="failed: RuntimeError: example"))
    return rows


def test_summary_table_ratios():
    headers, table = glu_suite.summary_table(_synthetic_rows())
    first = dict(zip(headers, table[0]))
    assert first["d"] == 64 and first["N"] == 128 and first["mode"] == "fwd"
    assert first["fused/gemm"] == pytest.approx(0.1 / 0.5)
    assert first["fused/compile"] == pytest.approx(0.1 / 0.4)
    assert first["fused_store/eager"] == pytest.approx(0.2 / 0.3)
    assert first["fused_graph/compile"] == pytest.approx(0.6 / 0.4)
    assert first["fused/compile MiB"] == pytest.approx(10.0 / 40.0)  # peaks: plain against plain
    assert first["fused_store/eager MiB"] == pytest.approx(20.0 / 30.0)
    assert "fused_graph/compile MiB" not in first
    last = dict(zip(headers, table[-1]))  # the failed measurement: no time, no ratio
    assert last["compile ms"] is None and last["fused/compile"] is None
    text = harness.format_table(headers, table)
    assert text.count("\n") == len(table) + 1


def test_json_csv_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from fusedmlp.bench.plot import plot_results

    rows = _synthetic_rows()
    env = harness.environment()
    json_path = tmp_path / "geglu.json"
    harness.write_json(json_path, env, rows)
    harness.write_csv(json_path.with_suffix(".csv"), env, rows)
    loaded = json.loads(json_path.read_text())
    assert loaded["environment"]["torch"] == torch.__version__
    assert loaded["environment"]["tuning_cache"] == "off"  # tests/conftest.py turns it off
    assert loaded["environment"].get("peers", {}) == harness.installed_versions(harness.PEER_DISTRIBUTIONS)
    # the distribution's own version (a CUDA build's torch.__version__ adds a local tag: "+cu130")
    assert harness.installed_versions(["torch", "no-such-distribution"]) == {"torch": importlib.metadata.version("torch")}
    assert len(loaded["results"]) == len(rows)
    with open(json_path.with_suffix(".csv")) as f:
        records = list(csv.DictReader(f))
    assert len(records) == len(rows)
    assert {"shape_d", "shape_N", "impl", "mode", "ms", "peak_mib", "act_nd", "device"} <= set(records[0])
    png = plot_results(json_path)
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_files_hold_what_the_suite_derives_at_the_end(tmp_path, monkeypatch):
    """The JSON is written after every shape (an interrupted run keeps what it measured) and
    once more when the suite returns, so what ``run_gpu`` derives from the rows after the last
    shape (geglu's act_nd from retained_bytes) reaches the files and the footprint plot; a
    file from before that (retained_bytes only) still plots its footprint. ``run_gpu`` is
    replaced by a stand-in that works as the real one does (no GPU here)."""
    rows = [harness.Measurement("geglu", {"d": 64, "N": 128}, "bfloat16", impl, "fwd", ms=0.1,
                                extra={"retained_bytes": 64 * 128 * 2 * 3})
            for impl in ("fused", "eager")]

    def fake_run_gpu(shapes, dtype, impls, modes, on_shape_done=None):
        on_shape_done(rows)
        for row in rows:
            row.extra["act_nd"] = 1.0 + row.extra.pop("retained_bytes") / (64 * 128 * 2)
        return rows

    monkeypatch.setattr(cli, "_prepare_backend", lambda: True)
    monkeypatch.setattr(glu_suite, "run_gpu", fake_run_gpu)
    monkeypatch.setattr(glu_suite, "default_impls", lambda max_autotune=False: ["fused", "eager"])
    assert cli.main(["bench", "geglu", "--shapes", "64x128", "--out", str(tmp_path)]) == 0
    written = json.loads(next(tmp_path.glob("geglu_bf16_*.json")).read_text())["results"]
    assert [r["extra"] for r in written] == [{"act_nd": 4.0}] * 2
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib
        from fusedmlp.bench import plot

        drawn = []
        monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                            lambda self, *args, **kwargs: drawn.append((kwargs.get("label"), args)))
        old = tmp_path / "old.json"
        harness.write_json(old, harness.environment(), [harness.Measurement(
            "geglu", {"d": 64, "N": 128}, "bfloat16", "fused", "fwd", ms=0.1, extra={"retained_bytes": 64 * 128 * 2 * 3})])
        plot.plot_results(old)
        footprint = 4.0 * 64 * 128 * 2 / 2**20
        assert ("fused", ((128,), (footprint,))) in drawn


def test_json_records_the_forward_forms(tmp_path, monkeypatch):
    """The JSON lists, per op, the forward's form chosen per shape key with the times that
    chose it (a GPU run files them; here one filed entry stands in), and nothing when none was."""
    from fusedmlp.ops._common import FastestForm
    import fusedmlp.ops.glu as glu_ops
    import fusedmlp.ops.linear_act as linear_ops

    chooser = FastestForm(fields=glu_ops.glu_forward_form.fields)
    monkeypatch.setattr(glu_ops, "glu_forward_form", chooser)
    monkeypatch.setattr(linear_ops, "linear_forward_form", FastestForm(fields=linear_ops.linear_forward_form.fields))
    harness.write_json(tmp_path / "none.json", {}, [])
    assert "forward_forms" not in json.loads((tmp_path / "none.json").read_text())
    key = (0, torch.bfloat16, 32768, 4096, 1024, "gelu_tanh", True, False)
    chooser.times[key] = {"tma": 0.92, "alternating": 0.91, "cooperative": 0.87}
    chooser.chosen[key] = "cooperative"
    harness.write_json(tmp_path / "one.json", {}, [])
    forms = json.loads((tmp_path / "one.json").read_text())["forward_forms"]
    assert forms == {"glu": [{"device": 0, "dtype": "bfloat16", "m_key": 32768, "out": 4096, "k": 1024,
                              "activation": "gelu_tanh", "bias": True, "store_h": False, "chosen": "cooperative",
                              "ms": {"tma": 0.92, "alternating": 0.91, "cooperative": 0.87}}]}


def test_run_suite_rounds_alternate_the_order_and_report_medians(monkeypatch):
    """With timing rounds, each shape's impls are timed in alternating order and each (impl,
    mode) reports the median of its rounds; a failure is noted once and not retried; a mode
    a prepared step lacks is left out. ``measure`` is replaced by a recorder (no GPU here)."""
    calls = []
    times = iter([3.0, 1.0, 2.0, 9.0, 5.0, 7.0, 4.0, 6.0, 8.0] * 4)

    def fake_measure(forward, mode, inputs, g, steps=None):
        impl = "gemm" if steps is not None else forward
        calls.append((impl, mode))
        if impl == "broken":
            raise RuntimeError("no kernel\nsecond line")
        return next(times), 1.5, {"first": True}

    monkeypatch.setattr(harness, "measure", fake_measure)
    gemm_steps = lambda inputs, g: {"fwd": None}  # noqa: E731  a floor with a forward only
    with harness.timing_rounds(3):
        rows = harness.run_suite("toy", [(4, 8)], ("d", "N"), torch.float32, ["fused", "broken", "gemm"],
                                 ["fwd", "fwd+bwd"], lambda shape, dtype: ((), None), lambda impl: impl,
                                 gemm_steps, {"fwd": 1, "fwd+bwd": 3}, lambda shape: 1e9)
    assert harness.ROUNDS == 1  # restored
    order = [impl for impl, _ in calls]
    assert order == ["fused", "fused", "broken", "broken", "gemm",  # round 1
                     "gemm", "fused", "fused",  # round 2, reversed; broken not retried
                     "fused", "fused", "gemm"]  # round 3
    by_key = {(r.impl, r.mode): r for r in rows}
    assert set(by_key) == {("fused", "fwd"), ("fused", "fwd+bwd"), ("broken", "fwd"), ("broken", "fwd+bwd"),
                           ("gemm", "fwd")}
    fused_fwd = by_key["fused", "fwd"]
    assert fused_fwd.extra["ms_rounds"] == [3.0, 5.0, 4.0] and fused_fwd.ms == 4.0
    assert by_key["fused", "fwd+bwd"].extra["ms_rounds"] == [1.0, 7.0, 6.0] and by_key["fused", "fwd+bwd"].ms == 6.0
    assert by_key["gemm", "fwd"].ms == 8.0 and by_key["gemm", "fwd"].extra["ms_rounds"] == [2.0, 9.0, 8.0]
    assert fused_fwd.peak_mib == 1.5 and fused_fwd.extra["first"] is True
    assert fused_fwd.tflops == pytest.approx(1e9 / (4.0e-3) / 1e12)
    assert by_key["broken", "fwd"].note == "failed: RuntimeError: no kernel" and by_key["broken", "fwd"].ms is None
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        with harness.timing_rounds(0):
            pass


def test_gpu_clock_sampler_summarises_what_it_read():
    """The sampler reads at its start, every interval while open and at its stop (a short timing
    still gets two samples), skips reads NVML refused, and summarises: clock median and lowest,
    power median, hottest."""
    import itertools
    import time

    from fusedmlp.bench import gpu_clock

    values = itertools.cycle([(1980, 120.0, 40), None, (1410, 699.5, 63), (1500, 690.0, 60)])
    sampler = gpu_clock.Sampler(lambda: next(values), interval=0.001)
    with sampler:
        time.sleep(0.05)
    assert len(sampler.samples) >= 3 and None not in sampler.samples
    clocks = [c for c, _, _ in sampler.samples]
    summary = sampler.summary()
    assert summary["sm_mhz"] == statistics.median(clocks) and summary["sm_mhz_min"] == min(clocks)
    assert summary["temp_c"] == max(t for _, _, t in sampler.samples)
    short = gpu_clock.Sampler(lambda: (1755, 650.0, 55), interval=60)
    with short:
        pass
    assert short.samples == [(1755, 650.0, 55)] * 2
    assert gpu_clock.Sampler(lambda: None).summary() == {}
    if not torch.cuda.is_available():  # no NVIDIA driver: nothing sampled, nothing claimed
        with gpu_clock.sampling() as clock:
            pass
        assert clock.summary() == {} and gpu_clock.device_limits() == {}
        assert harness.with_clock(lambda a, b: a + b, 1, 2) == (3, {})


def test_run_suite_records_the_clock_of_each_measurement(monkeypatch):
    """Each measurement carries the GPU's clock over its timings: with rounds, the median of the
    rounds' medians, the lowest sample, the median power and the highest temperature, and each
    round's clock; the run's sentence names the range. ``measure`` is a stand-in (no GPU)."""
    from fusedmlp.bench import gpu_clock

    clocks = iter([(1500, 1410, 690.0, 60), (1900, 1800, 300.0, 45), (1700, 1600, 650.0, 63)])

    def fake_measure(forward, mode, inputs, g, steps=None):
        mhz, low, watts, celsius = next(clocks)
        return 1.0, 1.0, {"sm_mhz": mhz, "sm_mhz_min": low, "power_w": watts, "temp_c": celsius}

    monkeypatch.setattr(harness, "measure", fake_measure)
    with harness.timing_rounds(3):
        [row] = harness.run_suite("toy", [(4, 8)], ("d", "N"), torch.float32, ["fused"], ["fwd"],
                                  lambda shape, dtype: ((), None), lambda impl: impl, None, {"fwd": 1},
                                  lambda shape: 1e9)
    assert row.extra == {"sm_mhz": 1700, "sm_mhz_min": 1410, "power_w": 650.0, "temp_c": 63,
                         "sm_mhz_rounds": [1500, 1900, 1700], "ms_rounds": [1.0, 1.0, 1.0]}
    line = harness.clock_line([row], {"sm_max_mhz": 1980, "power_limit_w": 700.0})
    assert line.startswith("GPU during the timings: SM clock medians 1700-1700 MHz of 1980, lowest sample 1410; "
                           "board power medians up to 650 W (limit 700 W); up to 63 C")
    assert harness.clock_line([harness.Measurement("toy", {}, "float32", "fused", "fwd", ms=1.0)], {}) is None
    assert gpu_clock.merge([{}, {}]) == {}


def test_interleaved_ms_alternates_the_order(monkeypatch):
    """harness.interleaved_ms calls each callable once untimed, then times them round by round,
    every other round in reverse order (``median_ms`` replaced by a recorder: no GPU here)."""
    timed, untimed = [], []
    times = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    monkeypatch.setattr(harness, "median_ms", lambda fn: timed.append(fn()) or next(times))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls = {"a": lambda: "a", "b": lambda: "b", "c": lambda: "c"}
    result = harness.interleaved_ms({name: (lambda f=f: untimed.append(f()) or f()) for name, f in calls.items()}, 2)
    assert untimed[:3] == ["a", "b", "c"] and timed == ["a", "b", "c", "c", "b", "a"]
    assert result == {"a": [1.0, 6.0], "b": [2.0, 5.0], "c": [3.0, 4.0]}


def test_interleaved_us_row_and_write_record(tmp_path, monkeypatch, capsys):
    """The benchmark scripts' row (fields, medians over the rounds in us, the rounds in ms,
    printed as one line) and record ($OUT/SCRIPT.json with the environment and the script's
    own command line); ``median_ms`` replaced by fixed times, no GPU here."""
    times = iter([1.0, 4.0, 3.0, 2.0, 0.5, 0.25])
    monkeypatch.setattr(harness, "median_ms", lambda fn: next(times))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    row = harness.interleaved_us_row({"a": lambda: None, "b": lambda: None}, 3, d=64, r=8)
    assert row == {"d": 64, "r": 8, "a": 1000.0, "b": 3000.0, "rounds_ms": {"a": [1.0, 2.0, 0.5], "b": [4.0, 3.0, 0.25]}}
    assert capsys.readouterr().out.split() == ["64", "8", "{'a':", "1000.0,", "'b':", "3000.0}"]
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["probe.py", "--rounds", "3"])
    harness.write_record("probe", rows=[row])
    record = json.loads((tmp_path / "probe.json").read_text())
    assert record["environment"]["command"] == "python3 benchmarks/probe.py --rounds 3"
    assert record["environment"]["torch"] == torch.__version__ and record["rows"] == [row]


def test_wrap_in_timer_adds_inclusive_time_per_label(monkeypatch):
    """harness.wrap_in_timer: a module's function, an object's method and a class's static
    method keep their results (and exceptions) and add the nanoseconds spent inside them to
    their label's total, nested calls inclusive (the clock replaced by a counter)."""
    import types

    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(harness.time, "perf_counter_ns", lambda: next(clock))
    module = types.SimpleNamespace(inner=lambda v: v + 1)
    module.outer = lambda v: module.inner(v) * 2

    class Owner:
        @staticmethod
        def static(v):
            return -v

        def method(self, v):
            raise ValueError(v)

    totals = {}
    harness.wrap_in_timer(module, "inner", totals)
    harness.wrap_in_timer(module, "outer", totals, "outer call")
    harness.wrap_in_timer(Owner, "static", totals)
    harness.wrap_in_timer(Owner, "method", totals)
    assert module.outer(1) == 4 and Owner.static(3) == -3 and Owner().static(3) == -3
    with pytest.raises(ValueError):
        Owner().method(5)
    # outer: 0 -> 30 (inner 10 -> 20 inside it); static twice; method once
    assert totals == {"inner": 10, "outer call": 30, "static": 20, "method": 10}


def test_host_us_from_idle_times_each_call_after_a_sync(monkeypatch):
    """harness.host_us_from_idle: a synchronisation before every call and one after the last,
    each call's wall time alone (the clock replaced by a script), the median in microseconds."""
    events = []
    monkeypatch.setattr(harness.torch.cuda, "synchronize", lambda: events.append("sync"))
    durations = iter([3e-6, 1e-6, 2e-6])  # seconds per call: the median is 2 us
    now = [0.0]

    def clock():
        return now[0]

    def call():
        events.append("call")
        now[0] += next(durations)

    monkeypatch.setattr(harness.time, "perf_counter", clock)
    assert harness.host_us_from_idle(call, count=3) == pytest.approx(2.0)
    assert events == ["sync", "call"] * 3 + ["sync"]


@pytest.mark.gpu
def test_stepwise_ms_orders_and_times_the_steps():
    """harness.stepwise_ms: rotated rounds call the steps in turn, the order rotated by one
    each time; block rounds call one step ``count`` times, every other round in reverse order;
    a step that keeps the GPU busy longer measures longer, round by round."""
    order = []
    steps = {"slow": lambda: (order.append("slow"), torch.cuda._sleep(2 * 10**6)),
             "fast": lambda: order.append("fast")}
    rotated = harness.stepwise_ms(steps, rounds=2, count=3, skip=1, rotated=True)
    assert order == ["slow", "fast", "fast", "slow", "slow", "fast"] * 2
    order.clear()
    blocks = harness.stepwise_ms(steps, rounds=2, count=2, skip=0, rotated=False)
    assert order == ["slow", "slow", "fast", "fast", "fast", "fast", "slow", "slow"]
    for times in (rotated, blocks):
        assert len(times["slow"]) == len(times["fast"]) == 2
        assert all(slow > fast for slow, fast in zip(times["slow"], times["fast"])), times


@pytest.mark.gpu
def test_graph_steps_keep_a_peers_own_inputs_alive():
    """graph_steps: a peer's adapt_inputs makes tensors of its own that the captured graphs read;
    the replays keep them alive (a replay after they were freed read reused memory, and the
    GEGLU suite's Liger peer hit an illegal address). The replayed output matches eager on
    fresh random inputs after the memory pool has been churned."""
    import gc
    import weakref

    adapted = []

    def adapt(inputs):
        x, w = inputs
        adapted.append(w.detach().clone().mul_(2).requires_grad_())
        return x, adapted[-1]

    outputs = []

    def forward(x, w):
        y = x @ w.t()
        if torch.cuda.is_current_stream_capturing():
            # [0]: the fwd graph's output, rewritten by its replays; detached (a grad_fn holds w)
            outputs.append(y.detach())
        return y

    peer = harness.peer_forward(forward, adapt_inputs=adapt)
    x = torch.randn(256, 128, device="cuda", requires_grad=True)
    w = torch.randn(64, 128, device="cuda", requires_grad=True)
    g = torch.randn(256, 64, device="cuda")
    replays = harness.graph_steps(peer, (x, w), g)
    own = weakref.ref(adapted.pop())
    del adapt
    gc.collect()
    torch.cuda.empty_cache()
    churn = torch.full((64 * 1024 * 1024,), float("nan"), device="cuda")  # reuse freed memory
    del churn
    assert own() is not None, "the replays let the adapted weight go"
    outputs[0].zero_()
    replays["fwd"]()
    torch.cuda.synchronize()
    want = x.detach().double() @ (2 * w.detach().double()).t()
    assert (outputs[0].double() - want).norm() / want.norm() < 1e-2
    del replays
    gc.collect()
    assert own() is None, "the adapted weight outlived its replays"


def test_bench_without_gpu_reports_errors(capsys):
    if torch.cuda.is_available():
        pytest.skip("the no-GPU path")
    assert cli.main(["bench", "geglu"]) == 0
    out = capsys.readouterr().out
    assert "Timings and memory figures need a CUDA GPU" in out
    values = [float(v) for line in out.splitlines() if line.startswith("| float32") for v in line.split("|")[3:7]]
    assert len(values) == 8 and all(v < 1e-5 for v in values)


def test_bench_options_are_checked_without_gpu(capsys, tmp_path, monkeypatch):
    """A typo in the options is reported on any machine (without a GPU, before the interpreter
    check), not only once on a GPU; an --out that cannot be written, before any timing."""
    for options, message in ((["--impls", "fused,bogus"], "unknown or unavailable impl(s) ['bogus']"),
                             (["--modes", "xyz"], "unknown or unavailable mode(s) ['xyz']"),
                             (["--shapes", "nonsense"], "unknown shape preset 'nonsense'"),
                             (["--shapes", "1x2x3"], "geglu shapes are DXN with positive sizes")):
        assert cli.main(["bench", "geglu", *options]) == 2, options
        assert message in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where --out's folder would go
    monkeypatch.setattr(cli, "_prepare_backend", lambda: True)  # as on a GPU machine
    monkeypatch.setattr(glu_suite, "run_gpu", lambda *args, **kwargs: pytest.fail("timed before --out was checked"))
    assert cli.main(["bench", "geglu", "--shapes", "64x128", "--out", str(blocked / "sub")]) == 2
    assert "cannot write there" in capsys.readouterr().err


def test_bench_plot_refuses_what_is_not_a_bench_result(capsys, tmp_path):
    missing, broken, other = tmp_path / "missing.json", tmp_path / "broken.json", tmp_path / "list.json"
    broken.write_text("{not json")
    other.write_text("[1, 2]")
    for path, message in ((missing, "cannot read"), (broken, "cannot read"), (other, "is not the JSON of")):
        assert cli.main(["bench-plot", str(path)]) == 2
        assert message in capsys.readouterr().err


def test_cli_help_names_every_impl_of_every_suite():
    import importlib

    from fusedmlp.bench.suites import SUITES

    bench = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices["bench"]._actions
                 if "--impls" in a.option_strings)
    for name, module in SUITES.items():
        listed = bench.help.split(f"{name}: ", 1)[1].split(";")[0].split(" (")[0].split(",")
        assert set(listed) == set(importlib.import_module(module).IMPLS), name


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "geglu", "--shapes", "1024by8192"])
    assert "is not a list of integers joined by x" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "nosuch"])
    with pytest.raises(SystemExit):
        cli.main(["bench", "mlp", "--backward-thread", "sideways"])
    assert "invalid choice: 'sideways'" in capsys.readouterr().err
    assert cli.main(["bench", "geglu", "--activation", "relu"]) == 2
    assert "--activation applies to the linear_act and swiglu suites, not geglu" in capsys.readouterr().err
    assert cli.main(["bench", "linear_act", "--activation", "swish"]) == 2
    assert "activation must be one of" in capsys.readouterr().err
    assert cli.main(["bench", "swiglu", "--rounds", "0"]) == 2
    assert "--rounds takes a count >= 1, got 0" in capsys.readouterr().err
    assert cli.main(["bench", "dlrm", "--rounds", "3"]) == 2
    assert "--rounds applies to every suite but dlrm" in capsys.readouterr().err
    assert cli.main(["bench", "mlp", "--fp32-precision", "high"]) == 2
    assert "--fp32-precision applies to --dtype fp32, not bf16" in capsys.readouterr().err
    assert cli.main(["bench", "mlp", "--dtype", "fp32", "--autocast"]) == 2
    assert "--autocast runs the geglu, linear_act, swiglu, lora and mlp suites with --dtype bf16 or fp16" in (
        capsys.readouterr().err)
    assert cli.main(["bench", "dlrm", "--autocast"]) == 2
    assert "(got dlrm, bf16)" in capsys.readouterr().err


def test_fp32_precision_is_set_recorded_and_named(tmp_path, monkeypatch):
    """``--fp32-precision high`` sets PyTorch's fp32 matmul precision for the whole run (every
    impl reads it), records it in the files and names them after it; fp32 runs record the
    setting they ran at in any case. ``run_gpu`` is a stand-in (no GPU here)."""
    seen = []

    def fake_run_gpu(shapes, dtype, impls, modes, on_shape_done=None):
        seen.append(torch.get_float32_matmul_precision())
        return [harness.Measurement("mlp", {"batch": 64, "sizes": "13-16"}, "float32", "fused", "fwd", ms=0.1)]

    monkeypatch.setattr(cli, "_prepare_backend", lambda: True)
    monkeypatch.setattr(mlp_suite, "run_gpu", fake_run_gpu)
    monkeypatch.setattr(mlp_suite, "default_impls", lambda max_autotune=False: ["fused"])
    before = torch.get_float32_matmul_precision()
    try:
        for flag, precision, suffix in ((["--fp32-precision", "high"], "high", "_high"), ([], "highest", "")):
            torch.set_float32_matmul_precision("highest")
            out = tmp_path / precision
            assert cli.main(["bench", "mlp", "--dtype", "fp32", "--shapes", "64x13x16", "--out", str(out), *flag]) == 0
            assert seen[-1] == precision
            [path] = out.glob("mlp_fp32_*.json")
            assert ("_high" in path.stem) == bool(suffix)
            assert json.loads(path.read_text())["environment"]["float32_matmul_precision"] == precision
    finally:
        torch.set_float32_matmul_precision(before)


def test_autocast_run_is_set_recorded_and_named(tmp_path, monkeypatch):
    """``--autocast`` puts run_suite in mixed precision for the run (and out of it after),
    records the dtype in the files and names them after it. ``run_gpu`` is a stand-in."""
    seen = []

    def fake_run_gpu(shapes, dtype, impls, modes, on_shape_done=None):
        seen.append(harness.AUTOCAST)
        return [harness.Measurement("mlp", {"batch": 64, "sizes": "13-16"}, "bfloat16", "fused", "fwd", ms=0.1)]

    monkeypatch.setattr(cli, "_prepare_backend", lambda: True)
    monkeypatch.setattr(mlp_suite, "run_gpu", fake_run_gpu)
    monkeypatch.setattr(mlp_suite, "default_impls", lambda max_autotune=False: ["fused"])
    for flag, autocast in ((["--autocast"], torch.bfloat16), ([], None)):
        out = tmp_path / str(autocast)
        assert cli.main(["bench", "mlp", "--shapes", "64x13x16", "--out", str(out), *flag]) == 0
        assert seen[-1] == autocast and harness.AUTOCAST is None
        [path] = out.glob("mlp_bf16_*.json")
        assert path.stem.endswith("_autocast") == bool(flag)
        assert json.loads(path.read_text())["environment"].get("autocast") == ("bfloat16" if flag else None)
    with pytest.raises(ValueError, match="autocast runs in float16 or bfloat16"):
        with harness.autocast_run(torch.float32):
            pass


def test_run_suite_under_autocast_keeps_fp32_weights(monkeypatch):
    """In an autocast run x and g come in the run's dtype, the other inputs as fp32 copies
    that require grad as the suite's did, each forward and each prepared step run inside
    ``torch.autocast("cuda", dtype)`` with its weight cache off (a graph captured with it on
    reads freed copies), and the GEMM floor gets every input in the run's dtype.
    ``measure`` and ``torch.autocast`` are recorders here (no GPU)."""
    entered, seen = [], {}

    class FakeAutocast:
        def __init__(self, device_type, dtype, cache_enabled=True):
            self.args = (device_type, dtype, cache_enabled)

        def __enter__(self):
            entered.append(self.args)

        def __exit__(self, *exc):
            entered.append("exit")

    def fake_measure(forward, mode, inputs, g, steps=None):
        if steps is None:
            seen[mode] = forward(*inputs)
        else:
            seen["gemm"] = steps
        return 1.0, 0.0, {}

    def make_inputs(shape, dtype):
        x = torch.randn(4, 8, dtype=dtype, requires_grad=True)
        w = torch.randn(6, 8, dtype=dtype, requires_grad=True)
        frozen = torch.randn(6, dtype=dtype)
        return (x, w, frozen), torch.randn(4, 6, dtype=dtype)

    monkeypatch.setattr(harness, "measure", fake_measure)
    monkeypatch.setattr(torch, "autocast", FakeAutocast)
    gemm_steps = lambda inputs, g: {"fwd": [t.dtype for t in inputs]}  # noqa: E731
    forward = lambda x, w, frozen: (x.dtype, w.dtype, w.requires_grad, frozen.dtype, frozen.requires_grad)  # noqa: E731
    with harness.autocast_run(torch.bfloat16):
        harness.run_suite("toy", [(4, 8)], ("d", "N"), torch.bfloat16, ["fused", "gemm"], ["fwd"], make_inputs,
                          lambda impl: forward, gemm_steps, {"fwd": 1}, lambda shape: 1e9)
    assert seen["fwd"] == (torch.bfloat16, torch.float32, True, torch.float32, False)
    assert seen["gemm"]["fwd"] == [torch.bfloat16] * 3
    assert entered == [("cuda", torch.bfloat16, False), "exit"] * 2  # the forward; the floor's preparation


def test_run_suite_gives_a_peer_its_own_inputs_and_modes(monkeypatch):
    """A forward marked by ``peer_forward`` is measured on its adapted inputs (adapted once per
    shape, not per mode), only in its modes, and its graphed impl captures only those modes
    from the adapted inputs too. ``measure`` and the capture are recorders (no GPU)."""
    seen, adapted = [], []

    def fake_measure(forward, mode, inputs, g, steps=None):
        seen.append((mode, "steps" if steps is not None else forward(*inputs)))
        return 1.0, 0.0, {}

    def adapt(inputs):
        adapted.append(len(inputs))
        return inputs[0] * 2, inputs[1]

    def make_forward(impl):
        forward = lambda a, b, *rest: (a.sum().item(), b.shape)  # noqa: E731
        return harness.peer_forward(forward, adapt_inputs=adapt, modes=("fwd",)) if impl.startswith("peer") else forward

    captured = []
    monkeypatch.setattr(harness, "measure", fake_measure)
    monkeypatch.setattr("fusedmlp._cuda_graph.capture_cuda_graph",
                        lambda fn: captured.append(fn()) or (type("G", (), {"replay": None}), None))
    inputs = (torch.ones(3), torch.zeros(2), torch.zeros(5))
    rows = harness.run_suite("toy", [(4, 8)], ("d", "N"), torch.float32, ["plain", "peer", "peer_graph"],
                             ["fwd", "bwd", "fwd+bwd"], lambda shape, dtype: (inputs, None), make_forward,
                             None, {"fwd": 1, "bwd": 2, "fwd+bwd": 3}, lambda shape: 1e9)
    assert [(r.impl, r.mode, r.note) for r in rows] == [(impl, mode, "") for impl, mode in (
        ("plain", "fwd"), ("plain", "bwd"), ("plain", "fwd+bwd"), ("peer", "fwd"), ("peer_graph", "fwd"))]
    assert seen[:3] == [(mode, (3.0, (2,))) for mode in ("fwd", "bwd", "fwd+bwd")]  # the suite's inputs
    assert seen[3:] == [("fwd", (6.0, (2,))), ("fwd", "steps")]
    assert captured == [(6.0, (2,))]  # the graph: the forward alone, on the adapted inputs
    assert adapted == [3, 3]  # once for the plain peer, once for its capture


def _quack_gated(x, weight, bias, act):
    """QuACK's documented gated rule (its ``gemm_gated_ref``) in plain PyTorch: the pre-activation's
    even columns are the gate, the odd ones up, and the output is act(gate) * up."""
    pre = torch.nn.functional.linear(x, weight, bias)
    return act(pre[..., 0::2]) * pre[..., 1::2]


def test_quack_layouts_give_the_suites_ops():
    """QuACK's gated epilogue splits its pre-activation as gate = columns 0, 2, 4, ... and
    up = columns 1, 3, 5, ... (its reference ``gemm_gated_ref``) and computes act(gate) * up:
    the suites' weights packed by ``quack.interleaved`` give through that rule the ops the
    suites time (no QuACK needed: its documented rule in plain PyTorch)."""
    from fusedmlp.bench import quack
    from fusedmlp.ops.glu import geglu_reference
    from fusedmlp.ops.swiglu import swiglu_reference

    gated = _quack_gated
    x = torch.randn(7, 12, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * 10, 12, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2 * 10, dtype=torch.float64, requires_grad=True)
    x_q, w_q, b_q = quack.geglu_forward().adapt_inputs((x, w, b))
    assert x_q is x and w_q.is_leaf and w_q.requires_grad and b_q.is_leaf
    gelu_tanh = lambda t: torch.nn.functional.gelu(t, approximate="tanh")  # noqa: E731
    torch.testing.assert_close(gated(x, w_q, b_q, gelu_tanh), geglu_reference(x, w, b), rtol=1e-12, atol=1e-12)
    assert quack.geglu_forward().adapt_inputs((x, w, None))[2] is None

    w_gate, w_up, w_down = (torch.randn(o, i, dtype=torch.float64) for o, i in ((9, 12), (9, 12), (12, 9)))
    x_q, w_gate_up, w_down_q = quack.swiglu_forward(recompute=False).adapt_inputs((x, w_gate, w_up, w_down))
    assert w_down_q is w_down and w_gate_up.shape == (18, 12) and not w_gate_up.requires_grad
    y = torch.nn.functional.linear(gated(x, w_gate_up, None, torch.nn.functional.silu), w_down)
    torch.testing.assert_close(y, swiglu_reference(x, w_gate, w_up, w_down), rtol=1e-12, atol=1e-12)
    assert quack.geglu_forward().modes == quack.linear_act_forward("relu").modes == ("fwd",)
    assert quack.swiglu_forward(recompute=True).modes is None  # its MLP has a backward: every mode
    with pytest.raises(ValueError, match="QuACK has no sigmoid epilogue"):
        quack.linear_act_forward("sigmoid")(x, w, b)


def test_quack_impls_call_its_functions_as_documented(monkeypatch):
    """The suites' quack impls, end to end on a stand-in for QuACK's three functions that follows
    their documented contracts (reference semantics, the returned (preact, postact) pair,
    mlp_func's recompute flag): each impl's output equals the suite's op on the suite's inputs,
    and SwiGLU's gradients reach the packed weight. No QuACK needed."""
    import sys
    import types

    from fusedmlp.bench.suites import linear_act as linear_suite
    from fusedmlp.bench.suites import swiglu as swiglu_suite
    from fusedmlp.ops.activations import activation_reference
    from fusedmlp.ops.glu import geglu_reference
    from fusedmlp.ops.swiglu import swiglu_reference

    F = torch.nn.functional
    gate_fns = {"geglu": lambda t: F.gelu(t, approximate="tanh"), "swiglu": F.silu}
    act_fns = {None: lambda t: t, "relu": F.relu, "relu_sq": lambda t: F.relu(t).square(),
               "gelu_tanh_approx": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}
    calls = []

    def linear_gated_func(x, weight, activation, bias=None, store_preact=True):
        pre = F.linear(x, weight, bias) if store_preact else None
        return pre, _quack_gated(x, weight, bias, gate_fns[activation])

    def linear_act_func(x, weight, activation, bias=None, store_preact=True):
        pre = F.linear(x, weight, bias)
        return (pre if store_preact else None), act_fns[activation](pre)

    def mlp_func(x, weight1, weight2, activation, recompute=False):
        calls.append(recompute)
        return F.linear(linear_gated_func(x, weight1, activation)[1], weight2)

    package = types.ModuleType("quack")
    package.mlp = types.SimpleNamespace(mlp_func=mlp_func)
    package.linear = types.SimpleNamespace(linear_gated_func=linear_gated_func, linear_act_func=linear_act_func)
    for name, module in (("quack", package), ("quack.mlp", package.mlp), ("quack.linear", package.linear)):
        monkeypatch.setitem(sys.modules, name, module)

    def run(forward, inputs):
        return forward(*harness.own_inputs(forward, inputs))

    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    weights = [torch.randn(o, i, dtype=torch.float64, requires_grad=True) for o, i in ((5, 8), (5, 8), (8, 5))]
    for impl in ("quack", "quack_recompute"):
        forward = swiglu_suite._forward_fn(impl)
        own = harness.own_inputs(forward, (x, *weights))
        y = forward(*own)
        torch.testing.assert_close(y, swiglu_reference(x, *weights), rtol=1e-12, atol=1e-12)
        y.sum().backward()
        assert own[1].grad is not None and own[1].grad.shape == (10, 8)
    assert calls == [False, True]

    w, b = torch.randn(2 * 7, 8, dtype=torch.float64), torch.randn(2 * 7, dtype=torch.float64)
    torch.testing.assert_close(run(glu_suite._forward_fn("quack"), (x, w, b)), geglu_reference(x, w, b),
                               rtol=1e-12, atol=1e-12)
    w, b = torch.randn(7, 8, dtype=torch.float64), torch.randn(7, dtype=torch.float64)
    monkeypatch.setattr(linear_suite, "ACTIVATION", linear_suite.ACTIVATION)  # restored afterwards
    for act in ("gelu_tanh", "relu", "squared_relu", "silu", "identity"):
        linear_suite.set_activation(act)
        torch.testing.assert_close(run(linear_suite._forward_fn("quack"), (x, w, b)),
                                   activation_reference(F.linear(x, w, b), act), rtol=1e-12, atol=1e-12)


def test_quack_is_offered_where_it_runs(monkeypatch):
    """The suites list QuACK's impls only where it imports, and linear_act only for the
    activations it has."""
    from fusedmlp.bench import quack
    from fusedmlp.bench.suites import linear_act as linear_suite
    from fusedmlp.bench.suites import swiglu as swiglu_suite

    for present in (False, True):
        monkeypatch.setattr(harness, "module_importable",
                            lambda name, present=present: present if name == quack.MODULE else False)
        assert ("quack" in glu_suite.default_impls()) == present
        assert ({"quack", "quack_recompute"} <= set(swiglu_suite.default_impls())) == present
        monkeypatch.setattr(linear_suite, "ACTIVATION", "gelu_tanh")
        assert ("quack" in linear_suite.default_impls()) == present
        monkeypatch.setattr(linear_suite, "ACTIVATION", "gelu")  # QuACK has no erf gelu
        assert "quack" not in linear_suite.default_impls()


def test_linear_act_suite_takes_the_activation(monkeypatch):
    from fusedmlp.bench.suites import linear_act as linear_suite

    monkeypatch.setattr(linear_suite, "ACTIVATION", linear_suite.ACTIVATION)  # restored afterwards
    linear_suite.set_activation("gelu")
    x, w = torch.randn(5, 8, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    pre = x @ w.t() + b
    assert torch.allclose(linear_suite.eager_linear_act(x, w, b), torch.nn.functional.gelu(pre))


def test_swiglu_suite_takes_the_gate_activation(monkeypatch):
    """``--activation`` on the swiglu suite: every impl gates with it (fused and eager against
    the float64 reference); Liger only for silu and gelu_tanh, QuACK only for silu."""
    from fusedmlp.bench import quack
    from fusedmlp.bench.suites import swiglu as swiglu_suite
    from fusedmlp.ops.swiglu import swiglu_reference

    monkeypatch.setattr(swiglu_suite, "ACTIVATION", swiglu_suite.ACTIVATION)  # restored afterwards
    monkeypatch.setattr(harness, "module_importable", lambda name: name in (quack.MODULE, "liger_kernel.ops.geglu"))
    x, wg, wu, wd = (torch.randn(*shape, dtype=torch.float64) for shape in [(5, 8), (12, 8), (12, 8), (8, 12)])
    for act, liger, quack_offered in (("silu", False, True), ("gelu_tanh", True, False), ("relu", False, False)):
        swiglu_suite.set_activation(act)
        impls = swiglu_suite.default_impls()
        assert ("liger" in impls, "quack" in impls, "quack_recompute" in impls) == (liger, quack_offered, quack_offered)
        want = swiglu_reference(x, wg, wu, wd, act)
        torch.testing.assert_close(swiglu_suite.eager_swiglu(x, wg, wu, wd), want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(swiglu_suite._forward_fn("fused")(x, wg, wu, wd), want, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="activation must be one of"):
        swiglu_suite.set_activation("tanh")


def _silu_mul_stand_in():
    """Liger's SiLU-mul Function, stood in for by its formula (Liger is not installed everywhere)."""
    class SiluMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, gate, up):
            ctx.save_for_backward(gate, up)
            return torch.nn.functional.silu(gate) * up

        @staticmethod
        def backward(ctx, grad):
            with torch.enable_grad():
                gate, up = (t.detach().requires_grad_() for t in ctx.saved_tensors)
                return torch.autograd.grad(torch.nn.functional.silu(gate) * up, (gate, up), grad)

    return SiluMul


def test_swiglu_suite_packed_layout(monkeypatch):
    """``--packed``: every impl takes the one [2*hidden, d] weight [gate; up] and computes the
    feed-forward of its halves (fused, eager and the Liger peer against the float64 reference,
    the packed weight's gradient too); QuACK is not offered."""
    import sys
    import types

    from fusedmlp.bench import quack
    from fusedmlp.bench.suites import swiglu as swiglu_suite
    from fusedmlp.ops.swiglu import swiglu_reference

    monkeypatch.setattr(swiglu_suite, "ACTIVATION", swiglu_suite.ACTIVATION)  # both restored afterwards
    monkeypatch.setattr(swiglu_suite, "PACKED", swiglu_suite.PACKED)
    monkeypatch.setattr(harness, "module_importable", lambda name: True)
    monkeypatch.setitem(sys.modules, "liger_kernel.ops.swiglu",
                        types.SimpleNamespace(LigerSiLUMulFunction=_silu_mul_stand_in()))
    assert quack.MODULE and "quack" in swiglu_suite.default_impls()
    swiglu_suite.set_packed(True)
    impls = swiglu_suite.default_impls()
    assert "liger" in impls and "quack" not in impls and "quack_recompute" not in impls
    hidden = 12
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    w_gate_up = torch.randn(2 * hidden, 8, dtype=torch.float64, requires_grad=True)
    w_down = torch.randn(8, hidden, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 8, dtype=torch.float64)
    for act, impls in (("silu", ("fused", "fused_recompute", "eager", "liger")), ("gelu_tanh", ("fused", "eager"))):
        swiglu_suite.set_activation(act)
        want = swiglu_reference(x, w_gate_up[:hidden], w_gate_up[hidden:], w_down, act)
        want_grads = torch.autograd.grad(want, (x, w_gate_up, w_down), g)
        for impl in impls:
            got = swiglu_suite._forward_fn(impl)(x, w_gate_up, w_down)
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{act} {impl}")
            for grad, want_grad in zip(torch.autograd.grad(got, (x, w_gate_up, w_down), g), want_grads):
                torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-10, msg=f"{act} {impl}")


@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
def test_swiglu_gemm_floor_does_the_models_gemm_work(monkeypatch, packed):
    """The GEMM floor's steps multiply-add what the suite's TFLOP/s counts (3 / 6 / 9 GEMMs of
    tokens x d x hidden), in either weight layout (counted by PyTorch's FlopCounterMode)."""
    from torch.utils.flop_counter import FlopCounterMode

    from fusedmlp.bench.suites import swiglu as swiglu_suite

    monkeypatch.setattr(swiglu_suite, "PACKED", packed)
    tokens, d, hidden = 6, 8, 12
    weights = [(2 * hidden, d), (d, hidden)] if packed else [(hidden, d), (hidden, d), (d, hidden)]
    inputs = (torch.randn(tokens, d), *(torch.randn(*shape) for shape in weights))
    steps = swiglu_suite._gemm_steps(inputs, torch.randn(tokens, d))
    for mode, gemms in (("fwd", 3), ("bwd", 6), ("fwd+bwd", 9)):
        with FlopCounterMode(display=False) as counter:
            steps[mode]()
        assert counter.get_total_flops() == gemms * 2 * tokens * d * hidden, mode


def test_swiglu_packed_option_is_set_recorded_and_named(tmp_path, monkeypatch, capsys):
    """``fusedmlp bench swiglu --packed`` runs the suite in the packed layout, records it and
    names the files after it; the next run without it is in the separate layout again; other
    suites refuse it. Without a GPU the accuracy check takes the packed op. ``run_gpu`` is a
    stand-in (no GPU here)."""
    from fusedmlp.bench.suites import swiglu as swiglu_suite

    monkeypatch.setattr(swiglu_suite, "PACKED", swiglu_suite.PACKED)  # restored afterwards
    assert cli.main(["bench", "geglu", "--packed"]) == 2
    assert "--packed applies to the swiglu suite, not geglu" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli.main(["bench", "swiglu", "--packed", "--dtype", "fp32"]) == 0
        out = capsys.readouterr().out
        assert "err dW_gate_up" in out
        errors = [float(v) for line in out.splitlines() if line.startswith("| float32")
                  for v in line.split("|")[-5:-1]]
        assert len(errors) == 8 and all(e < 1e-5 for e in errors), errors
    seen = []

    def fake_run_gpu(shapes, dtype, impls, modes, on_shape_done=None):
        seen.append(swiglu_suite.PACKED)
        return [harness.Measurement("swiglu", {"tokens": 64, "d": 16, "hidden": 32}, "bfloat16", "fused", "fwd",
                                    ms=0.1)]

    monkeypatch.setattr(cli, "_prepare_backend", lambda: True)
    monkeypatch.setattr(swiglu_suite, "run_gpu", fake_run_gpu)
    for flag in (["--packed"], []):
        out = tmp_path / ("packed" if flag else "separate")
        assert cli.main(["bench", "swiglu", "--shapes", "64x16x32", "--impls", "fused", "--out", str(out), *flag]) == 0
        assert seen[-1] == bool(flag)
        [path] = out.glob("swiglu_bf16_*.json")
        assert path.stem.endswith("_packed") == bool(flag)
        assert json.loads(path.read_text())["environment"].get("packed") == (True if flag else None)


def test_default_impls():
    impls = glu_suite.default_impls()
    assert impls[:4] == ["fused", "fused_store", "eager", "compile"] and "gemm" in impls
    assert {"fused_graph", "fused_store_graph", "eager_graph", "compile_graph"} <= set(impls)
    assert "compile_max" not in impls and "compile_max" in glu_suite.default_impls(max_autotune=True)
    assert ("liger" in impls) == ("liger_graph" in impls) == glu_suite.liger_available()


def test_liger_geglu_peer_holds_the_halves_as_its_own_leaves(monkeypatch):
    """The Liger peer gets the packed weight's halves as tensors of their own, as a model using
    Liger stores them (slicing the packed weight in each call would give its backward two
    zero-filled full-size gradients more), and computes x1 * gelu_tanh(x2). Liger's GELU-mul
    function is stood in for by its formula (Liger is not installed everywhere)."""
    import sys
    import types

    class GeluMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, gate, up):
            ctx.save_for_backward(gate, up)
            return torch.nn.functional.gelu(gate, approximate="tanh") * up

        @staticmethod
        def backward(ctx, grad):
            with torch.enable_grad():
                gate, up = (t.detach().requires_grad_() for t in ctx.saved_tensors)
                return torch.autograd.grad(torch.nn.functional.gelu(gate, approximate="tanh") * up, (gate, up), grad)

    monkeypatch.setitem(sys.modules, "liger_kernel.ops.geglu", types.SimpleNamespace(LigerGELUMulFunction=GeluMul))
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(16, dtype=torch.float64, requires_grad=True)
    adapted = harness.own_inputs(glu_suite.liger_geglu, (x, w, b))
    assert adapted[0] is x and all(t.is_leaf and t.requires_grad for t in adapted[1:])
    assert [tuple(t.shape) for t in adapted[1:]] == [(8, 4), (8, 4), (8,), (8,)]
    torch.testing.assert_close(glu_suite.liger_geglu(*adapted), glu_suite.eager_geglu(x, w, b))


def test_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "fusedmlp" in out and "backend" in out


@pytest.mark.parametrize("suite", ["linear_act", "swiglu", "mlp"])
def test_new_suites_cpu_check(capsys, suite):
    """Without a GPU each suite runs its interpreted accuracy check: every error small."""
    if torch.cuda.is_available():
        pytest.skip("the CPU path")
    assert cli.main(["bench", suite, "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    errors = [float(v) for line in out.splitlines() if line.startswith("| float32")
              for v in line.split("|")[-6:-1] if v.strip() and v.strip()[0].isdigit()]
    assert len(errors) >= 8 and all(e < 1e-5 for e in errors), errors


def test_generic_summary_and_bar_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from fusedmlp.bench.plot import plot_results
    from fusedmlp.bench.suites import linear_act as linear_act_suite
    from fusedmlp.bench.suites import lora as lora_suite
    from fusedmlp.bench.suites import swiglu as swiglu_suite

    rows = [harness.Measurement("swiglu", {"tokens": 64, "d": 16, "hidden": 40}, "bfloat16", impl, mode,
                                ms=0.1 * (k + 1), peak_mib=3.0 * (k + 1))
            for mode in swiglu_suite.MODES for k, impl in enumerate(("fused", "eager", "compile", "gemm"))]
    headers, table = swiglu_suite.summary_table(rows)
    first = dict(zip(headers, table[0]))
    assert first["tokens"] == 64 and first["hidden"] == 40 and first["mode"] == "fwd"
    assert first["fused/compile"] == pytest.approx(0.1 / 0.3) and first["fused/gemm"] == pytest.approx(0.1 / 0.4)
    json_path = tmp_path / "swiglu.json"
    harness.write_json(json_path, harness.environment(), rows)

    # graphed impls: the plain fused step is not set against a graphed peer, the graphed one
    # against every peer; a graphed backward alone is not measured (no row, no ratio)
    graphed = rows + [harness.Measurement("swiglu", rows[0].shape, "bfloat16", impl, mode, ms=ms)
                      for impl, ms in (("fused_graph", 0.05), ("compile_graph", 0.2)) for mode in ("fwd", "fwd+bwd")]
    headers, table = swiglu_suite.summary_table(graphed)
    lines = {line[headers.index("mode")]: dict(zip(headers, line)) for line in table}
    assert "fused/compile_graph" not in headers and "fused_graph ms" in headers
    assert lines["fwd"]["fused_graph/compile_graph"] == pytest.approx(0.25)
    assert lines["fwd"]["fused_graph/eager"] == pytest.approx(0.05 / 0.2)
    assert lines["bwd"]["fused_graph ms"] is None and lines["bwd"]["fused_graph/compile_graph"] is None
    assert all("fused_graph" in suite.IMPLS and "compile_graph" in suite.PEERS
               for suite in (swiglu_suite, linear_act_suite, lora_suite, glu_suite, mlp_suite))
    png = plot_results(json_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # labels as long as mlp's shapes are drawn tilted (matplotlib takes the text properties)
    long_rows = [harness.Measurement("mlp", {"batch": 2048, "sizes": "13-512-256-64-16"}, "bfloat16", impl, mode,
                                     ms=0.1, peak_mib=1.0)
                 for mode in ("fwd", "fwd+bwd") for impl in ("fused", "eager")]
    harness.write_json(tmp_path / "mlp.json", harness.environment(), long_rows)
    assert plot_results(tmp_path / "mlp.json").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mlp_suite_shapes():
    from fusedmlp.bench.suites import mlp as mlp_suite

    assert mlp_suite.check_shape((2048, 13, 512, 256, 64, 16)) is None
    assert "BATCHxINx...xOUT" in mlp_suite.check_shape((2048, 13))
    assert "BATCHxINx...xOUT" in mlp_suite.check_shape((2048, 13, 0))
    assert all(mlp_suite.check_shape(s) is None for s in mlp_suite.SHAPE_PRESETS["full"])


def test_dlrm_suite_cpu_check_shapes_and_summary(capsys):
    from fusedmlp.bench.suites import dlrm as dlrm_suite

    assert dlrm_suite.check_shape((2048,)) is None and "BATCH" in dlrm_suite.check_shape((2048, 13))
    rows = [harness.Measurement("dlrm", {"batch": 4096}, "float32", impl, "train", ms=ms)
            for impl, ms in (("fused", 1.0), ("eager", 2.0), ("compile", 4.0), ("fused_graph", 0.5),
                             ("compile_graph", 3.0))]
    headers, table = dlrm_suite.summary_table(rows)
    line = dict(zip(headers, table[0]))
    assert line["fused M/s"] == pytest.approx(4.096) and line["fused/eager"] == pytest.approx(0.5)
    assert line["fused/compile"] == pytest.approx(0.25)
    # the plain fused step is not set against a graphed peer; the graphed one against every peer
    assert "fused/compile_graph" not in line and line["fused_graph/compile_graph"] == pytest.approx(0.5 / 3)
    assert line["fused_graph/eager"] == pytest.approx(0.25)
    if torch.cuda.is_available():
        return
    assert cli.main(["bench", "dlrm", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("| float32"))
    errors = [float(v.split()[0]) for v in line.split("|")[3:5]]
    assert all(e < 1e-5 for e in errors), line
