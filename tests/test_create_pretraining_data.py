"""create_pretraining_data: the original's records (reference files), fast mode, writer, bad input."""
import json
import logging as std_logging
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest

import cli
import filesystem
import create_pretraining_data as cpd
import tokenization
from tests.pretraining_records import read_records
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = cpd.FEATURE_NAMES


def _uncased():
    return shared_path("vocab", "uncased", "vocab.txt")


def assert_same_records(got_path, want_path):
    got, want = read_records(got_path), read_records(want_path)
    assert len(got["input_ids"]) == len(want["input_ids"])
    for name in NAMES:
        assert got[name].dtype.kind == want[name].dtype.kind, name
        rows = np.nonzero((got[name] != want[name]).any(axis=1))[0]
        assert rows.size == 0, "%s differs first in record %d" % (name, rows[0])


def _run(tmp_path, text_or_path, name="out.tfrecord", **kwargs):
    if isinstance(text_or_path, bytes):
        source = tmp_path / "input.txt"
        source.write_bytes(text_or_path)
        text_or_path = str(source)
    kwargs.setdefault("vocab_file", _uncased())
    output = str(tmp_path / name)
    return output, _cpd_run(text_or_path, output, **kwargs)


def _cpd_run(input_file, output_file, vocab_file, **flags):
    """create_pretraining_data.run with these flag values (the others at their defaults)."""
    return cpd.run(cli.build_options(cpd.CreatePretrainingDataOptions, input_file=input_file,
                                     output_file=output_file, vocab_file=vocab_file, **flags))


# ----------------------------------------------------------------------------------------------------------
# Exact mode against the original's records.

@pytest.mark.parametrize("reference,flags", [
    ("sample_text_default.tfrecord", {}),
    ("sample_text_wwm.tfrecord", {"do_whole_word_mask": True}),
])
def test_exact_mode_equals_original_sample_text(tmp_path, reference, flags):
    output, counts = _run(tmp_path, shared_path("data", "text", "sample_text.txt"), dupe_factor=10, **flags)
    assert counts == {output: {"sample_text_default.tfrecord": 118, "sample_text_wwm.tfrecord": 122}[reference]}
    assert_same_records(output, shared_path("reference", "pretraining_data", reference))


def test_exact_mode_equals_original_conll(tmp_path):
    output, counts = _run(tmp_path, shared_path("data", "text", "conll_train_docs.txt"), dupe_factor=2)
    assert counts[output] == 7131
    assert_same_records(output, shared_path("reference", "pretraining_data", "conll_train_docs_dupe2.tfrecord"))


@pytest.mark.slow
def test_exact_mode_documents_run_on_across_files(tmp_path):
    """As in the original, a file that does not end with a blank line continues into the next file, and a glob
    matches in sorted order."""
    first = b"alpha beta gamma .\ndelta epsilon .\n\nzeta eta theta .\niota kappa .\n"
    second = b"lambda mu nu .\nxi omicron pi .\n\nrho sigma tau .\nupsilon phi .\nchi psi omega .\n"
    (tmp_path / "part_b.txt").write_bytes(second)
    (tmp_path / "part_a.txt").write_bytes(first)
    (tmp_path / "joined.txt").write_bytes(first + second)
    split_out, _ = _run(tmp_path, str(tmp_path / "part_*.txt"), name="split", dupe_factor=4)
    joined_out, _ = _run(tmp_path, str(tmp_path / "joined.txt"), name="joined", dupe_factor=4)
    assert_same_records(split_out, joined_out)


@pytest.mark.slow
def test_cli_equals_original_and_spreads_round_robin(tmp_path):
    """The script's flags (original names and defaults), several output files filled round-robin."""
    outputs = [str(tmp_path / ("part%d.tfrecord" % k)) for k in range(3)]
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "create_pretraining_data.py"),
         "--input_file=" + shared_path("data", "text", "sample_text.txt"), "--output_file=" + ",".join(outputs),
         "--vocab_file=" + _uncased()],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stderr
    assert "*** Example ***" in log and "tokens: [CLS]" in log and "masked_lm_positions:" in log
    assert "Wrote 118 total instances" in log
    assert "masks fewer than" not in log  # the original's defaults: 0.15 x 128 tokens = 19 masks, at most 20
    parts = [read_records(path) for path in outputs]
    assert [len(p["input_ids"]) for p in parts] == [40, 39, 39]
    for k, path in enumerate(outputs):
        assert "%s: %d instances" % (path, len(parts[k]["input_ids"])) in log
    want = read_records(shared_path("reference", "pretraining_data", "sample_text_default.tfrecord"))
    for name in NAMES:
        merged = np.zeros_like(want[name])
        for k in range(3):
            merged[k::3] = parts[k][name]
        np.testing.assert_array_equal(merged, want[name])


def test_inlined_shuffle_draws_like_random_shuffle():
    assert cpd.shuffle is cpd._shuffle_by_getrandbits  # CPython 3.11's shuffle; otherwise rng.shuffle is used
    ours, theirs = random.Random(7), random.Random(7)
    for size in range(0, 400, 7):
        mine, want = list(range(size)), list(range(size))
        cpd.shuffle(mine, ours)
        theirs.shuffle(want)
        assert mine == want
    assert ours.getstate() == theirs.getstate()


def test_cached_tokenizer_equals_original_ids():
    for name, lower in (("uncased", True), ("cased", False)):
        vocab = cpd._load_vocab(shared_path("vocab", name, "vocab.txt"))
        tokenizer = cpd.CachedTokenizer(vocab, lower, cache_size=1000)
        with open(shared_path("reference", "tokenization", name + ".jsonl"), encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                assert tokenizer.ids(record["text"]) == record["ids"], record["text"][:80]


def test_ascii_words_split_like_basic_tokenizer():
    rng = np.random.default_rng(1)
    alphabet = [chr(c) for c in range(33, 127)] + ["a", "e", "Z", "0"] * 10
    words = ["".join(rng.choice(alphabet, size=rng.integers(1, 12))) for _ in range(5000)]
    words += [chr(c) for c in range(33, 127)] + ["U.S.", "don't", "1,000.50", "(AP)", "e-mail", "ABC's"]
    vocab = cpd._load_vocab(_uncased())
    for lower in (True, False):
        tokenizer = cpd.CachedTokenizer(vocab, lower)
        basic = tokenization.BasicTokenizer(do_lower_case=lower)
        for word in words:
            assert tokenizer.basic_tokens(word) == basic.tokenize(word), word


# ----------------------------------------------------------------------------------------------------------
# Writer: tf.train.Example serialization and TFRecord framing without TensorFlow.


# ----------------------------------------------------------------------------------------------------------
# Fast mode.

def _instance_checks(records, vocab, max_seq_length=128, whole_word=False):
    """Structural invariants of every record; returns summary statistics."""
    ids, mask, seg = records["input_ids"], records["input_mask"], records["segment_ids"]
    pos, mids, weights = records["masked_lm_positions"], records["masked_lm_ids"], records["masked_lm_weights"]
    assert ids.shape[1] == max_seq_length
    stats = {"masked": 0, "as_mask": 0, "kept": 0, "tokens": 0}
    for row in range(len(ids)):
        n = int(mask[row].sum())
        assert (mask[row, :n] == 1).all() and (ids[row, n:] == 0).all() and (seg[row, n:] == 0).all()
        assert ids[row, 0] == vocab.cls_id and ids[row, n - 1] == vocab.sep_id
        len_a = int((seg[row, :n] == 0).sum()) - 2
        assert len_a >= 1 and ids[row, len_a + 1] == vocab.sep_id and n - len_a - 3 >= 1
        k = int(weights[row].sum())
        assert (weights[row, :k] == 1).all() and (weights[row, k:] == 0).all()
        p = pos[row, :k]
        assert (np.diff(p) > 0).all() and (p >= 1).all() and (p < n - 1).all() and (p != len_a + 1).all()
        assert k == min(20, max(1, int(round(n * 0.15))), n - 3) or whole_word
        stats["masked"] += k
        stats["tokens"] += n
        stats["as_mask"] += int((ids[row, p] == vocab.mask_id).sum())
        stats["kept"] += int((ids[row, p] == mids[row, :k]).sum())
        if whole_word:  # a masked '##' piece implies the piece before it (across the middle [SEP]) is masked
            masked = set(p.tolist())
            for q, label in zip(p.tolist(), mids[row, :k].tolist()):
                if vocab.is_subword[label] and q > 1:
                    assert (q - 2 if q == len_a + 2 else q - 1) in masked
    stats["random_next"] = float(records["next_sentence_labels"].mean())
    return stats


@pytest.mark.slow
def test_fast_mode_follows_the_algorithm_and_is_deterministic(tmp_path):
    conll = shared_path("data", "text", "conll_train_docs.txt")
    vocab = cpd.Vocab(cpd._load_vocab(_uncased()))
    out1, counts1 = _run(tmp_path, conll, name="a.tfrecord", dupe_factor=2, num_workers=2)
    out2, counts2 = _run(tmp_path, conll, name="b.tfrecord", dupe_factor=2, num_workers=2)
    assert sorted(counts1) == [out1 + "-00000-of-00002", out1 + "-00001-of-00002"]
    for (p1, c1), (p2, c2) in zip(sorted(counts1.items()), sorted(counts2.items())):
        assert c1 == c2 and c1 > 3000
        with open(p1, "rb") as f1, open(p2, "rb") as f2:
            assert f1.read() == f2.read()
    total = sum(counts1.values())
    # The same algorithm makes about as many instances as exact mode (over seeds: 6,932 to 7,273, mean length
    # 100.9 to 105.3 tokens).
    assert abs(total - 7131) < 7131 * 0.05
    records = {name: np.concatenate([read_records(p)[name] for p in sorted(counts1)]) for name in NAMES}
    stats = _instance_checks(records, vocab)
    assert 0.78 < stats["as_mask"] / stats["masked"] < 0.82
    assert 0.08 < stats["kept"] / stats["masked"] < 0.12
    exact_out, _ = _run(tmp_path, conll, name="exact.tfrecord", dupe_factor=2)
    exact = _instance_checks(read_records(exact_out), vocab)
    assert abs(stats["random_next"] - exact["random_next"]) < 0.03  # 0.58 on this corpus (short documents)
    assert abs(stats["tokens"] / total - exact["tokens"] / 7131) < 5.0
    assert abs(stats["masked"] / stats["tokens"] - exact["masked"] / exact["tokens"]) < 0.005


def test_fast_mode_whole_word_masking(tmp_path):
    vocab = cpd.Vocab(cpd._load_vocab(_uncased()))
    out, counts = _run(tmp_path, shared_path("data", "text", "sample_text.txt"), dupe_factor=5,
                       do_whole_word_mask=True, num_workers=1)
    stats = _instance_checks(read_records(out), vocab, whole_word=True)
    assert counts[out] > 40 and stats["masked"] > 0


def test_fast_mode_reads_every_document_once(tmp_path):
    text = (b"first doc line one .\r\nline two\n\n \n\xe3\x80\x80\nsecond doc\n\n\nthird doc a\nthird b\n"
            b"\x01\x02\nfourth\n\n")
    files = []
    for k, body in enumerate([text, b"no final blank line\nstill\n", b"", text * 3]):
        path = tmp_path / ("in%d.txt" % k)
        path.write_bytes(body)
        files.append(str(path))
    files.append(shared_path("data", "text", "sample_text.txt"))
    vocab = cpd._load_vocab(_uncased())
    tokenizer = cpd.CachedTokenizer(vocab, True)
    whole = []
    for path in files:
        whole.extend(cpd.read_documents_in_range(path, 0, os.path.getsize(path), tokenizer, cpd.ReadStats()))
    assert len(whole) == 3 + 1 + 0 + 9 + 3
    sizes = [os.path.getsize(p) for p in files]
    for parts in range(1, 40, 3):
        got = []
        for start, end in filesystem.byte_ranges(sizes, parts):
            for path, lo, hi in filesystem.range_parts(files, sizes, start, end):
                got.extend(cpd.read_documents_in_range(path, lo, hi, tokenizer, cpd.ReadStats()))
        assert got == whole, parts


def test_fast_mode_output_layout(tmp_path):
    sample = str(tmp_path / "sample4.txt")
    with open(shared_path("data", "text", "sample_text.txt"), "rb") as f:
        text = f.read()
    with open(sample, "wb") as f:
        f.write((text.rstrip(b"\n") + b"\n\n") * 4)
    paths = [str(tmp_path / ("o%d" % k)) for k in range(4)]
    counts = _cpd_run(sample, ",".join(paths), _uncased(), num_workers=2, dupe_factor=2)
    assert sorted(counts) == sorted(paths) and all(c > 0 for c in counts.values())
    counts = _cpd_run(sample, str(tmp_path / "t"), _uncased(), num_workers=2, num_tasks=3, task_index=1,
                      dupe_factor=2)
    assert sorted(counts) == [str(tmp_path / "t-00002-of-00006"), str(tmp_path / "t-00003-of-00006")]
    _cpd_run(sample, str(tmp_path / "one"), _uncased(), num_workers=6, dupe_factor=2)
    for shard in ("-00002-of-00006", "-00003-of-00006"):  # machine 1 of 3 writes what one machine would
        with open(str(tmp_path / "t") + shard, "rb") as f1, open(str(tmp_path / "one") + shard, "rb") as f2:
            assert f1.read() == f2.read()
    with pytest.raises(ValueError, match="--output_file has 3 paths and --num_workers=2"):
        _cpd_run(sample, ",".join(paths[:3]), _uncased(), num_workers=2)


def test_fast_mode_windows(tmp_path, caplog):
    """Small windows: several per worker, every document used, random next sentences within a window."""
    caplog.set_level(std_logging.INFO)
    text = b"".join(b"doc %d sentence one .\ndoc %d sentence two is here .\ndoc %d three\n\n" % (k, k, k)
                    for k in range(300))
    out, counts = _run(tmp_path, text, num_workers=1, window_tokens=400, dupe_factor=1)
    match = re.search(r"worker 0: 300 documents, (\d+) windows, (\d+) instances", caplog.text)
    assert match and 10 <= int(match.group(1)) <= 40 and int(match.group(2)) == counts[out]
    records = read_records(out)
    vocab = cpd.Vocab(cpd._load_vocab(_uncased()))
    _instance_checks(records, vocab)


# ----------------------------------------------------------------------------------------------------------
# Logging and bad input.

def test_logs_examples_and_counts(tmp_path, caplog):
    caplog.set_level(std_logging.INFO)
    out, counts = _run(tmp_path, shared_path("data", "text", "sample_text.txt"), dupe_factor=1)
    text = caplog.text
    assert text.count("*** Example ***") == min(20, counts[out])
    assert "tokens: [CLS]" in text and "masked_lm_labels:" in text and "segment_ids: 0 0" in text
    assert "read 3 documents" in text and "%s: %d instances" % (out, counts[out]) in text
    assert re.search(r"made instances from: 3 documents of 3 \(100.0%\), \d+ documents/s, .*ETA", text)
    caplog.clear()
    out, counts = _run(tmp_path, shared_path("data", "text", "sample_text.txt"), name="fast", num_workers=1)
    assert re.search(r"worker 0/1: %s instances, \d+ instances/s, 3 documents, 100.0%% of its .* read, "
                     r"100%% done, ETA 0:00:00" % "{:,}".format(counts[out]), caplog.text)
    assert caplog.text.count("*** Example ***") == 20


def test_a_cap_on_the_masks_of_a_full_sequence_is_logged(tmp_path, caplog):
    """max_predictions_per_seq below masked_lm_prob x max_seq_length caps longer sequences' masks, as the
    original does (the records stay the original's); the run says so in one warning."""
    caplog.set_level(std_logging.WARNING)
    out, _ = _run(tmp_path, shared_path("data", "text", "sample_text.txt"), dupe_factor=1, max_seq_length=64,
                  masked_lm_prob=0.6, max_predictions_per_seq=20)
    assert caplog.text.count("--max_predictions_per_seq=20 masks fewer than --masked_lm_prob=0.6 of a full "
                             "sequence's tokens (38 of 64)") == 1
    masks = read_records(out)["masked_lm_weights"].sum(axis=1)
    assert masks.max() == 20 and (masks == 20).mean() > 0.5
    caplog.clear()
    _run(tmp_path, shared_path("data", "text", "sample_text.txt"), name="uncapped", dupe_factor=1,
         max_seq_length=64, masked_lm_prob=0.6, max_predictions_per_seq=38)
    assert "masks fewer than" not in caplog.text


@pytest.mark.parametrize("body", [b"", b"\n\n  \n\t\n", b"\x01\x02\n\n"])
def test_no_documents_is_an_error_and_leaves_no_file(tmp_path, body):
    for workers in (0, 2):
        with pytest.raises(ValueError, match="no documents in --input_file"):
            _run(tmp_path, body, num_workers=workers)
        assert not [p for p in os.listdir(tmp_path) if p.startswith("out")]


def test_blank_only_documents_change_nothing(tmp_path):
    plain = b"a b c .\nd e f .\n\ng h .\ni j k l .\n\nm n o .\np q .\n"
    padded = b"\n \n" + plain.replace(b"\n\n", b"\n\n\n  \n\t\n\n") + b"\n\n"
    out1, _ = _run(tmp_path, plain, name="plain", dupe_factor=3)
    out2, _ = _run(tmp_path, padded, name="padded", dupe_factor=3)
    assert_same_records(out1, out2)


def test_one_sentence_documents(tmp_path, caplog):
    out, counts = _run(tmp_path, b"one lonely sentence here .\n\nanother one .\n", dupe_factor=2)
    records = read_records(out)
    assert counts[out] == 4 and (records["next_sentence_labels"] == 1).all()
    caplog.set_level(std_logging.WARNING)
    out, counts = _run(tmp_path, b"only one sentence in the corpus .\n", name="single", dupe_factor=1)
    assert counts[out] == 1 and "only one document" in caplog.text


def test_invalid_utf8_names_file_line_and_byte_in_both_modes(tmp_path):
    """One message, as the runners': the file, its line and the byte, also from a worker starting mid-file."""
    for num_workers in (0, 1):
        with pytest.raises(ValueError, match=r"input.txt line 2: not valid UTF-8 \(invalid start byte at byte 14\); "):
            _run(tmp_path, b"good line\nbad \xff\xfe line\n", num_workers=num_workers)
    with pytest.raises(ValueError, match=r"input.txt line 204: not valid UTF-8 \(invalid start byte at byte 2113\)"):
        _run(tmp_path, b"first document line\n\n" * 100 + b"xx\n" * 3 + b"bad \xff line\n\n", num_workers=2)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out")]


def test_bad_flags_and_paths(tmp_path):
    sample = shared_path("data", "text", "sample_text.txt")
    with pytest.raises(ValueError, match="--vocab_file .*missing.txt does not exist"):
        _run(tmp_path, sample, vocab_file=str(tmp_path / "missing.txt"))
    # An output folder that does not exist yet is created; one below a regular file is an error naming the flag.
    made = tmp_path / "no_such_dir" / "deeper" / "out.tfrecord"
    _cpd_run(sample, str(made), _uncased(), dupe_factor=1)
    assert len(read_records(str(made))["input_ids"]) > 0
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="--output_file=.*a_file/out.tfrecord: cannot create the folder: .*a_file "
                                         "is a file"):
        _cpd_run(sample, str(tmp_path / "a_file" / "out.tfrecord"), _uncased())
    assert not os.path.exists(tmp_path / "a_file" / "out.tfrecord")
    with pytest.raises(ValueError, match="--max_seq_length=4 is too small"):
        _run(tmp_path, sample, max_seq_length=4)
    with pytest.raises(ValueError, match="--input_file pattern .* matches no file"):
        _run(tmp_path, str(tmp_path / "nothing*.txt"))
    with pytest.raises(ValueError, match="--masked_lm_prob"):
        _run(tmp_path, sample, masked_lm_prob=1.5)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(ValueError, match=r"no \[MASK\] token"):
        _run(tmp_path, sample, vocab_file=str(vocab))
    out, counts = _run(tmp_path, sample, max_seq_length=5, dupe_factor=1)
    assert (read_records(out)["input_mask"].sum(axis=1) == 5).all()


def test_script_does_not_load_tensorflow():
    """Exact-mode and fast-mode workers run without TensorFlow (start-up time and memory)."""
    code = "import sys, create_pretraining_data; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "False"
