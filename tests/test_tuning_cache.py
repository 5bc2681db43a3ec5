"""The tuning cache (kernels/tuning_cache.py): choices filed on disk and taken by a new process.

The CPU tests drive ``FastestForm`` with a stand-in timer and a stand-in Triton tuner, each
"process" being a fresh ``TuningCache`` over the same folder; the GPU test runs two real
processes and checks that the second times nothing and computes the same bits.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from fusedmlp.kernels import configs as kernel_configs
from fusedmlp.kernels import tuning_cache
from fusedmlp.ops import _common
from fusedmlp.ops._common import FastestForm

FIELDS = ("device", "dtype", "m_key", "n")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache over tmp_path, a stand-in GPU name per device index, tuning on."""
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path))
    monkeypatch.setattr(tuning_cache, "device_identity", lambda device: f"Test-GPU-{device}_sm90")
    monkeypatch.setattr(kernel_configs, "AUTOTUNE", True)
    return new_process(monkeypatch)


def new_process(monkeypatch):
    """What a new process starts from: a TuningCache that has read nothing yet."""
    fresh = tuning_cache.TuningCache()
    monkeypatch.setattr(tuning_cache, "TUNING_CACHE", fresh)
    monkeypatch.setattr(_common, "TUNING_CACHE", fresh)
    return fresh


class Timer:
    def __init__(self, times):
        self.times, self.calls = times, 0

    def __call__(self, forms):
        self.calls += 1
        assert set(forms) == set(self.times)
        return dict(self.times)


def choose(chooser, key, names=("a", "b", "c"), rule="a"):
    launched = []
    chooser.run(key, names, rule, launched.append)
    return launched[0]


def test_form_choice_is_filed_and_taken_by_a_new_process(cache, monkeypatch, tmp_path):
    key = (0, torch.bfloat16, 4096, 1792)
    timer = Timer({"a": 2.0, "b": 0.5, "c": 1.0})
    assert choose(FastestForm(timer=timer, fields=FIELDS, name="test"), key) == "b"
    assert timer.calls == 1
    (path,) = tmp_path.glob("tuning_*.json")
    assert path.name.startswith("tuning_Test-GPU-0_sm90_triton") and tuning_cache.code_hash() in path.name
    payload = json.loads(path.read_text())
    assert payload["entries"]["form:test"] == {json.dumps([None, "torch.bfloat16", 4096, 1792]):
                                               {"chosen": "b", "ms": {"a": 2.0, "b": 0.5, "c": 1.0}}}

    new_process(monkeypatch)
    untimed = Timer({"a": 2.0, "b": 0.5, "c": 1.0})
    later = FastestForm(timer=untimed, fields=FIELDS, name="test")
    assert choose(later, key) == "b" and untimed.calls == 0
    assert later.times[key] == {"a": 2.0, "b": 0.5, "c": 1.0}  # the bench JSON lists them
    # another shape, another GPU model (its own file), or a filed form not offered: timed
    assert choose(later, (0, torch.bfloat16, 8192, 1792)) == "b" and untimed.calls == 1
    assert choose(later, (1, torch.bfloat16, 4096, 1792)) == "b" and untimed.calls == 2
    assert len(list(tmp_path.glob("tuning_*.json"))) == 2
    # another GPU of the same model: the same file and the same entry
    monkeypatch.setattr(tuning_cache, "device_identity", lambda device: "Test-GPU-0_sm90")
    new_process(monkeypatch)
    same_model = Timer({"a": 2.0, "b": 0.5, "c": 1.0})
    assert choose(FastestForm(timer=same_model, fields=FIELDS, name="test"), (3, torch.bfloat16, 4096, 1792)) == "b"
    assert same_model.calls == 0
    new_process(monkeypatch)
    fewer = Timer({"a": 2.0, "c": 1.0})
    assert choose(FastestForm(timer=fewer, fields=FIELDS, name="test"), key, names=("a", "c")) == "c"
    assert fewer.calls == 1


def test_filed_choice_is_used_during_a_capture(cache, monkeypatch):
    key = (0, torch.float16, 256, 64)
    choose(FastestForm(timer=Timer({"a": 3.0, "b": 1.0, "c": 2.0}), fields=FIELDS, name="test"), key)
    new_process(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    chooser = FastestForm(timer=Timer({}), fields=FIELDS, name="test")
    assert choose(chooser, key) == "b"  # nothing can be timed in a capture: the filed choice
    assert choose(chooser, (0, torch.float16, 512, 64)) == "a"  # and where none is filed, the rule


def test_unnamed_forms_and_tuning_off_leave_the_cache_alone(cache, monkeypatch, tmp_path):
    key = (0, torch.bfloat16, 4096, 1792)
    timer = Timer({"a": 2.0, "b": 0.5, "c": 1.0})
    choose(FastestForm(timer=timer, fields=FIELDS), key)  # no name: not filed
    assert not list(tmp_path.iterdir())
    choose(FastestForm(timer=timer, fields=FIELDS, name="test"), key)
    new_process(monkeypatch)
    monkeypatch.setattr(kernel_configs, "AUTOTUNE", False)
    assert choose(FastestForm(timer=Timer({}), fields=FIELDS, name="test"), key) == "a"  # the rule


def test_turned_off(cache, monkeypatch, tmp_path):
    monkeypatch.setenv(tuning_cache.ENV, "0")
    assert tuning_cache.cache_dir() is None
    key = (0, torch.bfloat16, 4096, 1792)
    timer = Timer({"a": 2.0, "b": 0.5, "c": 1.0})
    choose(FastestForm(timer=timer, fields=FIELDS, name="test"), key)
    new_process(monkeypatch)
    choose(FastestForm(timer=timer, fields=FIELDS, name="test"), key)
    assert timer.calls == 2 and not list(tmp_path.iterdir())


def test_default_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(tuning_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tuning_cache.cache_dir() == tmp_path / "fusedmlp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tuning_cache.cache_dir() == tmp_path / ".cache" / "fusedmlp"


def test_unreadable_file_is_ignored_and_replaced(cache, monkeypatch, tmp_path):
    path = cache.path(0)
    path.write_text("{not json")
    key = (0, torch.bfloat16, 4096, 1792)
    timer = Timer({"a": 2.0, "b": 0.5, "c": 1.0})
    with pytest.warns(UserWarning, match="ignoring the tuning cache"):
        assert choose(FastestForm(timer=timer, fields=FIELDS, name="test"), key) == "b"
    assert timer.calls == 1
    assert "form:test" in json.loads(path.read_text())["entries"]
    # a file of another layout is not read either (silently: an older or newer fusedmlp's)
    path.write_text(json.dumps({"format": 999, "entries": {"form:test": {}}}))
    new_process(monkeypatch)
    choose(FastestForm(timer=timer, fields=FIELDS, name="test"), key)
    assert timer.calls == 2


def test_unwritable_folder_warns_once_and_keeps_the_choice(cache, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(tuning_cache.ENV, str(blocker / "sub"))  # a folder under a file: cannot be made
    chooser = FastestForm(timer=Timer({"a": 2.0, "b": 0.5, "c": 1.0}), fields=FIELDS, name="test")
    with pytest.warns(UserWarning, match="cannot write the tuning cache"):
        assert choose(chooser, (0, torch.bfloat16, 4096, 1792)) == "b"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose(chooser, (0, torch.bfloat16, 8192, 1792)) == "b"
    assert choose(chooser, (0, torch.bfloat16, 4096, 1792)) == "b"


def test_processes_writing_one_file_keep_each_others_entries(cache, monkeypatch):
    first = cache
    second = tuning_cache.TuningCache()
    first.put("form:test", (0, "x"), {"chosen": "a", "ms": {"a": 1.0}}, 0)
    second.put("form:test", (0, "y"), {"chosen": "b", "ms": {"b": 1.0}}, 0)  # read the file before writing
    first.put("form:other", (0, "z"), {"chosen": "c", "ms": {"c": 1.0}}, 0)
    entries = json.loads(cache.path(0).read_text())["entries"]
    assert set(entries["form:test"]) == {json.dumps([0, "x"]), json.dumps([0, "y"])}
    assert set(entries["form:other"]) == {json.dumps([0, "z"])}


def test_cli_lists_and_clears(cache, capsys, monkeypatch, tmp_path):
    from fusedmlp.cli import main

    choose(FastestForm(timer=Timer({"a": 2.0, "b": 0.5, "c": 1.0}), fields=FIELDS, name="test"),
           (0, torch.bfloat16, 4096, 1792))
    cache.put("kernel:events:abc", (4096, "relu"), 1, 0)
    assert main(["tuning-cache"]) == 0
    listing = capsys.readouterr().out
    assert str(tmp_path) in listing and "1 file(s)" in listing and "2 choices in 2 tables" in listing
    assert main(["tuning-cache", "--clear"]) == 0
    assert "removed 1 file(s)" in capsys.readouterr().out and not list(tmp_path.glob("tuning_*.json"))
    monkeypatch.setenv(tuning_cache.ENV, "0")
    assert main(["tuning-cache"]) == 0 and "tuning cache off" in capsys.readouterr().out


def test_keys_round_trip():
    key = (4096, "gelu_tanh", True, None, 0.5, (1, (2, "a")), torch.bfloat16)
    text = tuning_cache.encode_key(key)
    assert tuning_cache.decode_key(text) == key[:-1] + ("torch.bfloat16",)
    assert tuning_cache.encode_key((1, object())) is None


def test_put_skips_keys_it_cannot_write(cache):
    cache.put("form:test", (0, object()), {"chosen": "a", "ms": {}}, 0)
    assert not cache.path(0).exists()


class StandInTuner:
    """What the cache uses of Triton's Autotuner: its configs and its per-key choices."""

    def __init__(self, configs):
        self.configs, self.cache = list(configs), {}


def test_tuner_choices_are_filed_and_restored(cache, monkeypatch):
    configs = [object(), object(), object()]
    tuner = StandInTuner(configs)
    tuner.cache[(2048, 512, "relu", True, "torch.bfloat16")] = configs[2]
    known = set(tuner.cache)
    tuner.cache[(4096, 512, "relu", True, "torch.bfloat16")] = configs[1]
    tuning_cache.file_tuner(tuner, "kernel:events:abc", 0, known)
    assert len(cache.section("kernel:events:abc", 0)) == 1  # only the new choice

    new_process(monkeypatch)
    restored = StandInTuner(configs)
    tuning_cache.restore_tuner(restored, "kernel:events:abc", 0)
    assert restored.cache == {(4096, 512, "relu", True, "torch.bfloat16"): configs[1]}
    assert restored.cache[(4096, 512, "relu", True, "torch.bfloat16")] is configs[1]
    # an index the table does not have (a shorter table) is left out
    shorter = StandInTuner(configs[:1])
    tuning_cache.restore_tuner(shorter, "kernel:events:abc", 0)
    assert shorter.cache == {}


def test_each_table_has_its_own_section(monkeypatch):
    """Config indices are filed per table: two launchers of one kernel with different tables,
    and a launcher's fp32 table, each get a section of their own."""
    tiles = kernel_configs.LINEAR_DPRE_CONFIGS
    assert kernel_configs._table_hash(tiles) == kernel_configs._table_hash(list(tiles))
    assert kernel_configs._table_hash(tiles) != kernel_configs._table_hash(tiles[1:])
    from fusedmlp.kernels.linear_act import linear_act_dpre_kernel, linear_act_fwd_kernel

    monkeypatch.setattr(kernel_configs, "INTERPRET", False)  # the tuners a GPU process builds
    monkeypatch.setattr(kernel_configs, "AUTOTUNE", True)
    whole = kernel_configs.Launcher(linear_act_dpre_kernel, tiles, key=["N"])
    part = kernel_configs.Launcher(linear_act_dpre_kernel, tiles[1:], key=["N"])
    (whole_section,), (part_section,) = whole._sections.values(), part._sections.values()
    assert whole_section.endswith(kernel_configs._table_hash(tiles)) and whole_section != part_section
    both = kernel_configs.Launcher(linear_act_fwd_kernel, kernel_configs.LINEAR_CONFIGS, key=["N"],
                                   fp32_configs=kernel_configs.LINEAR_FP32_CONFIGS)
    assert sorted(both._sections.values()) == sorted(
        f"linear_act_fwd_kernel:events:{kernel_configs._table_hash(t)}"
        for t in (kernel_configs.LINEAR_CONFIGS, kernel_configs.LINEAR_FP32_CONFIGS))


_FIRST_CALLS = r"""
import json, sys, time, torch
first = sys.argv[1] == "first"
if not first:  # nothing may be timed: every choice must come from the cache
    def untimed(*args, **kwargs):
        raise AssertionError("timed in the second process")
    import fusedmlp.kernels.configs as configs
    import fusedmlp.ops._common as common
    configs.event_timing = configs.graph_timing = common._cuda_times = untimed
import fusedmlp
from fusedmlp.ops import glu, linear_act, mlp
torch.manual_seed(0)
dev, bf = "cuda", torch.bfloat16
x = torch.randn(4096, 512, device=dev, dtype=bf, requires_grad=True)
w = (torch.randn(1024, 512, device=dev, dtype=bf) / 23).requires_grad_()
b = torch.randn(1024, device=dev, dtype=bf).requires_grad_()
wg = (torch.randn(2048, 512, device=dev, dtype=bf) / 23).requires_grad_()
ws = [(torch.randn(o, i, device=dev, dtype=bf) / i ** 0.5).requires_grad_() for i, o in ((512, 256), (256, 64))]
start = time.perf_counter()
outs = [fusedmlp.linear_act(x, w, b, "gelu_tanh"), fusedmlp.geglu(x, wg, None, recompute=False),
        fusedmlp.mlp(x, ws, None)]
sum(o.float().square().sum() for o in outs).backward()
torch.cuda.synchronize()
seconds = time.perf_counter() - start
bits = [t.detach().view(torch.int16).cpu() for t in outs + [x.grad, w.grad, b.grad, wg.grad] + [v.grad for v in ws]]
torch.save(bits, sys.argv[2])
print(json.dumps({"seconds": seconds, "linear": list(linear_act.linear_forward_form.chosen.values()),
                  "glu": list(glu.glu_forward_form.chosen.values())}))
"""


@pytest.mark.gpu
def test_a_new_process_times_nothing_and_computes_the_same_bits(tmp_path):
    """Two processes with tuning on and one cache folder: the first times and files its
    choices (forms and configs of linear_act, GEGLU and the whole-MLP kernels); the second,
    whose timers all raise, launches the same choices and gets the same output and gradient
    bits."""
    env = dict(os.environ, FUSEDMLP_AUTOTUNE="1", FUSEDMLP_TUNING_CACHE=str(tmp_path))
    results = []
    for run in ("first", "second"):
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(_FIRST_CALLS), run, str(tmp_path / f"{run}.pt")],
                              env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert results[0]["linear"] == results[1]["linear"] and results[0]["glu"] == results[1]["glu"]
    (path,) = tmp_path.glob("tuning_*.json")
    sections = json.loads(path.read_text())["entries"]
    assert any(name.startswith("mlp_fwd_kernel:graph:") for name in sections)
    first, second = (torch.load(tmp_path / f"{run}.pt") for run in ("first", "second"))
    for a, b in zip(first, second):
        assert torch.equal(a, b)
