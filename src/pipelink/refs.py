"""References to the named things of a link's instances: ``Ref(instance, name)``.

A leaf of the inputs layer (tests/repo/test_architecture.py): the plan's records (transfers, smem users,
mbarrier users), the kernel's ABI (pipelink/abi.py: each parameter is an instance's operand) and
the messages all name a port, buffer or mbarrier this way, and write it as the string it always was.
"""

from __future__ import annotations

from dataclasses import dataclass

GLUE = "glue"                   # the owner of the glue's own records (Ref("glue", "mbarriers"), ...)


@dataclass(frozen=True, order=True)
class Ref:
    """A named thing of one instance: a port, an smem buffer or an mbarrier array ("instance.name"
    in the spec, plan.json and messages; the glue's own records belong to GLUE)."""
    instance: str
    name: str

    def __str__(self) -> str:
        return f"{self.instance}.{self.name}"

    @property
    def c_name(self) -> str:
        """Its name in generated code: "instance_name"."""
        return f"{self.instance}_{self.name}"

    @classmethod
    def parse(cls, text: str) -> Ref:
        """An "instance.name" string (the spec validated its form) as a Ref."""
        instance, _, name = text.partition(".")
        return cls(instance, name)


def refs_json(refs) -> list[str]:
    """References as plan.json and the manifest write them: "instance.name" strings."""
    return [str(r) for r in refs]
