"""DLRM training and evaluation: ``fusedmlp dlrm train`` / ``fusedmlp dlrm eval``
(also ``python -m fusedmlp.dlrm.train``).

The whole data set is held as tensors on the training device; each epoch visits the training
rows in a permutation drawn from ``(seed, epoch)``, so a run resumed from a checkpoint at step
s replays exactly the batches and updates of an uninterrupted run. Validation (AUC, log loss,
accuracy) runs every ``--val-every`` steps and at the end.

Data-parallel on several GPUs (or CPU processes): ``torchrun --nproc-per-node N -m
fusedmlp.dlrm.train ...`` or ``fusedmlp dlrm train --nproc N ...``; ``--batch-size`` is then
per rank, each rank trains on its share of every global batch (see ``parallel.py``), metrics
are computed over all ranks' predictions, and rank 0 writes the checkpoints. A checkpoint
records how many rows of the epoch were consumed, so it resumes on any number of ranks whose
batches make the same global batch (a resume keeps the global batch, optimizer and lr).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .._cuda_graph import capture_cuda_graph
from .._distributed import exit_rank
from .data import DEFAULT_MAX_ROWS, METADATA_NAME, NUM_CATEGORICAL, load_data
from .metrics import click_metrics
from .model import DLRM, DLRMConfig
from .parallel import DataParallel, launched_by_torchrun

IMPL_CHOICES = ("auto", "eager", "compile", "fused")
CHECKPOINT_VERSION = 3  # 3: progress counts the rows of the epoch consumed ("position"); 2 is read too
CHECKPOINT_KEYS = ("config", "model", "optimizer", "progress", "args", "rng")


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU here")
    return device


def resolve_impl(impl: str, device: torch.device) -> str:
    """``auto``: fused on a GPU, eager on a CPU (where the fused kernels run only through the
    Triton interpreter, far slower than PyTorch's CPU kernels)."""
    if impl == "auto":
        return "fused" if device.type == "cuda" else "eager"
    return impl


def resolve_cuda_graph(choice: str, impl: str, device: torch.device) -> bool:
    """Whether the training step is captured in a CUDA graph. ``auto`` (the default): for the
    fused path on a GPU, where the plain step's dozens of launches and their Python cost more
    host time than the GPU spends at small and mid batches; eager and compile keep the plain
    step unless asked (``on``)."""
    if choice not in ("auto", "on", "off"):
        raise ValueError(f"cuda_graph must be auto, on or off, got {choice!r}")
    if choice == "on" and device.type != "cuda":
        raise SystemExit("--cuda-graph needs a CUDA device")
    return choice == "on" or (choice == "auto" and impl == "fused" and device.type == "cuda")


def build_model(config: DLRMConfig, impl: str, device, sparse: bool = False):
    """(model, forward): the DLRM on ``device`` and what to call it through (the model, or the
    model under torch.compile for ``impl="compile"``)."""
    model = DLRM(config, impl="eager" if impl == "compile" else impl, sparse=sparse).to(device)
    return model, (torch.compile(model) if impl == "compile" else model)


def autocast_forward(forward, device: torch.device):
    """``forward`` run under ``torch.autocast`` in bf16 on ``device``'s type (``--amp``): the
    parameters and the optimizer stay fp32, the MLPs and the interaction run in bf16 (the fused
    kernels' 16-bit path; eager's nn.Linear likewise), the embeddings' lookup in fp32 as
    autocast leaves it, the loss in fp32 (``DLRM.loss`` takes the logits to fp32)."""
    def run(dense: torch.Tensor, cats: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return forward(dense, cats)

    return run


def _check_tables(data, config: DLRMConfig) -> None:
    if tuple(config.cardinalities) != tuple(data.cardinalities):
        raise SystemExit(f"the data's table sizes {data.cardinalities} differ from the model's {config.cardinalities}")


def data_index(data) -> dict:
    """How ``data``'s categoricals became table indices: ``{"kind": "hash"}`` for a TSV (hashed
    with the model's table sizes as it loads) or a hash-indexed folder; for a vocab-indexed folder
    also a digest of its vocabulary, which the table sizes alone do not pin down."""
    folder = Path(data.source)
    if not folder.is_dir():
        return {"kind": "hash"}
    kind = json.loads((folder / METADATA_NAME).read_text())["index"]["kind"]
    if kind != "vocab":
        return {"kind": kind}
    digest = hashlib.sha256()
    with np.load(folder / "vocab.npz") as vocab:
        for j in range(NUM_CATEGORICAL):
            values = np.ascontiguousarray(vocab[f"cat_{j}"], dtype=np.int64)
            digest.update(f"cat_{j}:{len(values)};".encode())
            digest.update(values.tobytes())
    return {"kind": "vocab", "vocab_sha256": digest.hexdigest()}


def _check_data_index(checkpoint: dict, data, path, warn: bool = True) -> dict:
    """The data's index (``data_index``), refused unless it is the one ``checkpoint`` was
    trained on: other indices give the same table sizes but rows that mean other values.
    A checkpoint from before the index was recorded passes, with a warning."""
    index = data_index(data)
    trained = checkpoint["args"].get("data_index")
    if trained is None:
        if warn:
            print(f"warning: {path} does not record how its training data was indexed (an older checkpoint): "
                  f"make sure {data.source} is indexed the same way (hash, or the same vocabulary)", file=sys.stderr)
    elif trained != index:
        def name(i):
            return "hash-indexed" if i["kind"] == "hash" else f"indexed by vocabulary {i['vocab_sha256'][:12]}"
        raise SystemExit(f"{path} was trained on {name(trained)} data, but {data.source} is {name(index)} "
                         f"(a TSV file is always hash-indexed): use data indexed the way it was trained")
    return index


def _check_split(checkpoint: dict, val_fraction: float, data, path) -> None:
    """A TSV's validation rows are its last ``val_fraction`` (a preprocessed folder keeps its own
    split): another fraction than the checkpoint's run moves rows between the splits, so a
    validation would score rows it trained on. Refused; older checkpoints did not record it."""
    trained = checkpoint["args"].get("val_fraction")
    if trained is not None and val_fraction != trained and not Path(data.source).is_dir():
        raise SystemExit(f"{path} was trained with --val-fraction {trained} of {data.source}: use that again "
                         "(another fraction moves rows between its training and validation splits)")


def _check_resume_args(checkpoint: dict, args, world: int, path) -> None:
    """A resumed run continues the checkpoint's exactly, so it takes the same optimizer (whose
    state it loads), learning rate and global batch (the step budget counts batches of it)."""
    trained = checkpoint["args"]
    trained_batch = trained["batch_size"] * trained.get("world_size", 1)
    wanted = []
    if args.optimizer != trained["optimizer"]:
        wanted.append(f"--optimizer {trained['optimizer']}")
    if args.lr != trained["lr"]:
        wanted.append(f"--lr {trained['lr']}")
    if args.batch_size * world != trained_batch:
        wanted.append(f"--batch-size {trained_batch // world}" if trained_batch % world == 0 else
                      f"a global batch of {trained_batch} rows (--batch-size x processes)")
    if wanted:
        raise SystemExit(f"--resume {path}: a resumed run continues exactly as it was trained; resume with "
                         f"{', '.join(wanted)}{f' on {world} processes' if world > 1 else ''}")


class DLRMOptimizer:
    """The model's optimizer: a torch optimizer over ``model.dense_parameters()`` and, for the
    fused tables, the same update fused into their backward (so ``step`` leaves them alone).
    ``group``: data-parallel ranks whose table gradients the fused update sums.
    ``overlap_tables``: on a GPU the fused tables' update (and exchange) runs on a side stream
    while the backward and ``step`` go on with the dense layers; ``step`` waits for it at its
    end. None (default): on when the model is on a GPU."""

    def __init__(self, model: DLRM, name: str, lr: float, group=None, overlap_tables: bool | None = None):
        if name not in ("sgd", "adagrad"):
            raise ValueError(f"optimizer must be sgd or adagrad, got {name!r}")
        self.model, self.name = model, name
        self.fused_tables = model.impl == "fused"
        if self.fused_tables:
            if overlap_tables is None:
                overlap_tables = model.embeddings.weight.is_cuda
            model.set_table_optimizer(name, lr=lr, group=group, overlap=overlap_tables)
        params = model.dense_parameters()
        self.dense = torch.optim.SGD(params, lr=lr) if name == "sgd" else torch.optim.Adagrad(params, lr=lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.dense.step()
        if self.fused_tables:
            self.model.embeddings.wait_for_update()

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor of the optimizer's state (what a captured step changes besides the weights)."""
        tensors = [v for state in self.dense.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
        if self.fused_tables and self.model.embeddings.optimizer_state is not None:
            tensors.append(self.model.embeddings.optimizer_state)
        return tensors

    def count_replayed_step(self) -> None:
        """A CUDA-graph replay does not run the host side of ``step``: advance Adagrad's step
        counters (host tensors, unused without lr decay) so that checkpoints match a plain run."""
        if self.name == "adagrad":
            for state in self.dense.state.values():
                state["step"] += 1

    def state_dict(self) -> dict:
        tables = self.model.embeddings.optimizer_state_dict() if self.fused_tables else None
        return {"dense": self.dense.state_dict(), "fused_tables": tables}

    def load_state_dict(self, state: dict) -> None:
        if (state.get("fused_tables") is not None) != self.fused_tables:
            written = "fused" if state.get("fused_tables") is not None else "eager or compile"
            raise SystemExit(f"the checkpoint's optimizer state is for --impl {written} (its tables keep their "
                             f"optimizer state elsewhere); resume with that implementation")
        self.dense.load_state_dict(state["dense"])
        if self.fused_tables:
            self.model.embeddings.load_optimizer_state_dict(state["fused_tables"])


def build_optimizer(model: DLRM, name: str, lr: float, parallel: DataParallel | None = None) -> DLRMOptimizer:
    return DLRMOptimizer(model, name, lr, group=parallel.table_group if parallel and parallel.world > 1 else None)


def train_step(model: DLRM, forward, optimizer: DLRMOptimizer, parallel: DataParallel, train_tensors,
               index: torch.Tensor, backward_thread: str = "caller") -> torch.Tensor:
    """One optimizer step on the global batch ``index`` (this rank trains on its share);
    returns this rank's part of the loss.

    ``backward_thread``: "caller" runs the backward on this thread, "device" on autograd's
    per-device worker thread (PyTorch's default). Same kernels and results; a step bound by
    host time is faster on the caller's thread, where the Python of the fused ops' backward
    does not hand over between threads (README, "Host time")."""
    dense, cats, labels = (t[parallel.shard(index)] for t in train_tensors)
    loss = parallel.loss(forward(dense, cats), labels, len(index))
    optimizer.zero_grad(set_to_none=True)
    with torch.autograd.set_multithreading_enabled(backward_thread == "device"):
        loss.backward()
    parallel.reduce_gradients(model)
    optimizer.step()
    return loss


class GraphedTrainStep:
    """One training step (gather of the batch's rows, forward, loss, backward, optimizer step)
    captured in a CUDA graph and replayed: one launch per step, so that small batches are no
    longer bound by the host's launch time (``--cuda-graph``).

    Only full batches replay (a short last batch of an epoch takes the plain step). The warm-up
    steps that precede the capture (they compile kernels and settle allocations) are undone:
    weights and optimizer state are restored in place, so a run with the graph makes the same
    updates as one without.
    """

    def __init__(self, model: DLRM, forward, optimizer: DLRMOptimizer, train_tensors, batch_size: int,
                 warmup: int = 3, parallel: DataParallel | None = None, backward_thread: str = "caller"):
        self.model, self.forward, self.optimizer, self.train_tensors = model, forward, optimizer, train_tensors
        self.parallel = parallel or DataParallel()
        self.backward_thread = backward_thread
        self.index = torch.zeros(batch_size, dtype=torch.int64, device=train_tensors[0].device)
        live = list(model.parameters()) + list(model.buffers()) + optimizer.state_tensors()
        saved = [t.detach().clone() for t in live]
        optimizer.zero_grad(set_to_none=True)
        # gradients are None at the capture: the captured backward writes them afresh on each replay
        self.graph, self.loss = capture_cuda_graph(self._step, warmup,
                                                   after_warmup_call=lambda: optimizer.zero_grad(set_to_none=True))
        with torch.no_grad():
            for t, value in zip(live, saved):
                t.copy_(value)

    def _step(self) -> torch.Tensor:
        return train_step(self.model, self.forward, self.optimizer, self.parallel, self.train_tensors, self.index,
                          self.backward_thread)

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        """Train on the rows ``index`` (exactly ``batch_size`` of them: the global batch);
        returns this rank's part of the loss (a tensor the next replay overwrites)."""
        self.index.copy_(index)
        self.graph.replay()
        self.optimizer.count_replayed_step()
        return self.loss


def _tensors(split, device):
    return (torch.as_tensor(split.dense, device=device), torch.as_tensor(split.cats, device=device),
            torch.as_tensor(split.labels, device=device))


def epoch_order(rows: int, seed: int, epoch: int, device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(rows, generator=generator).to(device)


@torch.no_grad()
def evaluate(forward, split_tensors, batch_size: int, parallel: DataParallel | None = None) -> dict:
    """AUC, log loss and accuracy on a split; data-parallel, each rank predicts its share of the
    rows and the metrics are computed (on every rank) from all ranks' predictions."""
    parallel = parallel or DataParallel()
    if len(split_tensors[2]) == 0:
        return {"auc": float("nan"), "log_loss": float("nan"), "accuracy": float("nan"), "rows": 0}
    rows = parallel.shard(torch.arange(len(split_tensors[2]), device=split_tensors[2].device))
    dense, cats, labels = (t[rows] for t in split_tensors)
    probabilities = [labels.new_empty(0, dtype=torch.float32)]
    for start in range(0, len(labels), batch_size):
        logits = forward(dense[start:start + batch_size], cats[start:start + batch_size])
        probabilities.append(torch.sigmoid(logits.float()))
    labels, probabilities = parallel.gather_predictions(labels, torch.cat(probabilities))
    return click_metrics(labels.cpu().numpy(), probabilities.cpu().numpy())


def metrics_json(result) -> str:
    """``result`` as strict JSON: a metric that is not a number (the AUC of a split without both
    labels, any metric of an empty split) is null, not the bare NaN that JSON parsers refuse."""
    def strict(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: strict(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(v) for v in value]
        return value

    return json.dumps(strict(result), indent=2, allow_nan=False)


def _rng_state():
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state):
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path, model, optimizer, progress: dict, args: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"version": CHECKPOINT_VERSION, "config": model.config.to_dict(), "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "progress": progress, "args": args, "rng": _rng_state()}, tmp)
    os.replace(tmp, path)  # never a half-written checkpoint under the real name


def load_checkpoint(path) -> dict:
    """A checkpoint written by ``save_checkpoint`` (version 2 or 3); anything else (a damaged or
    foreign file) raises one ValueError naming ``path``. A missing file raises FileNotFoundError."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    unreadable = f"{path}: not a readable fusedmlp DLRM checkpoint"
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch.load's errors for a damaged file range from OSError to pickle's
        raise ValueError(f"{unreadable} (torch.load cannot read it: damaged, or another format)") from error
    if not isinstance(state, dict) or any(key not in state for key in CHECKPOINT_KEYS):
        raise ValueError(f"{unreadable} (it holds no DLRM training state)")
    if state.get("version") == 2:  # progress counted batches of the epoch; now rows
        progress = state["progress"]
        progress["position"] = progress.pop("step_in_epoch") * state["args"]["batch_size"]
    elif state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: not a fusedmlp DLRM checkpoint (version {state.get('version')})")
    return state


def _profiler(directory, written: list):
    """A profiler over steps 5-9 that writes one Chrome trace into ``directory``, named as
    TensorBoard's profiler plugin looks for it (``*.pt.trace.json``); its path goes to ``written``."""
    if directory is None:
        return None
    import socket

    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    Path(directory).mkdir(parents=True, exist_ok=True)

    def save(prof):
        path = Path(directory) / f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json"
        prof.export_chrome_trace(str(path))
        written.append(path)

    return profile(activities=activities, schedule=schedule(wait=2, warmup=2, active=5, repeat=1),
                   on_trace_ready=save, record_shapes=True)


def train(args) -> dict:
    """Train per ``args`` (the parsed CLI namespace); returns the final metrics and run facts.
    Under torchrun, every rank calls it (data-parallel; see the module docstring)."""
    from tqdm import tqdm

    parallel, device_name = DataParallel.from_environment(args.device)
    device = _device(device_name)
    main = parallel.is_main
    impl = resolve_impl(args.impl, device)
    use_graph = resolve_cuda_graph(args.cuda_graph, impl, device)  # before any work: it may refuse
    resume = load_checkpoint(args.resume) if args.resume else None
    if resume:
        _check_resume_args(resume, args, parallel.world, args.resume)
    seed = resume["args"]["seed"] if resume else args.seed
    torch.manual_seed(seed)
    cardinalities = resume["config"]["cardinalities"] if resume else None
    data = load_data(args.data, max_rows=args.max_rows, val_fraction=args.val_fraction, cardinalities=cardinalities)
    if main and data.report is not None and data.report.malformed:
        print(f"data: {data.report.summary()}", file=sys.stderr)
    source_index = _check_data_index(resume, data, args.resume, warn=main) if resume else data_index(data)
    if resume:
        _check_split(resume, args.val_fraction, data, args.resume)
        config = DLRMConfig.from_dict(resume["config"])
    else:
        overrides = {"cardinalities": data.cardinalities}
        config = DLRMConfig.from_json(args.config, **overrides) if args.config else DLRMConfig(**overrides)
    _check_tables(data, config)
    model, forward = build_model(config, impl, device, args.sparse)
    if args.amp:
        forward = autocast_forward(forward, device)
    parallel.broadcast_model(model)
    parallel.reduce_early(model)
    optimizer = build_optimizer(model, args.optimizer, args.lr, parallel)
    progress = {"step": 0, "epoch": 0, "position": 0}
    if resume:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        progress = dict(resume["progress"])
        _set_rng_state(resume["rng"])

    train_t, val_t = _tensors(data.train, device), _tensors(data.val, device)
    rows = len(data.train)
    if rows == 0:
        raise SystemExit("the training split is empty")
    global_batch = args.batch_size * parallel.world
    steps_per_epoch = math.ceil(rows / global_batch)
    total_steps = args.steps if args.steps is not None else args.epochs * steps_per_epoch
    history = []
    graphed = None
    if use_graph:
        if rows >= global_batch and progress["step"] < total_steps:
            graphed = GraphedTrainStep(model, forward, optimizer, train_t, global_batch, parallel=parallel,
                                       backward_thread=args.backward_thread)
    traces = []
    profiler = _profiler(args.profile, traces) if main else None
    if profiler is not None:
        profiler.start()
    bar = tqdm(total=total_steps, initial=progress["step"], desc=f"dlrm {impl}", unit="step",
               disable=args.quiet or not main, dynamic_ncols=True)
    running, seen, started = None, 0, time.perf_counter()

    def validate():
        metrics = dict(evaluate(forward, val_t, args.eval_batch_size, parallel), step=progress["step"])
        history.append(metrics)
        if main:
            bar.write(f"step {progress['step']}: val auc {metrics['auc']:.4f}  log loss "
                      f"{metrics['log_loss']:.4f}  accuracy {metrics['accuracy']:.4f}")

    if progress["step"] >= total_steps:  # a resumed run that is already done: say so, and validate it
        if main:
            bar.write(f"--resume {args.resume}: the run is already at step {progress['step']} of the "
                      f"{total_steps} asked: nothing to train; validating it", file=sys.stderr)
        validate()
    order = None
    while progress["step"] < total_steps:
        if order is None or progress["position"] == 0:
            order = epoch_order(rows, seed, progress["epoch"], device)
        index = order[progress["position"]:progress["position"] + global_batch]
        if graphed is not None and len(index) == global_batch:
            loss = graphed(index)
        else:
            loss = train_step(model, forward, optimizer, parallel, train_t, index, args.backward_thread)
        if profiler is not None:
            profiler.step()
        progress["step"] += 1
        progress["position"] += len(index)
        if progress["position"] >= rows:
            progress["epoch"] += 1
            progress["position"] = 0
        seen += len(index)
        if progress["step"] % args.log_every == 0 or progress["step"] == total_steps:
            value = parallel.total(loss).item()
            running = value if running is None else 0.9 * running + 0.1 * value
            elapsed = time.perf_counter() - started
            bar.set_postfix(loss=f"{running:.4f}", samples_per_s=f"{seen / max(elapsed, 1e-9):,.0f}")
        bar.update()
        at_end = progress["step"] == total_steps
        if at_end or (args.val_every and progress["step"] % args.val_every == 0):
            validate()
        if args.checkpoint and (at_end or (args.save_every and progress["step"] % args.save_every == 0)):
            if main:
                save_checkpoint(args.checkpoint, model, optimizer, progress,
                                _run_args(args, seed, impl, parallel, graphed is not None, source_index))
            parallel.barrier()
    bar.close()
    if profiler is not None:
        profiler.stop()  # writes the trace here if the run ended inside the profiled steps
        print(f"profile: Chrome trace {traces[-1]} (TensorBoard's profiler plugin reads {args.profile})" if traces
              else "profile: no trace written (the run ended before the profiled steps 5-9)", file=sys.stderr)
    elapsed = time.perf_counter() - started
    final_loss = parallel.total(loss).item() if seen else None
    result = {
        "impl": impl, "amp": args.amp, "cuda_graph": graphed is not None, "device": str(device),
        "world_size": parallel.world,
        "steps": progress["step"], "epochs_done": progress["epoch"], "batch_size": args.batch_size,
        "global_batch_size": global_batch, "train_rows": rows, "val_rows": len(data.val),
        "samples_per_s": seen / elapsed if elapsed > 0 else float("nan"),
        "final_loss": final_loss, "validation": history[-1] if history else None,
        "history": history, "data": data.source, "profile_trace": str(traces[-1]) if traces else None,
    }
    if args.metrics_out and main:
        Path(args.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.metrics_out).write_text(metrics_json(result))
    return result


def _run_args(args, seed, impl, parallel: DataParallel, cuda_graph: bool, index: dict) -> dict:
    return {"seed": seed, "impl": impl, "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": args.lr,
            "data": None if args.data is None else str(args.data), "data_index": index, "sparse": args.sparse,
            "amp": args.amp, "cuda_graph": cuda_graph, "world_size": parallel.world, "val_fraction": args.val_fraction}


def evaluate_checkpoint(args) -> dict:
    """Validation metrics of the checkpoint ``args.checkpoint`` (the CLI's eval command)."""
    check_eval_args(args)
    device = _device(args.device)
    state = load_checkpoint(args.checkpoint)
    config = DLRMConfig.from_dict(state["config"])
    val_fraction = args.val_fraction if args.val_fraction is not None else state["args"].get("val_fraction", 0.1)
    data = load_data(args.data, val_fraction=val_fraction, cardinalities=config.cardinalities)
    _check_data_index(state, data, args.checkpoint)  # before the sizes: the likelier cause, named
    _check_split(state, val_fraction, data, args.checkpoint)
    _check_tables(data, config)
    model, forward = build_model(config, resolve_impl(args.impl, device), device)
    model.load_state_dict(state["model"])
    model.eval()
    split = data.val if args.split == "val" else data.train
    metrics = evaluate(forward, _tensors(split, device), args.eval_batch_size)
    return dict(metrics, split=args.split, checkpoint=str(args.checkpoint), step=state["progress"]["step"])


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None,
                        help="a `fusedmlp dlrm preprocess` folder or a Criteo TSV file (plain or .gz); "
                             "default: the synthetic sample shipped with fusedmlp")
    parser.add_argument("--impl", choices=IMPL_CHOICES, default="auto",
                        help="eager PyTorch, torch.compile of it, or the fused kernels "
                             "(default auto: fused on a GPU, eager on a CPU)")
    parser.add_argument("--config", default=None, help="JSON with DLRMConfig fields (embedding_dim, bottom_mlp, "
                                                       "top_mlp, interaction); table sizes come from the data")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="default 256 (the shipped sample has 18000 training rows; use 2048+ on real data)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the training rows (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="total optimizer steps (overrides --epochs)")
    parser.add_argument("--optimizer", choices=("sgd", "adagrad"), default="adagrad")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--amp", action="store_true",
                        help="mixed precision: the forward under torch.autocast in bf16 (parameters, optimizer, "
                             "loss and checkpoints stay fp32; the MLPs and the interaction run in bf16, on the fused "
                             "kernels' 16-bit path with --impl fused); validation runs the same way")
    parser.add_argument("--sparse", action="store_true",
                        help="sparse gradients for the eager/compile tables (the fused tables never form "
                             "a gradient: their update is fused into the backward)")
    parser.add_argument("--cuda-graph", nargs="?", const="on", default="auto", choices=("auto", "on", "off"),
                        help="capture the training step in a CUDA graph and replay it, one launch per step "
                             "(the same updates as the plain step; a short last batch runs plainly). "
                             "Default auto: on for --impl fused on a GPU, where the plain step is bound by "
                             "host time; off otherwise. --cuda-graph alone means on (a GPU only)")
    parser.add_argument("--backward-thread", choices=("caller", "device"), default="caller",
                        help="run each backward on the training thread (default) or on autograd's per-device "
                             "worker thread (PyTorch's default); same results, and a step bound by host time is "
                             "faster on the caller's thread")
    parser.add_argument("--val-every", type=int, default=0,
                        help="validate every N steps (default 0: only at the end; the end always validates)")
    parser.add_argument("--checkpoint", default=None, help="save a checkpoint here at the end (and every --save-every)")
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--resume", default=None, help="continue exactly from this checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="PyTorch profiler over steps 5-9: a Chrome trace DIR/HOST_PID.TIME.pt.trace.json, "
                             "which TensorBoard's profiler plugin also reads")
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="share of a TSV's rows (the last ones) used for validation")
    parser.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="table size cap for a TSV source")
    parser.add_argument("--eval-batch-size", type=int, default=65536)
    parser.add_argument("--log-every", type=int, default=10, help="refresh the loss on the progress bar every N steps")
    parser.add_argument("--metrics-out", default=None, help="write the run's metrics as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--nproc", type=int, default=1,
                        help="data-parallel processes on this machine (one per GPU; gloo processes on a CPU), "
                             "started through torchrun; --batch-size is then per process (default 1)")


def _check_at_least_one(args, names) -> None:
    for name in names:
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")


def check_eval_args(args) -> None:
    """The arguments eval shares with train (train checks them too)."""
    _check_at_least_one(args, ("eval_batch_size",))
    if args.val_fraction is not None and not 0 <= args.val_fraction < 1:  # (eval's None: the checkpoint's)
        raise SystemExit("--val-fraction must be in [0, 1)")


def check_train_args(args) -> None:
    check_eval_args(args)
    _check_at_least_one(args, ("batch_size", "epochs", "log_every"))
    if args.steps is not None and args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    if args.lr <= 0 or not math.isfinite(args.lr):
        raise SystemExit("--lr must be a positive number")
    if args.nproc < 1:
        raise SystemExit("--nproc must be at least 1")
    on_gpus = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
    if args.nproc > 1 and on_gpus and torch.cuda.device_count() < args.nproc:
        raise SystemExit(f"--nproc {args.nproc}: one process per GPU, and there are only "
                         f"{torch.cuda.device_count()} here (--device cpu runs gloo processes)")


def spawn_ranks(nproc: int, train_argv: list[str]) -> int:
    """Run this training command in ``nproc`` processes through torchrun (``--nproc`` removed
    from its arguments); returns torchrun's exit status."""
    import subprocess

    argv, skip = [], False
    for arg in train_argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            argv.append(arg)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "fusedmlp.dlrm.train"] + argv
    return subprocess.call(command)


def train_and_report(args, train_argv: list[str] | None = None) -> int:
    """Check the arguments, train (in ``--nproc`` processes when asked, ``train_argv`` being the
    command's arguments), print the run's summary as JSON from rank 0 (the CLI's train command)."""
    check_train_args(args)
    if args.nproc > 1 and not launched_by_torchrun():
        return spawn_ranks(args.nproc, sys.argv[1:] if train_argv is None else train_argv)
    try:
        result = train(args)
    finally:
        if launched_by_torchrun():
            DataParallel().close()
    if result["world_size"] == 1 or int(os.environ.get("RANK", "0")) == 0:
        print(metrics_json({k: v for k, v in result.items() if k != "history"}))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusedmlp.dlrm.train", description="Train a DLRM.")
    add_train_arguments(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    return train_and_report(parser.parse_args(argv), argv)


if __name__ == "__main__":
    code = main()
    if launched_by_torchrun():  # a rank: its process group is destroyed, its output written
        exit_rank(code)
    sys.exit(code)
