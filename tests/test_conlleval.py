"""conlleval.py against the standard conlleval output on the shared reference, and its chunk rules."""
import os
import subprocess
import sys

import pytest

import conlleval
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reference():
    pred_path = shared_path("reference", "evaluation", "conll2003_test.seed1.word_gold_pred.txt")
    with open(shared_path("reference", "evaluation", "conll2003_test.seed1.conlleval.txt"), encoding="utf-8") as f:
        return pred_path, f.read()


def test_module_reproduces_reference_report():
    pred_path, expected = _reference()
    counts = conlleval.evaluate_file(pred_path)
    assert conlleval.format_report(counts) == expected
    result = conlleval.metrics(counts)
    assert (result["tokens"], result["phrases"], result["found"], result["correct"]) == (46435, 5648, 7594, 4829)
    assert "%.2f" % result["f1"] == "72.93"
    assert "%.2f" % result["per_type"]["LOC"]["f1"] == "78.40"


def test_cli_reproduces_reference_from_stdin_and_file():
    pred_path, expected = _reference()
    with open(pred_path, "rb") as f:
        from_stdin = subprocess.run([sys.executable, os.path.join(ROOT, "conlleval.py")], stdin=f,
                                    capture_output=True, check=True)
    assert from_stdin.stdout.decode("utf-8") == expected
    from_file = subprocess.run([sys.executable, os.path.join(ROOT, "conlleval.py"), pred_path],
                               capture_output=True, check=True)
    assert from_file.stdout.decode("utf-8") == expected


def test_sentences_api_equals_lines_api():
    pred_path, expected = _reference()
    sentences, current = [], []
    with open(pred_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                current.append(tuple(line.split()))
            elif current:
                sentences.append(current)
                current = []
    if current:
        sentences.append(current)
    assert conlleval.format_report(conlleval.evaluate_sentences(sentences)) == expected


def _report(lines, latex=False):
    return conlleval.format_report(conlleval.evaluate_lines(lines), latex=latex)


def test_iob1_and_iob2_chunks():
    # IOB1: I- starts a chunk after O or another type; B- only separates adjacent chunks of one type.
    iob1 = ["a I-PER I-PER", "b I-PER I-PER", "c B-PER I-PER", "d I-LOC I-LOC", "e O O"]
    counts = conlleval.evaluate_lines(iob1)
    assert (counts.found_correct, counts.found_guessed, counts.correct_chunk) == (3, 2, 1)
    assert counts.found_correct_by_type == {"PER": 2, "LOC": 1}
    # The same sentence in IOB2 gives the same gold chunks.
    iob2 = ["a B-PER B-PER", "b I-PER I-PER", "c B-PER I-PER", "d B-LOC B-LOC", "e O O"]
    counts2 = conlleval.evaluate_lines(iob2)
    assert (counts2.found_correct, counts2.found_guessed, counts2.correct_chunk) == (3, 2, 1)


def test_boundaries_end_chunks_and_are_not_tokens():
    lines = ["a B-PER B-PER", "", "b I-PER I-PER", "-X- x x", "c B-ORG B-LOC"]
    counts = conlleval.evaluate_lines(lines)
    assert counts.token_counter == 3
    assert (counts.found_correct, counts.found_guessed, counts.correct_chunk) == (3, 3, 2)
    assert _report(lines) == (
        "processed 3 tokens with 3 phrases; found: 3 phrases; correct: 2.\n"
        "accuracy:  66.67%; precision:  66.67%; recall:  66.67%; FB1:  66.67\n"
        "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n"
        "              ORG: precision:   0.00%; recall:   0.00%; FB1:   0.00  0\n"
        "              PER: precision: 100.00%; recall: 100.00%; FB1: 100.00  2\n")


def test_hyphenated_types_latex_and_raw():
    lines = ["a B-NAME-X B-NAME-X", "b O B-Y"]
    assert _report(lines, latex=True) == (
        "        & Precision &  Recall  & F$_{\\beta=1} \\\\\\hline\n"
        "NAME-X  &  100.00\\% & 100.00\\% & 100.00 \\\\\n"
        "Y       &    0.00\\% &   0.00\\% &   0.00 \\\\\\hline\n"
        "Overall &   50.00\\% & 100.00\\% &  66.67 \\\\\\hline\n")
    raw = conlleval.evaluate_lines(["a PER PER", "b PER PER", "c N LOC"], raw=True, o_tag="N")
    assert (raw.found_correct, raw.found_guessed, raw.correct_chunk) == (2, 3, 2)


def test_empty_input_prints_only_the_counts_line():
    assert _report([]) == "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"


def test_wrong_number_of_features_names_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a O O\nb O\n", encoding="utf-8")
    with pytest.raises(conlleval.ConllevalError, match=r"unexpected number of features: 2 \(3\) in .*bad.txt line 2"):
        conlleval.evaluate_file(str(path))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "conlleval.py"), str(path)], capture_output=True)
    assert result.returncode == 1
    assert b"unexpected number of features" in result.stderr
    with pytest.raises(conlleval.ConllevalError, match="unexpected number of features in"):
        conlleval.evaluate_lines(["lonely"])
