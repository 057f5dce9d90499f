"""Finding the CUDA tools: nvcc, nvJitLink and cuobjdump, with their versions.

Order for nvcc: $PIPELINK_NVCC, then `nvcc` on PATH, then what cuda.pathfinder finds (the PyPI wheel
nvidia-cuda-nvcc, installed by the `toolkit` extra; conda; $CUDA_HOME / $CUDA_PATH), then /usr/local/cuda/bin.
cuobjdump and nvdisasm (the nvidia-cuda-cuobjdump / -nvdisasm wheels, dependencies) the same way.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import LtoVersionError, NvccNotFound, ToolchainError

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"
NVCC_INSTALL_HINT = ("install a CUDA 13.0 toolkit, or `pip install 'pipelink[toolkit]'` (PyPI's nvcc 13.0 with "
                     "nvvm pinned to 13.0), or point $PIPELINK_NVCC at an nvcc binary")


def _candidates(tool: str, env_var: str) -> list[Path]:
    """Where ``tool`` may lie, in the order tried: $``env_var`` alone where it is set; else PATH, then what
    cuda.pathfinder finds (NVIDIA's PyPI wheels, conda, $CUDA_HOME / $CUDA_PATH), then /usr/local/cuda."""
    if os.environ.get(env_var):
        return [Path(os.environ[env_var])]
    found = []
    on_path = shutil.which(tool)
    if on_path:
        found.append(Path(on_path))
    from cuda.pathfinder import find_nvidia_binary_utility
    located = find_nvidia_binary_utility(tool)
    if located:
        found.append(Path(located))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found.append(Path(home) / "bin" / tool)
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Nvcc:
    path: Path
    version: str  # e.g. "13.0.88"

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


@functools.cache
def find_nvcc() -> Nvcc:
    tried = _candidates("nvcc", "PIPELINK_NVCC")
    for path in tried:
        if path.is_file() and os.access(path, os.X_OK):
            try:
                out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60).stdout
            except OSError:
                continue
            m = re.search(r"V(\d+\.\d+\.\d+)", out)
            if m:
                return Nvcc(path, m.group(1))
    where = ", ".join(str(p) for p in tried) or "nowhere (PATH has no nvcc)"
    raise NvccNotFound(f"no working nvcc found (looked at: {where})", hint=NVCC_INSTALL_HINT)


@functools.cache
def nvcc_include_dirs(nvcc: Path | None = None) -> tuple[tuple[str, str], ...]:
    """The include folders ``nvcc`` (by default the one in use) adds on its own, as (option,
    folder): ("-I", CUDA's include) and ("-isystem", its cccl). They come from nvcc.profile and
    differ between a system toolkit (bin/../targets/x86_64-linux/include) and the PyPI wheel
    (bin/../include); nvcc's dry run prints them as it would pass them (``#$ INCLUDES="-I..."``,
    ``#$ SYSTEM_INCLUDES="-isystem" "..."``). nvcc.include_view names them again, relatively."""
    proc = subprocess.run([str(nvcc or find_nvcc().path), "--dryrun", "-E", "-x", "cu", os.devnull],
                          capture_output=True, text=True, timeout=60)
    found: list[tuple[str, str]] = []
    for m in re.finditer(r"^#\$ (?:SYSTEM_)?INCLUDES=(.*)$", proc.stdout + proc.stderr, flags=re.M):
        words = shlex.split(m.group(1))
        while words:
            word = words.pop(0)
            if word in ("-I", "-isystem") and words:
                found.append((word, words.pop(0)))
            elif word.startswith("-I") and len(word) > 2:
                found.append(("-I", word[2:]))
    return tuple(found)


@functools.cache
def find_tool(tool: str) -> Path:
    """cuobjdump or nvdisasm."""
    env_var = f"PIPELINK_{tool.upper()}"
    for path in _candidates(tool, env_var):
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ToolchainError(f"{tool} not found", hint=f"`pip install nvidia-cuda-{tool}` or set ${env_var}")


@functools.cache
def tool_version(tool: str) -> str:
    """``cuobjdump`` or ``nvdisasm``'s release (``V13.5.37``), for cache keys of what it reads."""
    out = subprocess.run([str(find_tool(tool)), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V\d+\.\d+\.\d+", out)
    return m.group(0) if m else out.strip()


def tool_env() -> dict[str, str]:
    """Environment for cuobjdump: it runs nvdisasm, which must be on PATH."""
    env = dict(os.environ)
    dirs = {str(find_tool("cuobjdump").parent)}
    try:
        dirs.add(str(find_tool("nvdisasm").parent))
    except ToolchainError:
        pass
    env["PATH"] = os.pathsep.join([*sorted(dirs), env.get("PATH", "")])
    return env


@functools.cache
def nvjitlink_version() -> tuple[int, int]:
    try:
        from cuda.bindings import nvjitlink
        return tuple(nvjitlink.version())
    except Exception as exc:  # ImportError, or the shared library missing
        raise ToolchainError(f"nvJitLink is not usable: {exc}",
                             hint="`pip install 'nvidia-nvjitlink==13.0.*' cuda-bindings`") from None


def check_lto_compatible(producer_version: str, what: str) -> None:
    """LTO-IR from a newer toolchain than nvJitLink is refused by nvJitLink: say so up front."""
    major, minor = (int(x) for x in producer_version.split(".")[:2])
    link_major, link_minor = nvjitlink_version()
    if (major, minor) > (link_major, link_minor):
        raise LtoVersionError(
            f"LTO-IR was made by CUDA {producer_version}, newer than nvJitLink {link_major}.{link_minor} in use",
            file=what,
            hint=f"repack it with nvcc {link_major}.{link_minor} (pin nvidia-cuda-nvcc and nvidia-nvvm to "
                 f"=={link_major}.{link_minor}.*), or use nvJitLink >= {major}.{minor}")


def toolchain_id() -> dict[str, str]:
    """What a cache key must see of the tools."""
    nvcc = find_nvcc()
    return {"nvcc": nvcc.version, "nvjitlink": "%d.%d" % nvjitlink_version()}


# Flags a header library needs on every unit that includes it.
_LIBRARY_FLAGS = {"cutlass": ["--expt-relaxed-constexpr", "-DNDEBUG"]}


@functools.cache
def cutlass_include() -> Path:
    """The include folder (holding cute/ and cutlass/) of the nvidia-cutlass wheel."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.origin:
        base = Path(spec.origin).resolve().parent
        for cand in [base / "source" / "include", *sorted(base.rglob("include"))]:
            if (cand / "cute").is_dir() and (cand / "cutlass").is_dir():
                return cand
    raise ToolchainError("CUTLASS/CuTe headers not found (the component names headers = ['cutlass'])",
                         hint="`pip install nvidia-cutlass` (or `pip install 'pipelink[cutlass]'`)")


def library_build(libraries: list[str]) -> tuple[list[Path], list[str]]:
    """Include folders and nvcc flags for a contract's [component] headers."""
    dirs, flags = [], []
    for lib in libraries:
        if lib == "cutlass":
            dirs.append(cutlass_include())
        flags += [f for f in _LIBRARY_FLAGS.get(lib, []) if f not in flags]
    return dirs, flags
