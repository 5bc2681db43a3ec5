"""Criteo reading, indexing, preprocessing, the synthetic generator and the metrics."""

import gzip
import json

import numpy as np
import pytest

from fusedmlp.dlrm import data
from fusedmlp.dlrm.metrics import accuracy, log_loss, roc_auc


def _line(label="1", dense=None, cats=None):
    dense = [str(i) for i in range(13)] if dense is None else dense
    cats = [format(0x1000 + i, "08x") for i in range(26)] if cats is None else cats
    return "\t".join([label] + dense + cats) + "\n"


def _write(path, lines, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt") as f:
        f.writelines(lines)
    return path


def _read_all(path, **kwargs):
    chunks = list(data.read_criteo(path, **kwargs))
    return tuple(np.concatenate([c[i] for c in chunks]) for i in range(3))


def test_parses_values_and_missing_fields(tmp_path):
    dense = ["", "-2", "7"] + [str(i) for i in range(10)]
    cats = ["", "ffffffff", "0000000a"] + [format(i, "x") for i in range(23)]
    path = _write(tmp_path / "a.tsv", [_line("0", dense, cats), _line()])
    labels, d, c = _read_all(path)
    assert labels.tolist() == [0, 1] and labels.dtype == np.int8
    assert d[0, :3].tolist() == [0, -2, 7]  # missing count -> 0
    assert c[0, :3].tolist() == [-1, 0xFFFFFFFF, 10]  # missing categorical -> -1
    assert c[1, 5] == 0x1005


def test_gzip_and_plain_read_the_same_and_chunks_concatenate(tmp_path):
    labels, dense, cats = data.synthesize(50, seed=3)
    data.write_tsv(tmp_path / "s.tsv", labels, dense, cats)
    data.write_tsv(tmp_path / "s.tsv.gz", labels, dense, cats)
    plain = _read_all(tmp_path / "s.tsv", chunk_rows=7)
    zipped = _read_all(tmp_path / "s.tsv.gz")
    for a, b in zip(plain, zipped):
        assert np.array_equal(a, b)
    assert np.array_equal(plain[0], labels)
    assert np.array_equal(plain[2], cats)
    expected_dense = np.where(dense == np.iinfo(np.int64).min, 0, dense)
    assert np.array_equal(plain[1], expected_dense)


@pytest.mark.parametrize("bad, reason", [
    ("1\t2\t3\n", "fields"),
    (_line(label="2"), "label"),
    (_line(dense=["x"] + ["1"] * 12), "integer feature 1"),
    (_line(dense=["1.5"] + ["1"] * 12), "integer feature 1"),
    (_line(cats=["zz"] + ["a"] * 25), "categorical feature 1"),
    (_line(cats=["a"] * 25 + ["123456789"]), "categorical feature 26"),  # 9 hex digits: not 32-bit
    (_line(cats=["-a"] + ["a"] * 25), "categorical feature 1"),
])
def test_malformed_lines_are_counted_with_line_numbers_or_fail_strict(tmp_path, bad, reason):
    path = _write(tmp_path / "m.tsv", [_line(), bad, "\n", _line(label="0")])
    report = data.ParseReport()
    labels, _, _ = _read_all(path, report=report)
    assert labels.tolist() == [1, 0]  # the good lines, nothing mis-parsed in between
    assert report.good == 2 and report.malformed == 1
    assert report.examples[0][0] == 2 and reason in report.examples[0][1]
    assert "line 2" in report.summary()
    with pytest.raises(data.MalformedLineError, match="line 2"):
        _read_all(path, strict=True)


def test_dense_transform_and_hash_index():
    dense = np.array([[-3, 0, 1, 100] + [0] * 9])
    assert np.allclose(data.transform_dense(dense)[0, :4], np.log1p([0, 0, 1, 100]))
    sizes = list(range(2, 28))
    cats = np.array([[-1] + [5] * 25, [2**32 - 1] * 26])
    index = data.HashIndexer(sizes)(cats)
    assert index[0, 0] == 0  # missing -> (−1 + 1) % n = 0
    assert all(index[0, j] == 6 % sizes[j] for j in range(1, 26))
    assert all(index[1, j] == 2**32 % sizes[j] for j in range(26))
    with pytest.raises(ValueError):
        data.HashIndexer([0] * 26)


def test_vocab_index_by_frequency_with_reserved_unknown():
    counts = [{} for _ in range(26)]
    counts[0] = {7: 5, 9: 3, 11: 1, -1: 4}
    indexer = data.VocabIndexer.from_counts(counts, min_freq=2)
    assert indexer.cardinalities[0] == 3 and indexer.cardinalities[1] == 1
    cats = np.zeros((4, 26), dtype=np.int64)
    cats[:, 0] = [7, 9, 11, -1]
    assert indexer(cats)[:, 0].tolist() == [1, 2, 0, 0]  # rare, missing -> 0
    assert indexer(cats)[:, 1].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("index", ["hash", "vocab"])
def test_preprocess_round_trip(tmp_path, index):
    pytest.importorskip("pyarrow")
    labels, dense, cats = data.synthesize(500, seed=11)
    src = tmp_path / "in.tsv.gz"
    data.write_tsv(src, labels, dense, cats)
    with open(src, "ab") as f:  # a malformed line at the end (line 501): skipped and reported
        f.write(gzip.compress(b"1\tnot a line\n"))
    meta = data.preprocess(src, tmp_path / "out", index=index, val_fraction=0.2, chunk_rows=64, min_freq=2)
    assert meta["rows"] == {"train": 400, "val": 100} and meta["malformed_lines"] == 1
    assert meta["report"].examples[0][0] == 501
    saved = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert saved["cardinalities"] == meta["cardinalities"]
    loaded = data.load_data(tmp_path / "out")
    raw_dense = np.where(dense == np.iinfo(np.int64).min, 0, dense)
    if index == "hash":
        expected = data.HashIndexer(meta["cardinalities"])(cats)
    else:
        expected = data.VocabIndexer.from_counts(
            [dict(zip(*np.unique(cats[:, j], return_counts=True))) for j in range(26)], 2)(cats)
        assert (tmp_path / "out" / "vocab.npz").exists()
    both = (loaded.train, loaded.val)
    assert np.array_equal(np.concatenate([s.labels for s in both]), labels.astype(np.float32))
    assert np.allclose(np.concatenate([s.dense for s in both]), data.transform_dense(raw_dense))
    assert np.array_equal(np.concatenate([s.cats for s in both]), expected)
    assert len(loaded.train) == 400 and len(loaded.val) == 100  # by position: the first 400 train


def test_synthesize_is_seeded_skewed_and_near_the_planted_click_rate():
    a = data.synthesize(4000, seed=5)
    b = data.synthesize(4000, seed=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    labels, dense, cats = a
    assert 0.2 < labels.mean() < 0.3
    values, counts = np.unique(cats[:, 2], return_counts=True)
    assert counts.max() > 20 * np.median(counts)  # a few values dominate (Zipf-like)
    assert (cats == -1).mean() > 0.02 and (dense == np.iinfo(np.int64).min).mean() > 0.02


def test_shipped_sample_reads_clean():
    ds = data.load_data()
    assert len(ds.train) == 18000 and len(ds.val) == 2000
    assert ds.report.malformed == 0
    assert all(ds.train.cats[:, j].max() < ds.cardinalities[j] for j in range(26))


def test_auc_matches_pairwise_count_with_ties():
    rng = np.random.default_rng(0)
    labels = rng.random(300) < 0.3
    scores = np.round(rng.random(300) + labels * 0.3, 1)  # many ties
    pos, neg = scores[labels], scores[~labels]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert roc_auc(labels, scores) == pytest.approx(pairwise, abs=1e-12)
    assert np.isnan(roc_auc(np.ones(4), np.arange(4)))
    p = rng.random(300)
    expected = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert log_loss(labels, p) == pytest.approx(expected)
    assert accuracy([1, 0, 1], [0.9, 0.2, 0.4]) == pytest.approx(2 / 3)
