"""SQuAD 1.1 and 2.0 evaluation giving the same numbers as the official scripts.

Module use:
  evaluate_v1(dataset, predictions) -> {"exact_match", "f1"}
  evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0) -> OrderedDict
CLI (same arguments and printed JSON as evaluate-v1.1.py / evaluate-v2.0.py):
  python squad_evaluation.py data.json predictions.json [--na-prob-file null_odds.json]
      [--na-prob-thresh 1.0] [--out-file eval.json] [--version auto|1.1|2.0]
"""

import argparse
import collections
import json
import re
import string
import sys

import filesystem

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


class SquadEvaluationError(ValueError):
    """Bad evaluator input (file, field or value named in the message)."""


def normalize_answer(text):
    """Lower case, drop punctuation and articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


# ---------------------------------------------------------------- SQuAD 1.1


def f1_score_v1(prediction, ground_truth):
    """Token F1 as in evaluate-v1.1.py (0 when nothing is shared)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_v1(prediction, ground_truth):
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def _max_over_ground_truths(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, truth) for truth in ground_truths)


def evaluate_v1(dataset, predictions, log=None):
    """Exact match and F1 over `dataset` (the file's "data" list), official 1.1 rules."""
    log = log or _stderr
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    log("Unanswered question " + qa["id"] + " will receive score 0.")
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                if not ground_truths:
                    raise SquadEvaluationError(
                        "question %s has no answers: SQuAD 1.1 evaluation needs at least one "
                        "(use --version 2.0 for data with unanswerable questions)" % qa["id"])
                prediction = predictions[qa["id"]]
                exact_match += _max_over_ground_truths(exact_match_v1, prediction, ground_truths)
                f1 += _max_over_ground_truths(f1_score_v1, prediction, ground_truths)
    if total == 0:
        raise SquadEvaluationError("the data file holds no questions")
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


# ---------------------------------------------------------------- SQuAD 2.0


def get_tokens(text):
    if not text:
        return []
    return normalize_answer(text).split()


def compute_exact(a_gold, a_pred):
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold, a_pred):
    """Token F1 as in evaluate-v2.0.py (1 when both are empty)."""
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if not gold_toks or not pred_toks:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def make_qid_to_has_ans(dataset):
    qid_to_has_ans = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qid_to_has_ans[qa["id"]] = bool(qa["answers"])
    return qid_to_has_ans


def get_raw_scores(dataset, preds, log=None):
    """Per-question exact and F1 before any no-answer threshold."""
    log = log or print
    exact_scores = {}
    f1_scores = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qid = qa["id"]
                gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
                if not gold_answers:
                    gold_answers = [""]
                if qid not in preds:
                    log("Missing prediction for %s" % qid)
                    continue
                a_pred = preds[qid]
                exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
                f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    new_scores = {}
    for qid, score in scores.items():
        if na_probs[qid] > na_prob_thresh:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = score
    return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None):
    if not qid_list:
        total = len(exact_scores)
        return collections.OrderedDict([
            ("exact", 100.0 * sum(exact_scores.values()) / total),
            ("f1", 100.0 * sum(f1_scores.values()) / total),
            ("total", total),
        ])
    total = len(qid_list)
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
        ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
        ("total", total),
    ])


def merge_eval(main_eval, new_eval, prefix):
    for key in new_eval:
        main_eval["%s_%s" % (prefix, key)] = new_eval[key]


def find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """Best score over no-answer thresholds, walking questions by rising na_prob."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def find_all_best_thresh(main_eval, preds, exact_raw, f1_raw, na_probs, qid_to_has_ans):
    best_exact, exact_thresh = find_best_thresh(preds, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_thresh = find_best_thresh(preds, f1_raw, na_probs, qid_to_has_ans)
    main_eval["best_exact"] = best_exact
    main_eval["best_exact_thresh"] = exact_thresh
    main_eval["best_f1"] = best_f1
    main_eval["best_f1_thresh"] = f1_thresh


def evaluate_v2(dataset, preds, na_probs=None, na_prob_thresh=1.0, log=None):
    """Official 2.0 metrics; with `na_probs` also the best-threshold search."""
    has_na_probs = na_probs is not None
    if not has_na_probs:
        na_probs = {k: 0.0 for k in preds}
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    exact_raw, f1_raw = get_raw_scores(dataset, preds, log=log)
    if not exact_raw:
        raise SquadEvaluationError("no question of the data file has a prediction")
    missing = [qid for qid in exact_raw if qid not in na_probs]
    if missing:
        raise SquadEvaluationError(
            "the no-answer probabilities lack %d predicted question ids (first: %s)"
            % (len(missing), missing[0]))
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    # The official script indexes the thresholded scores by every data question, so a
    # missing prediction there is a KeyError; here it is a clear error instead.
    for name, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
        if not qids:
            continue
        lacking = [qid for qid in qids if qid not in exact_thresh]
        if lacking:
            raise SquadEvaluationError(
                "%s split: %d questions have no prediction (first: %s)" % (name, len(lacking), lacking[0]))
        merge_eval(out_eval, make_eval_dict(exact_thresh, f1_thresh, qid_list=qids), name)
    if has_na_probs:
        unknown = [qid for qid in na_probs if qid not in qid_to_has_ans]
        if unknown:
            raise SquadEvaluationError(
                "the no-answer probabilities name %d question ids absent from the data (first: %s)"
                % (len(unknown), unknown[0]))
        find_all_best_thresh(out_eval, preds, exact_raw, f1_raw, na_probs, qid_to_has_ans)
    return out_eval


# ---------------------------------------------------------------- files and CLI


def _stderr(message):
    print(message, file=sys.stderr)


def load_json(path, what):
    """Reads a JSON file; errors name the file and what it should hold."""
    try:
        with filesystem.open_file(path) as reader:  # a path with a scheme (gs://...) through tf.io.gfile
            return json.load(reader)
    except OSError as e:
        raise SquadEvaluationError("cannot read %s file %s: %s" % (what, path, e)) from e
    except ValueError as e:
        raise SquadEvaluationError("%s file %s is not valid JSON: %s" % (what, path, e)) from e


def load_dataset(path):
    """Returns (version string, "data" list) of a SQuAD file, checking its structure."""
    dataset_json = load_json(path, "SQuAD data")
    if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
        raise SquadEvaluationError(
            "SQuAD data file %s: expected a JSON object with a \"data\" list" % path)
    for a_index, article in enumerate(dataset_json["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise SquadEvaluationError(
                "SQuAD data file %s: data[%d] needs a \"paragraphs\" list" % (path, a_index))
        for p_index, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise SquadEvaluationError(
                    "SQuAD data file %s: data[%d].paragraphs[%d] needs a \"qas\" list"
                    % (path, a_index, p_index))
            for q_index, qa in enumerate(paragraph["qas"]):
                where = "data[%d].paragraphs[%d].qas[%d]" % (a_index, p_index, q_index)
                if not isinstance(qa, dict) or "id" not in qa or not isinstance(qa.get("answers"), list):
                    raise SquadEvaluationError(
                        "SQuAD data file %s: %s needs \"id\" and an \"answers\" list" % (path, where))
                for answer in qa["answers"]:
                    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
                        raise SquadEvaluationError(
                            "SQuAD data file %s: %s has an answer without a \"text\" string" % (path, where))
    return str(dataset_json.get("version", "")), dataset_json["data"]


def load_predictions(path):
    preds = load_json(path, "predictions")
    if not isinstance(preds, dict) or not all(isinstance(v, str) for v in preds.values()):
        raise SquadEvaluationError(
            "predictions file %s: expected a JSON object mapping question id to answer text" % path)
    return preds


def load_na_probs(path):
    na_probs = load_json(path, "no-answer probability")
    if not isinstance(na_probs, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in na_probs.values()):
        raise SquadEvaluationError(
            "no-answer probability file %s: expected a JSON object mapping question id to a number"
            % path)
    return na_probs


def is_version_2(version, dataset):
    """SQuAD 2.0 data says version "v2.0" or marks questions is_impossible."""
    if version.lstrip("v").startswith("2"):
        return True
    return any("is_impossible" in qa for article in dataset for p in article["paragraphs"]
               for qa in p["qas"])


def build_parser():
    parser = argparse.ArgumentParser(
        description="SQuAD 1.1 / 2.0 evaluation (same numbers as the official scripts).")
    parser.add_argument("data_file", metavar="data.json", help="Input data JSON file.")
    parser.add_argument("pred_file", metavar="pred.json", help="Model predictions.")
    parser.add_argument("--out-file", "-o", metavar="eval.json",
                        help="Write accuracy metrics to file (default is stdout).")
    parser.add_argument("--na-prob-file", "-n", metavar="na_prob.json",
                        help="Model estimates of probability of no answer (2.0).")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                        help='Predict "" if no-answer probability exceeds this (default = 1.0).')
    parser.add_argument("--version", choices=("auto", "1.1", "2.0"), default="auto",
                        help="Which official script to follow; auto reads the data file's version.")
    return parser


def run(data_file, pred_file, version="auto", na_prob_file=None, na_prob_thresh=1.0):
    """Evaluates files; returns (result dict, JSON text the official script prints)."""
    data_version, dataset = load_dataset(data_file)
    preds = load_predictions(pred_file)
    if version == "auto":
        version = "2.0" if (na_prob_file or is_version_2(data_version, dataset)) else "1.1"
    if version == "1.1":
        if na_prob_file:
            raise SquadEvaluationError("--na-prob-file is only used with SQuAD 2.0 (--version 2.0)")
        if data_version != "1.1":
            _stderr("Evaluation expects v-1.1, but got dataset with v-" + data_version)
        result = evaluate_v1(dataset, preds)
        return result, json.dumps(result)
    na_probs = load_na_probs(na_prob_file) if na_prob_file else None
    result = evaluate_v2(dataset, preds, na_probs=na_probs, na_prob_thresh=na_prob_thresh)
    return result, json.dumps(result, indent=2)


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        result, text = run(args.data_file, args.pred_file, version=args.version,
                           na_prob_file=args.na_prob_file, na_prob_thresh=args.na_prob_thresh)
    except SquadEvaluationError as e:
        _stderr("squad_evaluation: error: %s" % e)
        return 2
    if args.out_file:
        with filesystem.open_file(args.out_file, "w") as writer:
            json.dump(result, writer)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
