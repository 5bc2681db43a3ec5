"""Click-prediction metrics: ROC AUC (ties averaged), log loss, accuracy at 0.5."""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula; tied scores get their
    average rank. NaN when only one class is present."""
    labels = np.asarray(labels).astype(bool).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)               # 1-based rank of the last of each tie group
    average_rank = upper - (counts - 1) / 2.0
    rank_sum = average_rank[inverse][labels].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def log_loss(labels: np.ndarray, probabilities: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy of probabilities (clipped to [eps, 1 - eps])."""
    labels = np.asarray(labels, dtype=np.float64).ravel()
    p = np.clip(np.asarray(probabilities, dtype=np.float64).ravel(), eps, 1 - eps)
    if len(labels) == 0:
        return float("nan")
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def accuracy(labels: np.ndarray, probabilities: np.ndarray) -> float:
    labels = np.asarray(labels).ravel()
    if len(labels) == 0:
        return float("nan")
    return float(np.mean((np.asarray(probabilities).ravel() >= 0.5) == (labels >= 0.5)))


def click_metrics(labels, probabilities) -> dict:
    return {"auc": roc_auc(labels, probabilities), "log_loss": log_loss(labels, probabilities),
            "accuracy": accuracy(labels, probabilities), "rows": int(np.asarray(labels).size)}
