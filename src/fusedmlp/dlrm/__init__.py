"""DLRM on Criteo-format click logs: data pipeline, model, training and evaluation."""

from .model import DLRM, DLRMConfig

__all__ = ["DLRM", "DLRMConfig"]
