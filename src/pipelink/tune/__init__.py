"""Tuning: search configurations per shape bucket and keep the winners (`pipelink tune`, pipelink.op)."""

from .cache import Entry, TuneCache
from .outcomes import BucketResult, Outcome, TuneResult
from .search import tune
from .space import Config, Space, make_space, parse_fact, parse_shape

__all__ = ["tune", "TuneResult", "BucketResult", "Outcome", "TuneCache", "Entry", "Config", "Space", "make_space",
           "parse_fact", "parse_shape"]
