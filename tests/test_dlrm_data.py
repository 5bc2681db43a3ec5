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
    # what int() takes but the format does not: signs, spaces, '_', a 0x prefix, other scripts' digits
    (_line(cats=[" -1"] + ["a"] * 25), "categorical feature 1"),
    (_line(cats=["a"] * 2 + ["ab_cd"] + ["a"] * 23), "categorical feature 3"),
    (_line(cats=[" 0X1f"] + ["a"] * 25), "categorical feature 1"),
    (_line(cats=["a"] * 25 + ["abcd12 "]), "categorical feature 26"),  # trailing space: same rule as...
    (_line(cats=["a"] * 25 + ["00000012   "]), "categorical feature 26"),
    (_line(dense=["1"] * 12 + ["5 "]), "integer feature 13"),  # ...for counts
    (_line(dense=["1_000"] + ["1"] * 12), "integer feature 1"),
    (_line(dense=["\u0661\u0662"] + ["1"] * 12), "integer feature 1"),  # Arabic-Indic 12
    (_line(dense=["+5"] + ["1"] * 12), "integer feature 1"),
    (_line(dense=["-"] + ["1"] * 12), "integer feature 1"),
    (_line(dense=["1"] * 4 + [str(2**63)] + ["1"] * 8), "integer feature 5 is 9223372036854775808, out of"),
    (_line(dense=["1"] * 4 + [str(-2**63 - 1)] + ["1"] * 8), "integer feature 5"),
    (_line(dense=["9" * 5000] + ["1"] * 12), "out of the 64-bit range"),
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


def test_accepts_every_width_case_and_the_int64_range(tmp_path):
    rng = np.random.default_rng(7)
    hashes = rng.integers(0, 2**32, (30, 26))
    counts = rng.integers(-2**63, 2**63 - 1, (30, 13), endpoint=True)
    counts[0, :4] = [-2**63, 2**63 - 1, 10**18, -10**18]  # the ends, and 19 digits
    lines = []
    for i in range(30):
        cats = [format(int(v), "x").zfill(int(w)) for v, w in zip(hashes[i], rng.integers(1, 9, 26))]
        cats = [c.upper() if rng.random() < 0.5 else c for c in cats]
        lines.append(_line(str(i % 2), [str(v) for v in counts[i]], cats).replace("\n", "\r\n" if i % 3 else "\n"))
    lines[5] = lines[5].replace("\t" + str(counts[5, 0]) + "\t", "\t-00000000000000000000042\t", 1)
    counts[5, 0] = -42  # leading zeros: more than 19 digits, in range
    report = data.ParseReport()
    labels, dense, cats = _read_all(_write(tmp_path / "w.tsv", lines), report=report)
    assert report.malformed == 0
    assert np.array_equal(dense, counts) and np.array_equal(cats, hashes)


def test_undecodable_line_is_malformed_and_truncated_gzip_names_the_file(tmp_path):
    labels, dense, cats = data.synthesize(300, seed=4)
    data.write_tsv(tmp_path / "s.tsv", labels, dense, cats)
    raw = (tmp_path / "s.tsv").read_bytes().split(b"\n")
    raw[6] = raw[6].replace(b"\t", b"\t\xe9", 1)  # Latin-1 in line 7
    (tmp_path / "latin1.tsv").write_bytes(b"\n".join(raw))
    report = data.ParseReport()
    got, _, _ = _read_all(tmp_path / "latin1.tsv", report=report)
    assert report.malformed == 1 and report.examples[0][0] == 7 and "UTF-8" in report.examples[0][1]
    assert np.array_equal(got, np.delete(labels, 6))
    with pytest.raises(data.MalformedLineError, match="line 7: not UTF-8"):
        _read_all(tmp_path / "latin1.tsv", strict=True)

    whole = gzip.compress((tmp_path / "s.tsv").read_bytes())
    (tmp_path / "cut.tsv.gz").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(EOFError, match=r"cut\.tsv\.gz: the gzip data ends after line \d+"):
        data.preprocess(tmp_path / "cut.tsv.gz", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["", "\n\n", _line().replace("1\t", "label\t", 1)])
def test_preprocess_of_a_file_without_good_lines_makes_no_folder(tmp_path, content):
    path = _write(tmp_path / "e.tsv", [content])
    with pytest.raises(ValueError, match="no good lines"):
        data.preprocess(path, tmp_path / "a" / "out")
    assert not (tmp_path / "a").exists()


def test_reused_out_folder_holds_only_the_new_run(tmp_path):
    pytest.importorskip("pyarrow")
    labels, dense, cats = data.synthesize(200, seed=8)
    data.write_tsv(tmp_path / "in.tsv", labels, dense, cats)
    out = tmp_path / "out"
    data.preprocess(tmp_path / "in.tsv", out, index="vocab", val_fraction=0.25)
    (out / "val.parquet").rename(tmp_path / "old_val.parquet")  # kept to plant below
    data.preprocess(tmp_path / "in.tsv", out, index="vocab", val_fraction=0.25)
    meta = data.preprocess(tmp_path / "in.tsv", out, index="hash", val_fraction=0.0)
    assert meta["rows"] == {"train": 200, "val": 0}
    assert sorted(p.name for p in out.iterdir()) == ["metadata.json", "train.parquet"]  # old val, vocab gone
    assert len(data.load_preprocessed(out).val) == 0

    (tmp_path / "old_val.parquet").rename(out / "val.parquet")  # a stray split metadata does not list
    loaded = data.load_preprocessed(out)
    assert len(loaded.train) == 200 and len(loaded.val) == 0
    saved = json.loads((out / "metadata.json").read_text())
    (out / "metadata.json").write_text(json.dumps(dict(saved, rows={"train": 150, "val": 50})))
    with pytest.raises(ValueError, match=r"train\.parquet has 200 rows where metadata\.json lists 150"):
        data.load_preprocessed(out)
    (out / "val.parquet").unlink()
    (out / "metadata.json").write_text(json.dumps(dict(saved, rows={"train": 200, "val": 50})))
    with pytest.raises(FileNotFoundError, match=r"val\.parquet is missing"):
        data.load_preprocessed(out)


def test_vocab_cap_gives_max_rows_tables_when_missing_is_frequent(tmp_path):
    pytest.importorskip("pyarrow")
    labels, dense, cats = data.synthesize(400, seed=12, missing=0.4)  # -1: often the top count
    data.write_tsv(tmp_path / "in.tsv", labels, dense, cats)
    meta = data.preprocess(tmp_path / "in.tsv", tmp_path / "out", index="vocab", max_rows=10)
    distinct = [len(np.unique(cats[cats[:, j] >= 0, j])) for j in range(26)]
    assert meta["cardinalities"] == [min(n, 9) + 1 for n in distinct]
    assert max(distinct) > 9  # the cap was hit
    vocab = np.load(tmp_path / "out" / "vocab.npz")
    for j in range(26):  # the 9 most frequent values (ties by value), missing not among them
        values, counts = np.unique(cats[cats[:, j] >= 0, j], return_counts=True)
        top = values[np.lexsort((values, -counts))][:9]
        assert vocab[f"cat_{j}"].tolist() == top.tolist()
    counts = [{-1: 50, 3: 5, 4: 4, 5: 3}] + [{}] * 25
    assert data.VocabIndexer.from_counts(counts, 1, max_values=2).vocabularies[0].tolist() == [3, 4]


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
