"""pipelink: a contract-guided linker for GPU kernel components.

    pkg = pipelink.pack("comp.cu", "comp.toml", "comp.plc")
    kernel = pipelink.link("link.toml")          # -> LinkedKernel(.cubin, .plan, .manifest)
    kernel.report(); kernel.save("out/")
    result = pipelink.verify("link.toml")         # compile -> correct -> fast -> roofline
"""

from .contract import Contract, load_contract
from .errors import PipelinkError
from .linked import LinkedKernel, link
from .package import Package, load_package, pack
from .spec import LinkSpec, load_spec
from .torch_ops import torch_op
from .verify import VerifyResult, verify

__version__ = "0.1.0"
__all__ = ["Contract", "LinkSpec", "LinkedKernel", "Package", "PipelinkError", "VerifyResult", "link",
           "load_contract", "load_package", "load_spec", "pack", "torch_op", "verify", "__version__"]
