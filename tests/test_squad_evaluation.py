"""squad_evaluation.py against the official SQuAD scripts' printed outputs."""
import json
import os
import subprocess
import sys

import pytest

import squad_evaluation as se
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reference(name):
    return shared_path("reference", "evaluation", name)


def test_v1_cli_prints_official_output(capsys):
    code = se.main([shared_path("data", "squad", "v1.1", "dev-v1.1.json"),
                    _reference("squad_v1.1_dev.seed1.predictions.json")])
    assert code == 0
    with open(_reference("squad_v1.1_dev.seed1.official.json")) as f:
        expected = f.read()
    assert capsys.readouterr().out.rstrip("\n") == expected.rstrip("\n")


def test_v2_cli_prints_official_output_with_na_probs(capsys):
    code = se.main([shared_path("data", "squad", "v2.0_dev_subset", "dev-v2.0.json"),
                    _reference("squad_v2.0_dev_subset.seed1.predictions.json"),
                    "--na-prob-file", _reference("squad_v2.0_dev_subset.seed1.na_probs.json")])
    assert code == 0
    out = capsys.readouterr().out
    with open(_reference("squad_v2.0_dev_subset.seed1.official.json")) as f:
        expected = f.read()
    assert out.rstrip("\n") == expected.rstrip("\n")
    # every number, key and key order
    assert list(json.loads(out).items()) == list(json.loads(expected).items())


def test_cli_as_subprocess_and_out_file(tmp_path):
    out_file = tmp_path / "eval.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "squad_evaluation.py"),
         shared_path("data", "squad", "v1.1", "dev-v1.1.json"),
         _reference("squad_v1.1_dev.seed1.predictions.json"), "--out-file", str(out_file)],
        capture_output=True, text=True, check=True)
    assert proc.stdout == ""
    with open(_reference("squad_v1.1_dev.seed1.official.json")) as f:
        assert json.load(open(out_file)) == json.load(f)


def test_v2_without_na_probs_and_threshold():
    _, dataset = se.load_dataset(shared_path("data", "squad", "v2.0_dev_subset", "dev-v2.0.json"))
    preds = se.load_predictions(_reference("squad_v2.0_dev_subset.seed1.predictions.json"))
    na_probs = se.load_na_probs(_reference("squad_v2.0_dev_subset.seed1.na_probs.json"))
    plain = se.evaluate_v2(dataset, preds)
    assert "best_exact" not in plain and plain["total"] == 706
    assert plain["HasAns_total"] == 386 and plain["NoAns_total"] == 320
    # na_prob_thresh 0: every question with na_prob > 0 is predicted unanswerable
    thresh0 = se.evaluate_v2(dataset, preds, na_probs=na_probs, na_prob_thresh=0.0)
    assert thresh0["NoAns_exact"] == 100.0 * sum(1 for q in _no_ans(dataset) if na_probs[q] > 0) / 320
    assert thresh0["HasAns_exact"] < plain["HasAns_exact"]


def _no_ans(dataset):
    return [qa["id"] for a in dataset for p in a["paragraphs"] for qa in p["qas"] if not qa["answers"]]


def test_normalization_and_metric_semantics():
    assert se.normalize_answer("The  Quick, brown-fox!  ") == "quick brownfox"
    assert se.normalize_answer("an apple and a pear") == "apple and pear"
    assert se.compute_exact("Denver Broncos", "the denver broncos.") == 1
    assert se.f1_score_v1("denver", "Denver Broncos") == pytest.approx(2 / 3)
    # an empty prediction scores 0 in 1.1 but 1 against an empty gold in 2.0
    assert se.f1_score_v1("", "") == 0
    assert se.compute_f1("", "") == 1
    assert se.compute_f1("the", "") == 1  # both normalize to nothing
    assert se.compute_f1("Paris", "") == 0


def test_missing_predictions_score_zero_in_v1(capsys):
    dataset = [{"paragraphs": [{"qas": [
        {"id": "a", "answers": [{"text": "Paris"}]},
        {"id": "b", "answers": [{"text": "Rome"}, {"text": "the city of Rome"}]}]}]}]
    result = se.evaluate_v1(dataset, {"b": "city of Rome"})
    assert result == {"exact_match": 50.0, "f1": 50.0}
    assert "Unanswered question a will receive score 0." in capsys.readouterr().err


def test_v2_best_threshold_search():
    dataset = [{"paragraphs": [{"qas": [
        {"id": "h1", "answers": [{"text": "x y"}]},
        {"id": "h2", "answers": [{"text": "z"}]},
        {"id": "n1", "answers": []}]}]}]
    preds = {"h1": "x y", "h2": "w", "n1": "q"}
    na = {"h1": 0.1, "h2": 0.5, "n1": 0.9}
    out = se.evaluate_v2(dataset, preds, na_probs=na)
    assert out["exact"] == pytest.approx(100 / 3)
    # threshold 0.1 answers h1 only: h1 right, h2 and n1 abstain -> 2 of 3
    assert out["best_exact"] == pytest.approx(200 / 3) and out["best_exact_thresh"] == 0.1


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    ('{"version": "1.1"}', 'expected a JSON object with a "data" list'),
    ('{"data": [{"title": "x"}]}', 'data[0] needs a "paragraphs" list'),
    ('{"data": [{"paragraphs": [{"qas": [{"id": "a"}]}]}]}', 'needs "id" and an "answers" list'),
    ('{"data": [{"paragraphs": [{"qas": [{"id": "a", "answers": [{"answer_start": 1}]}]}]}]}',
     'answer without a "text" string'),
])
def test_bad_data_file_errors(tmp_path, capsys, content, message):
    data = tmp_path / "data.json"
    data.write_text(content)
    preds = tmp_path / "preds.json"
    preds.write_text('{"a": "x"}')
    assert se.main([str(data), str(preds)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(data) in err


def test_bad_predictions_and_na_probs(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"version": "v2.0", "data": [{"paragraphs": [{"qas": [
        {"id": "a", "answers": []}, {"id": "b", "answers": [{"text": "t"}]}]}]}]}))
    preds = tmp_path / "preds.json"
    preds.write_text('["a"]')
    with pytest.raises(se.SquadEvaluationError, match="mapping question id to answer text"):
        se.run(str(data), str(preds))
    preds.write_text('{"a": "", "b": "t"}')
    na = tmp_path / "na.json"
    na.write_text('{"a": 0.5}')
    with pytest.raises(se.SquadEvaluationError, match="lack 1 predicted question ids"):
        se.run(str(data), str(preds), na_prob_file=str(na))
    with pytest.raises(se.SquadEvaluationError, match="cannot read predictions file"):
        se.run(str(data), str(tmp_path / "absent.json"))
    result, _ = se.run(str(data), str(preds))
    assert result["exact"] == 100.0 and result["NoAns_total"] == 1
