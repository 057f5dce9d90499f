"""Typed errors. Every user mistake becomes one of these, never a traceback from deep inside.

Each error carries where it happened (file, component, field) and what to change (hint), and
formats them into one readable message. The CLI prints the message and exits with status 2.
"""

from __future__ import annotations


class PipelinkError(Exception):
    """Base of every error pipelink raises on purpose."""

    def __init__(self, message: str, *, file: str | None = None, component: str | None = None,
                 field: str | None = None, hint: str | None = None, log: str | None = None):
        self.message = message
        self.file = str(file) if file is not None else None
        self.component = component
        self.field = field
        self.hint = hint
        self.log = log
        super().__init__(self.format())

    def format(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.component:
            where.append(f"component '{self.component}'")
        if self.field:
            where.append(f"field '{self.field}'")
        text = (": ".join([", ".join(where), self.message]) if where else self.message)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        if self.log:
            text += "\n  tool output:\n" + "\n".join("    " + line for line in self.log.rstrip().splitlines())
        return text

    def to_json(self) -> dict:
        """The error as `--json` prints it (docs/cli.schema.json, $defs/error): its type, its base
        classes up to PipelinkError, where it happened, what to change, and the formatted text."""
        bases = [c.__name__ for c in type(self).__mro__[1:] if issubclass(c, PipelinkError)]
        return {"type": type(self).__name__, "bases": bases, "message": self.message, "file": self.file,
                "component": self.component, "field": self.field, "hint": self.hint, "log": self.log,
                "text": self.format()}


class UsageError(PipelinkError):
    """The command line itself is wrong (an unknown option, a missing argument): argparse's
    complaint, as a typed error for `--json`."""


class OperatorError(PipelinkError):
    """An operator made of linked kernels is declared or called wrongly (pipelink.linked_function)."""


class ContractError(PipelinkError):
    """A contract file is malformed, has unknown or missing fields, or a bad expression."""


class SpecError(PipelinkError):
    """A link spec is malformed or refers to something that does not exist."""


class ExpressionError(PipelinkError):
    """A fact expression cannot be parsed or evaluated."""


class PackageError(PipelinkError):
    """A component package is unreadable, corrupted, or does not match its contract."""


class PinMismatch(PackageError):
    """A package's bytes are not those its link spec pins ([[instance]] sha256)."""


class FactConflict(PipelinkError):
    """Two sources give one fact different values."""


class FactDomainError(PipelinkError):
    """A fact's value lies outside the domain a component requires."""


class MissingFact(PipelinkError):
    """A required fact has no value anywhere."""


class AmbiguousFact(PipelinkError):
    """Several values of a fact satisfy every component and nothing (spec, defaults) decides."""


class VariantMissing(PipelinkError):
    """No packaged variant has the compile-time facts the link resolved."""


class ResourceError(PipelinkError):
    """A block-level resource is over the device limit or cannot be allocated."""


class SmemOverflow(ResourceError):
    pass


class TmemOverflow(ResourceError):
    """The block's tensor-memory allocations pass the SM's columns (or the device has none)."""


class BarrierExhausted(ResourceError):
    pass


class PinnedCollision(ResourceError):
    pass


class WarpLayoutError(ResourceError):
    pass


class RegisterBudgetError(ResourceError):
    pass


class PortMismatch(PipelinkError):
    """Two connected ports disagree and no conversion exists."""


class ScheduleMismatch(PipelinkError):
    """Components disagree on the tile schedule."""


class ToolchainError(PipelinkError):
    """A CUDA tool is missing, too old, too new, or failed."""


class NvccNotFound(ToolchainError):
    pass


class LtoVersionError(ToolchainError):
    pass


class CompileError(ToolchainError):
    pass


class LinkError(ToolchainError):
    pass


class MissingSymbol(LinkError):
    pass


class InspectError(ToolchainError):
    pass


class DeviceError(PipelinkError):
    """No usable GPU, or a CUDA driver call failed."""


class OutputError(PipelinkError):
    """An output path cannot be written: an existing file or folder in the way, a parent that is a
    file, no permission, a name too long. The CLI checks its outputs before any work, so that such
    an error leaves nothing written."""


class PlanVersionError(PipelinkError):
    """A plan JSON written under another schema version than this pipelink reads (plan.json's
    ``schema_version``)."""


class PostLinkError(PipelinkError):
    """The linked cubin fails its post-link check (a component not inlined, a binding not folded,
    register spills): the CLI writes none of its outputs."""


def show(value: object) -> str:
    """A user's value for an error message: repr'd, cut short when it is long, deep or huge."""
    import reprlib
    if isinstance(value, int) and value.bit_length() > 64:  # Python will not print one of 4300+ digits
        return f"{'-' if value < 0 else ''}2**{abs(value).bit_length() - 1} or more"
    return reprlib.repr(value)
