"""The verifiable loop: pre-checks, link, dumps, run, correctness, bench, roofline, trace, profile."""

from .options import VerifyOptions
from .results import Rung, VerifyResult, result_schema
from .pykernel import load_kernel_file, verify_file
from .rungs import RungContext, RungRef, rung
from .runner import verify
from .watch import warm_child

__all__ = ["Rung", "RungContext", "RungRef", "VerifyOptions", "VerifyResult", "load_kernel_file", "result_schema", "rung", "verify",
           "verify_file", "warm_child"]
