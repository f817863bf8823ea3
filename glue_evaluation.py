"""GLUE's metrics, as run_classifier.py reports them in eval_results.txt: accuracy, F1 of class 1, Matthews
correlation (CoLA), Pearson and Spearman correlation (STS-B). NumPy only; scikit-learn and SciPy give the same
numbers (tests/test_glue_evaluation.py).

    compute_metrics(("accuracy", "f1"), predicted_class_ids, label_ids) -> {"eval_accuracy": ..., "eval_f1": ...}
"""
import collections
import math

import numpy as np


def accuracy(predictions, labels):
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels)) if labels.size else 0.0


def _confusion(predictions, labels, positive=1):
    predictions, labels = np.asarray(predictions) == positive, np.asarray(labels) == positive
    return (float(np.sum(predictions & labels)), float(np.sum(predictions & ~labels)),
            float(np.sum(~predictions & labels)), float(np.sum(~predictions & ~labels)))


def f1_score(predictions, labels, positive=1):
    """Binary F1 of the positive class (0.0 when there are no true positives)."""
    tp, fp, fn, _ = _confusion(predictions, labels, positive)
    return 2 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0


def matthews_corrcoef(predictions, labels):
    """Matthews correlation of binary predictions (0.0 when undefined, as scikit-learn)."""
    tp, fp, fn, tn = _confusion(predictions, labels)
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def pearson_corrcoef(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xm, ym = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(np.sum(xm * xm)) * float(np.sum(ym * ym)))
    return float(np.sum(xm * ym)) / denominator if denominator else 0.0


def _average_ranks(x):
    """1-based ranks with ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    boundaries = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1], [True]])
    starts = np.flatnonzero(boundaries)
    ranks_sorted = np.empty(len(x), np.float64)
    for begin, end in zip(starts[:-1], starts[1:]):
        ranks_sorted[begin:end] = (begin + 1 + end) / 2.0
    ranks = np.empty(len(x), np.float64)
    ranks[order] = ranks_sorted
    return ranks


def spearman_corrcoef(x, y):
    return pearson_corrcoef(_average_ranks(x), _average_ranks(y))


METRICS = {"accuracy": accuracy, "f1": f1_score, "mcc": matthews_corrcoef, "pearson": pearson_corrcoef,
           "spearman": spearman_corrcoef}


def compute_metrics(metric_names, predictions, labels):
    """{"eval_<name>": value} of the task's metrics (predicted class ids, or scores for regression)."""
    result = collections.OrderedDict()
    for name in metric_names:
        result["eval_" + name] = METRICS[name](predictions, labels)
    if "pearson" in metric_names and "spearman" in metric_names:
        result["eval_corr"] = (result["eval_pearson"] + result["eval_spearman"]) / 2.0
    return result
