"""A conformance finding: what a component's code does that its contract does not declare.

A leaf of the inputs layer (tests/repo/test_architecture.py), below everything that uses it: the checker
(link/conform.py) makes findings, the packager refuses a component with one, and a package's
manifest records the pack-time probe's findings (package.py checks their shape when it loads one).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PipelinkError


class ConformanceError(PipelinkError):
    """A component's code does something its contract does not declare."""


@dataclass(frozen=True)
class Finding:
    severity: str        # "error" or "warning"
    instance: str
    component: str
    instruction: str
    location: str        # innermost source location, "file:line"
    field: str           # the contract field concerned
    message: str
    hint: str

    def format(self) -> str:
        return (f"{self.severity}: {self.instance} ({self.component}) {self.location}: {self.instruction}: "
                f"{self.message} [contract: {self.field}]\n    fix: {self.hint}")
