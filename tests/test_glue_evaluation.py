"""glue_evaluation.py: the GLUE metrics equal scikit-learn's and SciPy's (ties included); the runs that write them
are in tests/test_run_classifier.py."""
import numpy as np
import pytest

import glue_evaluation


def test_metrics_match_scikit_learn_and_scipy():
    from scipy import stats
    from sklearn import metrics as sklearn_metrics
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    preds = np.where(rng.random(500) < 0.7, labels, 1 - labels)
    assert glue_evaluation.accuracy(preds, labels) == pytest.approx(sklearn_metrics.accuracy_score(labels, preds))
    assert glue_evaluation.f1_score(preds, labels) == pytest.approx(sklearn_metrics.f1_score(labels, preds))
    assert glue_evaluation.matthews_corrcoef(preds, labels) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(labels, preds))
    assert glue_evaluation.matthews_corrcoef(np.ones(5), np.ones(5)) == 0.0
    gold = np.round(rng.random(300) * 5, 1)  # many ties
    pred = gold + rng.normal(0, 1, 300)
    pred[:20] = 2.5
    assert glue_evaluation.pearson_corrcoef(pred, gold) == pytest.approx(stats.pearsonr(pred, gold)[0], abs=1e-12)
    assert glue_evaluation.spearman_corrcoef(pred, gold) == pytest.approx(stats.spearmanr(pred, gold)[0], abs=1e-12)
    result = glue_evaluation.compute_metrics(("pearson", "spearman"), pred, gold)
    assert list(result) == ["eval_pearson", "eval_spearman", "eval_corr"]
