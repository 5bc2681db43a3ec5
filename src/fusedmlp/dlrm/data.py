"""Criteo click logs: reading, checking, preprocessing, a synthetic generator, and batches.

The Criteo format (Kaggle display-advertising challenge and the 1TB click logs): one example
per line, tab separated, 40 fields:

    label (0/1) | 13 integer features (counts; may be negative) | 26 categorical features
    (32-bit hashes written as 8 hex digits); an empty field is a missing value.

Raw values as the reader returns them (numpy, one chunk at a time, bounded memory):
    labels [n] int8; dense [n, 13] int64 (missing -> 0); cats [n, 26] int64 (missing -> -1).

Model inputs (``transform_dense``, ``HashIndexer`` / ``VocabIndexer``):
    dense -> log(1 + max(x, 0)) as float32;
    categorical -> an index into the feature's table, by modulus hash ``(v + 1) % cardinality``
    (a missing value, v = -1, lands at 0) or by vocabulary lookup (values seen at least
    ``min_freq`` times get 1..n by descending frequency; unknown, rare and missing values get
    the reserved index 0).

Each field is its value exactly: a count is an optional '-' and ASCII digits (within int64), a
categorical 1 to 8 hex digits (either case); a space or any other character around or inside a
value is not trimmed. Only the line ending (\n or \r\n) is removed; blank lines are ignored.
A malformed line (wrong field count, a label other than 0/1, a count or categorical not of
that form, bytes that are not UTF-8) is never mis-parsed: it is skipped and counted, with its
line number and reason kept for the report, or, with ``strict=True``, raises
``MalformedLineError`` naming the file and line. A damaged gzip stream (a truncated file)
raises an error naming the file.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

NUM_DENSE = 13
NUM_CATEGORICAL = 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_CATEGORICAL
# Distinct values per categorical feature in the Criteo Kaggle training set (the table sizes of
# the reference DLRM before any capping).
KAGGLE_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)
DEFAULT_MAX_ROWS = 2_000_000  # table rows cap (the targets' Kaggle-size model)
SAMPLE_PATH = Path(__file__).with_name("sample") / "criteo_sample.tsv.gz"
METADATA_NAME = "metadata.json"
VOCAB_NAME = "vocab.npz"
SPLITS = ("train", "val")  # written as f"{split}.parquet"
FORMAT_VERSION = 1


class MalformedLineError(ValueError):
    """A line that is not a Criteo example (raised in strict mode)."""


@dataclass
class ParseReport:
    """What a read saw: good lines, malformed ones (the first ``keep`` with reasons)."""

    good: int = 0
    malformed: int = 0
    examples: list = field(default_factory=list)  # (line number, reason)
    keep: int = 20

    def add(self, line_number: int, reason: str) -> None:
        self.malformed += 1
        if len(self.examples) < self.keep:
            self.examples.append((line_number, reason))

    def summary(self) -> str:
        if not self.malformed:
            return f"{self.good} lines, none malformed"
        shown = "; ".join(f"line {n}: {r}" for n, r in self.examples)
        more = f" (first {len(self.examples)} shown)" if self.malformed > len(self.examples) else ""
        return f"{self.good} lines read, {self.malformed} malformed lines skipped{more}: {shown}"


def open_raw(path):
    """A binary stream of a plain or gzip file (told apart by the gzip magic bytes, not the name)."""
    path = Path(path)
    with open(path, "rb") as probe:
        magic = probe.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _numbered_lines(path):
    """(line number, bytes) of each line; a damaged gzip stream raises an error naming the file
    (the gzip module's own names neither file nor line)."""
    number = 0
    with open_raw(path) as stream:
        try:
            for number, line in enumerate(stream, start=1):
                yield number, line
        except EOFError:
            raise EOFError(f"{path}: the gzip data ends after line {number}, before its end marker "
                           "(a truncated or partly copied file)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise ValueError(f"{path}: damaged gzip data after line {number}: {exc}") from None


INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
DENSE_FIELD = re.compile(r"-?[0-9]+")  # [0-9], not \d: no other scripts' digits
CATEGORICAL_FIELD = re.compile(r"[0-9a-fA-F]{1,8}")
# A line in the format whose counts have at most 18 digits (so fit int64): the fast path, one match
# per line; any other line goes through _parse_fields for its reason (or a 19-digit count).
PLAIN_LINE = re.compile(rb"[01](?:\t(?:-?[0-9]{1,18})?){%d}(?:\t[0-9a-fA-F]{0,8}){%d}"
                        % (NUM_DENSE, NUM_CATEGORICAL))


def _parse_line(line: bytes):
    """(label, dense list, cat list) of one line, or raises ValueError with the reason."""
    line = line.rstrip(b"\r\n")
    if PLAIN_LINE.fullmatch(line) is None:
        return _parse_fields(line)
    fields = line.split(b"\t")
    return (int(fields[0]), [int(text) if text else 0 for text in fields[1:1 + NUM_DENSE]],
            [int(text, 16) if text else -1 for text in fields[1 + NUM_DENSE:]])


def _parse_fields(line: bytes):
    """_parse_line field by field: the reason a line is malformed, or the values of a good one."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start + 1} of the line)") from None
    fields = text.split("\t")
    if len(fields) != NUM_FIELDS:
        raise ValueError(f"{len(fields)} tab-separated fields, expected {NUM_FIELDS}")
    label = fields[0]
    if label not in ("0", "1"):
        raise ValueError(f"label {label!r} is not 0 or 1")
    dense = []
    for j in range(1, 1 + NUM_DENSE):
        text = fields[j]
        if not text:
            dense.append(0)
            continue
        if DENSE_FIELD.fullmatch(text) is None:
            raise ValueError(f"integer feature {j} is {text!r}, not an integer")
        # more than 19 significant digits is out of range (and int() of a huge string is slow)
        if len(text.lstrip("-0")) > 19 or not INT64_MIN <= int(text) <= INT64_MAX:
            raise ValueError(f"integer feature {j} is {text}, out of the 64-bit range")
        dense.append(int(text))
    cats = []
    for j in range(1 + NUM_DENSE, NUM_FIELDS):
        text = fields[j]
        if text and CATEGORICAL_FIELD.fullmatch(text) is None:
            raise ValueError(f"categorical feature {j - NUM_DENSE} is {text!r}, not a 32-bit hex hash")
        cats.append(int(text, 16) if text else -1)
    return int(label), dense, cats


def read_criteo(path, chunk_rows: int = 65536, strict: bool = False,
                report: Optional[ParseReport] = None) -> Iterator[tuple]:
    """Yield ``(labels, dense, cats)`` numpy chunks of at most ``chunk_rows`` good lines.

    Memory is bounded by one chunk. Malformed lines go to ``report`` (or raise with ``strict``).
    Blank lines (e.g. a trailing newline) are ignored.
    """
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    report = report if report is not None else ParseReport()
    labels, dense, cats = [], [], []
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        try:
            label, d, c = _parse_line(line)
        except ValueError as exc:
            if strict:
                raise MalformedLineError(f"{path}: line {number}: {exc}") from None
            report.add(number, str(exc))
            continue
        labels.append(label)
        dense.append(d)
        cats.append(c)
        report.good += 1
        if len(labels) == chunk_rows:
            yield _chunk(labels, dense, cats)
            labels, dense, cats = [], [], []
    if labels:
        yield _chunk(labels, dense, cats)


def _chunk(labels, dense, cats):
    return (np.asarray(labels, dtype=np.int8), np.asarray(dense, dtype=np.int64).reshape(-1, NUM_DENSE),
            np.asarray(cats, dtype=np.int64).reshape(-1, NUM_CATEGORICAL))


def transform_dense(dense: np.ndarray) -> np.ndarray:
    """log(1 + max(x, 0)) as float32."""
    return np.log1p(np.maximum(dense, 0)).astype(np.float32)


class HashIndexer:
    """Modulus hash ``(v + 1) % cardinality`` per feature (missing, v = -1, lands at 0)."""

    kind = "hash"

    def __init__(self, cardinalities):
        self.cardinalities = tuple(int(c) for c in cardinalities)
        if len(self.cardinalities) != NUM_CATEGORICAL or min(self.cardinalities) < 1:
            raise ValueError(f"need {NUM_CATEGORICAL} positive cardinalities, got {cardinalities}")
        self._mod = np.asarray(self.cardinalities, dtype=np.int64)

    def __call__(self, cats: np.ndarray) -> np.ndarray:
        return ((cats + 1) % self._mod).astype(np.int64)

    def to_json(self) -> dict:
        return {"kind": self.kind, "cardinalities": list(self.cardinalities)}


class VocabIndexer:
    """Vocabulary lookup: per feature, the values seen at least ``min_freq`` times get indices
    1..n by descending count (ties by value); everything else, missing included, gets 0."""

    kind = "vocab"

    def __init__(self, vocabularies, min_freq: int):
        self.vocabularies = [np.asarray(v, dtype=np.int64) for v in vocabularies]
        self.min_freq = int(min_freq)
        self.cardinalities = tuple(len(v) + 1 for v in self.vocabularies)
        # sorted values and their indices, for a vectorised lookup
        self._sorted = []
        for vocab in self.vocabularies:
            order = np.argsort(vocab, kind="stable")
            self._sorted.append((vocab[order], order + 1))

    @classmethod
    def from_counts(cls, counts, min_freq: int, max_values: Optional[int] = None) -> "VocabIndexer":
        """Per feature a ``{value: count}``; ``max_values`` keeps the most frequent. Missing (-1)
        is left out before the cut: it has index 0, not a slot of its own."""
        vocabularies = []
        for feature_counts in counts:
            kept = [(-n, v) for v, n in feature_counts.items() if n >= min_freq and v >= 0]
            kept.sort()
            vocabularies.append([v for _, v in kept[:max_values]])
        return cls(vocabularies, min_freq)

    def __call__(self, cats: np.ndarray) -> np.ndarray:
        out = np.zeros(cats.shape, dtype=np.int64)
        for j, (values, indices) in enumerate(self._sorted):
            if len(values) == 0:
                continue
            column = cats[:, j]
            pos = np.clip(np.searchsorted(values, column), 0, len(values) - 1)
            hit = values[pos] == column
            out[:, j] = np.where(hit, indices[pos], 0)
        return out

    def to_json(self) -> dict:
        return {"kind": self.kind, "cardinalities": list(self.cardinalities), "min_freq": self.min_freq}


# --------------------------------------------------------------------------------------
# Preprocessing: TSV -> parquet + metadata
# --------------------------------------------------------------------------------------
def _count_pass(path, index: str, chunk_rows: int, strict: bool, progress=None):
    """Rows and per-feature value counts (vocab) or distinct sets (hash) of one read."""
    report = ParseReport()
    per_feature = [dict() if index == "vocab" else set() for _ in range(NUM_CATEGORICAL)]
    rows = 0
    for labels, _, cats in read_criteo(path, chunk_rows, strict, report):
        rows += len(labels)
        for j in range(NUM_CATEGORICAL):
            values, counts = np.unique(cats[:, j], return_counts=True)
            target = per_feature[j]
            if index == "vocab":
                for v, n in zip(values.tolist(), counts.tolist()):
                    target[v] = target.get(v, 0) + n
            else:
                target.update(values.tolist())
        if progress is not None:
            progress(len(labels))
    return rows, per_feature, report


def _columns(labels, dense, index_array):
    columns = {"label": labels.astype(np.int8)}
    dense_t = transform_dense(dense)
    for j in range(NUM_DENSE):
        columns[f"dense_{j}"] = dense_t[:, j]
    for j in range(NUM_CATEGORICAL):
        columns[f"cat_{j}"] = index_array[:, j].astype(np.int32)
    return columns


def preprocess(path, out_dir, *, index: str = "hash", max_rows: int = DEFAULT_MAX_ROWS, min_freq: int = 1,
               val_fraction: float = 0.1, chunk_rows: int = 65536, strict: bool = False, progress=None) -> dict:
    """Convert a Criteo TSV (plain or gzip) into ``train.parquet``, ``val.parquet`` and
    ``metadata.json`` under ``out_dir``; returns the metadata.

    Two reads of the input: the first counts rows and values (the table sizes, or the
    vocabulary), the second writes. Rows are split by position: the first
    ``1 - val_fraction`` of the good lines train, the rest validate (no overlap).
    ``index="hash"``: table size of a feature = min(distinct values seen + 1, max_rows).
    ``index="vocab"``: the ``min_freq`` vocabulary (written to ``vocab.npz``), capped at
    ``max_rows - 1`` values per feature (the most frequent), so tables of at most ``max_rows``.

    ``out_dir`` is created once the first read has found good lines. In a reused folder the
    files of an earlier run are removed first (a split or vocabulary this run does not write
    would otherwise be loaded with its metadata).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if index not in ("hash", "vocab"):
        raise ValueError(f"index must be 'hash' or 'vocab', got {index!r}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if max_rows < 2 or min_freq < 1:
        raise ValueError("max_rows must be at least 2 and min_freq at least 1")
    out_dir = Path(out_dir)
    rows, per_feature, report = _count_pass(path, index, chunk_rows, strict, progress)
    if rows == 0:
        raise ValueError(f"{path}: no good lines ({report.summary()})")
    out_dir.mkdir(parents=True, exist_ok=True)
    # metadata first: a run that fails from here on leaves no folder that loads
    for name in (METADATA_NAME, VOCAB_NAME) + tuple(f"{split}.parquet" for split in SPLITS):
        (out_dir / name).unlink(missing_ok=True)
    if index == "hash":
        indexer = HashIndexer([min(len(s) + 1, max_rows) for s in per_feature])
    else:
        indexer = VocabIndexer.from_counts(per_feature, min_freq, max_values=max_rows - 1)
        np.savez_compressed(out_dir / VOCAB_NAME, **{f"cat_{j}": v for j, v in enumerate(indexer.vocabularies)})
    train_rows = rows - int(round(rows * val_fraction))
    writers = {}
    position = 0
    try:
        for labels, dense, cats in read_criteo(path, chunk_rows, strict):
            columns = _columns(labels, dense, indexer(cats))
            table = pa.table(columns)
            for split, start, stop in (("train", 0, train_rows), ("val", train_rows, rows)):
                lo, hi = max(start - position, 0), min(stop - position, len(labels))
                if lo >= hi:
                    continue
                part = table.slice(lo, hi - lo)
                if split not in writers:
                    writers[split] = pq.ParquetWriter(out_dir / f"{split}.parquet", part.schema)
                writers[split].write_table(part)
            position += len(labels)
            if progress is not None:
                progress(len(labels))
    finally:
        for writer in writers.values():
            writer.close()
    metadata = {
        "format": FORMAT_VERSION,
        "source": str(path),
        "rows": {"train": train_rows, "val": rows - train_rows},
        "malformed_lines": report.malformed,
        "dense_transform": "log(1 + max(x, 0))",
        "index": indexer.to_json(),
        "cardinalities": list(indexer.cardinalities),
        "num_dense": NUM_DENSE,
        "num_categorical": NUM_CATEGORICAL,
    }
    (out_dir / METADATA_NAME).write_text(json.dumps(metadata, indent=2))
    return dict(metadata, report=report)


# --------------------------------------------------------------------------------------
# In-memory data sets for training
# --------------------------------------------------------------------------------------
@dataclass
class Split:
    """One split as arrays: labels [n] float32, dense [n, 13] float32, cats [n, 26] int64."""

    labels: np.ndarray
    dense: np.ndarray
    cats: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class Dataset:
    train: Split
    val: Split
    cardinalities: tuple
    source: str
    report: Optional[ParseReport] = None


def load_tsv(path, *, max_rows: int = DEFAULT_MAX_ROWS, val_fraction: float = 0.1, strict: bool = False,
             cardinalities=None) -> Dataset:
    """A Criteo TSV read whole into memory, modulus-hashed, split by position (small files:
    the shipped sample; preprocess large ones). ``cardinalities`` fixes the table sizes (e.g.
    those a checkpoint was trained with); otherwise min(distinct values + 1, max_rows)."""
    report = ParseReport()
    chunks = list(read_criteo(path, strict=strict, report=report))
    if not chunks:
        raise ValueError(f"{path}: no good lines ({report.summary()})")
    labels = np.concatenate([c[0] for c in chunks]).astype(np.float32)
    dense = transform_dense(np.concatenate([c[1] for c in chunks]))
    raw = np.concatenate([c[2] for c in chunks])
    if cardinalities is None:
        cardinalities = [min(len(np.unique(raw[:, j])) + 1, max_rows) for j in range(NUM_CATEGORICAL)]
    indexer = HashIndexer(cardinalities)
    cats = indexer(raw)
    train_rows = len(labels) - int(round(len(labels) * val_fraction))
    cut = lambda a, lo, hi: np.ascontiguousarray(a[lo:hi])  # noqa: E731
    return Dataset(Split(cut(labels, 0, train_rows), cut(dense, 0, train_rows), cut(cats, 0, train_rows)),
                   Split(cut(labels, train_rows, None), cut(dense, train_rows, None), cut(cats, train_rows, None)),
                   indexer.cardinalities, str(path), report)


def load_preprocessed(directory) -> Dataset:
    """The train and val splits of a ``preprocess`` output folder: those ``metadata.json`` gives
    rows (another parquet file there is not this run's), each checked against its row count."""
    import pyarrow.parquet as pq

    directory = Path(directory)
    meta_path = directory / METADATA_NAME
    if not meta_path.exists():
        raise FileNotFoundError(f"{directory} has no {METADATA_NAME}: not a `fusedmlp dlrm preprocess` folder")
    metadata = json.loads(meta_path.read_text())
    if metadata.get("format") != FORMAT_VERSION:
        raise ValueError(f"{meta_path}: format {metadata.get('format')} is not {FORMAT_VERSION}")
    rows = metadata.get("rows")
    if not isinstance(rows, dict) or not all(isinstance(rows.get(name), int) for name in SPLITS):
        raise ValueError(f"{meta_path}: no row counts for the {' and '.join(SPLITS)} splits")
    splits = {}
    for name in SPLITS:
        file = directory / f"{name}.parquet"
        if rows[name] == 0:
            splits[name] = Split(np.zeros(0, np.float32), np.zeros((0, NUM_DENSE), np.float32),
                                 np.zeros((0, NUM_CATEGORICAL), np.int64))
            continue
        if not file.exists():
            raise FileNotFoundError(f"{file} is missing: {METADATA_NAME} lists {rows[name]} {name} rows")
        table = pq.read_table(file)
        if table.num_rows != rows[name]:
            raise ValueError(f"{file} has {table.num_rows} rows where {METADATA_NAME} lists {rows[name]}: "
                             "files of different preprocess runs; run preprocess again")
        labels = table.column("label").to_numpy().astype(np.float32)
        dense = np.stack([table.column(f"dense_{j}").to_numpy() for j in range(NUM_DENSE)], 1).astype(np.float32)
        cats = np.stack([table.column(f"cat_{j}").to_numpy() for j in range(NUM_CATEGORICAL)], 1).astype(np.int64)
        splits[name] = Split(labels, dense, cats)
    return Dataset(splits["train"], splits["val"], tuple(metadata["cardinalities"]), str(directory))


def load_data(source=None, **kwargs) -> Dataset:
    """A preprocessed folder, a TSV file (plain or gzip), or (None) the shipped sample.
    ``kwargs`` go to ``load_tsv`` (a preprocessed folder carries its own table sizes)."""
    source = Path(source) if source is not None else SAMPLE_PATH
    if source.is_dir():
        return load_preprocessed(source)
    if not source.exists():
        raise FileNotFoundError(f"no data at {source}")
    return load_tsv(source, **kwargs)


# --------------------------------------------------------------------------------------
# Synthetic Criteo-format data with a planted signal
# --------------------------------------------------------------------------------------
def synth_cardinalities(rows: int) -> list:
    """Vocabulary sizes with the Kaggle set's skew (a few huge features, many small), scaled to
    ``rows``: features up to 1000 values keep their size; larger ones get
    min(c, 10 sqrt(c), rows / 2), at least 1000."""
    return [c if c <= 1000 else max(1000, min(c, int(10 * math.sqrt(c)), rows // 2)) for c in KAGGLE_CARDINALITIES]


def synthesize(rows: int, seed: int = 0, signal: float = 1.0, missing: float = 0.05):
    """``rows`` Criteo examples as raw arrays ``(labels, dense, cats)`` from a hidden model.

    Categorical values: per feature a pool of random 32-bit hashes drawn with Zipf-like
    frequencies (rank r with weight r^-1.1), so a few values dominate and a long tail is rare,
    as in the click logs. Dense counts: log-normal with a feature-dependent scale, a few
    negative values and a ``missing`` share of empty fields (categoricals too).
    Labels: Bernoulli(sigmoid(logit)) with logit = bias + dense effects (weights on
    log1p(count)) + a random effect per categorical value + one pairwise effect between two
    features, times ``signal``; the bias is set for a 25% click rate.
    """
    if rows < 0:
        raise ValueError(f"rows must be non-negative, got {rows}")
    rng = np.random.default_rng(seed)
    sizes = synth_cardinalities(max(rows, 1))
    dense_scale = rng.uniform(0.5, 2.5, NUM_DENSE)
    dense = np.floor(np.exp(rng.normal(0, 1, (rows, NUM_DENSE)) * dense_scale)).astype(np.int64)
    dense[rng.random((rows, NUM_DENSE)) < 0.01] = -1
    dense_missing = rng.random((rows, NUM_DENSE)) < missing
    cats = np.empty((rows, NUM_CATEGORICAL), dtype=np.int64)
    ranks = np.empty((rows, NUM_CATEGORICAL), dtype=np.int64)
    effects = []
    for j, size in enumerate(sizes):
        pool = rng.integers(0, 2**32, size)  # (a rare repeated hash merges two values, as in real logs)
        weights = np.arange(1, size + 1, dtype=np.float64) ** -1.1
        ranks[:, j] = rng.choice(size, size=rows, p=weights / weights.sum())
        cats[:, j] = pool[ranks[:, j]]
        effects.append(rng.normal(0, 0.6 if j % 3 == 0 else 0.25, size))
    cat_missing = rng.random((rows, NUM_CATEGORICAL)) < missing
    dense_weights = rng.normal(0, 0.35, NUM_DENSE)
    logit = np.log1p(np.maximum(np.where(dense_missing, 0, dense), 0)) @ dense_weights
    logit = logit - logit.mean() if rows else logit
    for j in range(NUM_CATEGORICAL):
        logit += np.where(cat_missing[:, j], 0.0, effects[j][ranks[:, j]])
    pair = rng.normal(0, 0.5, (4, 4))
    logit += pair[ranks[:, 1] % 4, ranks[:, 8] % 4]
    logit = signal * logit
    lo, hi = -20.0, 20.0  # the bias that gives a 25% click rate, by bisection
    for _ in range(50 if rows else 0):
        bias = (lo + hi) / 2
        lo, hi = (bias, hi) if np.mean(1 / (1 + np.exp(-(logit + bias)))) < 0.25 else (lo, bias)
    bias = (lo + hi) / 2
    labels = (rng.random(rows) < 1 / (1 + np.exp(-(logit + bias)))).astype(np.int8)
    dense[dense_missing] = np.iinfo(np.int64).min  # marks an empty field for the writer
    cats[cat_missing] = -1
    return labels, dense, cats


def write_tsv(path, labels, dense, cats) -> None:
    """Write raw arrays in the Criteo format (gzip when the name ends in .gz). Dense values of
    int64 min and categoricals of -1 are written as empty fields (missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    empty = np.iinfo(np.int64).min
    opener = (lambda p: gzip.open(p, "wt", encoding="utf-8", compresslevel=9)) if path.suffix == ".gz" \
        else (lambda p: open(p, "w", encoding="utf-8"))
    with opener(path) as out:
        for i in range(len(labels)):
            fields = [str(int(labels[i]))]
            fields += ["" if v == empty else str(v) for v in dense[i].tolist()]
            fields += ["" if v < 0 else format(v, "08x") for v in cats[i].tolist()]
            out.write("\t".join(fields) + "\n")
