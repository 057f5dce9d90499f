"""pipelink: a contract-guided linker for GPU kernel components.

    pkg = pipelink.pack("comp.cu", "comp.toml", "comp.plc")
    kernel = pipelink.link("link.toml")          # -> LinkedKernel(.cubin, .plan, .abi, .manifest)
    kernel.report(); kernel.save("out/")
    result = pipelink.verify("link.toml")         # compile -> correct -> fast -> roofline
    with pipelink.warm_child():                   # many verifies, one GPU child (torch and CUDA started once)
        results = [pipelink.verify(s) for s in specs]
    pipelink.verify("link.toml", rungs=[pipelink.rung("mine", "checks.py:check")])  # + a check of your own
    op = pipelink.op("link.toml", vary=("M",)); y = op(x, w)   # one torch operator for every M

Options can also be given as one object: ``pipelink.link(spec, LinkOptions(mode="monolithic"))``,
``pipelink.verify(spec, VerifyOptions(seeds=5))``.
"""

from ._version import __version__
from .autograd import linked_function
from .contract import Contract, load_contract
from .errors import PipelinkError
from .link.options import LinkOptions
from .link.pipeline import LinkedKernel, link
from .package import Package, load_package
from .packer import pack
from .shape_op import op
from .spec import LinkSpec, load_spec
from .torch_ops import torch_op
from .verify import RungContext, VerifyOptions, VerifyResult, rung, verify, warm_child

__all__ = ["Contract", "LinkOptions", "LinkSpec", "LinkedKernel", "Package", "PipelinkError", "RungContext",
           "VerifyOptions", "VerifyResult", "link", "linked_function", "load_contract", "load_package", "load_spec", "op",
           "pack", "rung",
           "torch_op", "verify", "warm_child",
           "__version__"]
