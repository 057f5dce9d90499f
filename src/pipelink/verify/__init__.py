"""The verifiable loop: pre-checks, link, dumps, run, correctness, bench, roofline, trace, profile."""

from .rungs import Rung, VerifyResult, result_schema
from .runner import verify

__all__ = ["Rung", "VerifyResult", "result_schema", "verify"]
