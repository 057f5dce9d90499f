"""nvcc: CUDA C++ to an LTO-IR fatbin for sm_90a, or the targets a contract lists (components at pack time, glue at
link time for the device's one)."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..contract import ARCHS
from ..errors import CompileError
from .toolchain import INCLUDE_DIR, find_nvcc, nvcc_include_dirs

# LTO-IR for the "a" targets (ARCHS in contract.py: Hopper's sm_90a for H100 and H200; Blackwell's sm_100a, sm_103a,
# sm_120a for B200, B300, RTX 5090): their architecture-specific instructions (wgmma, setmaxnreg, tcgen05) need them,
# and their LTO-IR links only for that exact GPU. -dc keeps extern __device__ functions as linkable definitions; the
# entry must not be __forceinline__ (nvcc then drops it). -lineinfo survives LTO: every SASS instruction of the
# linked kernel carries its inlining chain back to the glue's call line, which is how the conformance check knows
# which component issued it. It does not change the generated code (same SASS with and without).
COMMON_FLAGS = ("-dc", "-fatbin", "-std=c++17", "-O3", "-lineinfo")


def arch_flags(archs) -> tuple[str, ...]:
    """-gencode options for LTO-IR of each target (one fatbin holds them all; nvJitLink takes the linked GPU's)."""
    unknown = [a for a in archs if a not in ARCHS]
    if unknown or not archs:
        raise ValueError(f"targets {list(archs)}: each one of {', '.join(ARCHS)}, at least one")
    return tuple(x for a in archs for x in ("-gencode", f"arch=compute_{a[3:]},code=lto_{a[3:]}"))


def lto_flags(archs=("sm_90a",)) -> tuple[str, ...]:
    return (*arch_flags(archs), *COMMON_FLAGS)


LTO_FLAGS = lto_flags()  # sm_90a: what every package before the other targets was built with
# Every target's -gencode pair: a package records the ones it was packed with, which no build replays.
ALL_ARCH_FLAGS = frozenset(arch_flags(ARCHS))

# Line info records the compiling folder (cicc takes it from $PWD when $PWD names the working
# folder) and nvcc derives the module ID, which names file-local symbols, from the source's path
# (passed to cicc as --orig_src_path_name). With both fixed, the same inputs compiled in any folder
# give the same bytes. Two components packed from same-named files still differ in module ID: it
# also names an extern symbol of the unit (seen: the entry), and entries are unique in a link.
CWD_ALIAS = "/proc/self/cwd"

# Line info also names every header with code in the kernel (pipelink/component.h, CUDA's
# cuda_bf16.hpp, CUTLASS's) by the path the preprocessor found it at, and ptxas, inside nvJitLink,
# stats each path at link time for the mtime and size it writes into .debug_line. Found through
# absolute -I folders, the cubin carried where pipelink, the toolkit and CUTLASS are installed and
# their file times: two installs at one commit gave different cubins (and packages). So every
# include tree is exposed inside the working folder under a fixed relative name (a symlink in
# VIEW): the line table says /proc/self/cwd/_inc/cuda0/cuda_bf16.hpp on every machine, and the
# link, in an empty folder (nvjitlink.py), finds nothing to stat (mtime and size 0). The
# alternatives were worse: rewriting .debug_line after the link fixes the cubin but not the LTO-IR
# in packages, and linking without -lineinfo loses what the conformance check attributes by.
# nvcc's own folders (CUDA's include, -isystem cccl) are named again before nvcc adds them: the
# preprocessor drops a later folder that is the same directory, so ours are the ones searched. A
# header in an -isystem folder keeps its relative name unless its real path is shorter (gcc's
# canonical system headers): a cccl folder would have to be shorter than "_inc/cuda_system1".
VIEW = "_inc"


def component_view(component: str) -> str:
    """The include view's name in a component's compiles (its packing, its sanitize build): one of its own, so that
    the line info of two components names two copies of each header they share, and their component source folder
    is named for them too (src_<name>). PTX names an inlined call's site by (file, line, column) only; when two
    components inline one header function at one line (llama_gemv.cuh's run_sliced call in both Llama projections),
    ptxas gave the instructions of one the other's inlining chain, and the conformance check, which attributes
    instructions by that chain, judged qkv's mbarriers against o-proj's contract (bench/NOTES.md, seventeenth
    session). A hash, not the name: the view's path must stay shorter than the headers' real ones (see above)."""
    return "_i" + hashlib.sha256(component.encode()).hexdigest()[:6]


def include_view(cwd: Path, include_dirs: list[str | Path], folder: str = VIEW) -> list[str]:
    """Symlinks in ``cwd`` (a folder made for this run) to pipelink's include folder, each absolute
    folder of ``include_dirs`` (a header library's) and nvcc's own; the -I/-isystem options that
    name them relatively, in search order: pipelink's, ``include_dirs`` (relative ones as given),
    then nvcc's."""
    view = cwd / folder
    view.mkdir()
    named = [("-I", "pipelink", INCLUDE_DIR)]
    named += [("-I", f"lib{n}" if Path(d).is_absolute() else None, d) for n, d in enumerate(include_dirs)]
    named += [(opt, f"cuda{n}" if opt == "-I" else f"cuda_system{n}", d)
              for n, (opt, d) in enumerate(nvcc_include_dirs())]
    options = []
    for opt, name, target in named:
        if name is not None:
            (view / name).symlink_to(target, target_is_directory=True)
        rel = f"{view.name}/{name}" if name is not None else str(target)
        options += [f"-I{rel}"] if opt == "-I" else [opt, rel]
    return options


def compile_ltoir(source: str, *, cwd: Path, include_dirs: list[str | Path] = (), extra_flags: list[str] = (),
                  component: str | None = None, deps: list[str] | None = None, view: str = VIEW,
                  archs=("sm_90a",)) -> tuple[bytes, list[str]]:
    """Compile ``source`` (a path relative to ``cwd``; relative include folders are too) to an
    LTO-IR fatbin. ``cwd`` is a folder made for this run: the include trees are linked into it
    (include_view). nvcc runs there on relative names only, so no folder of this machine reaches
    the output. Returns the bytes and the exact command. With ``deps`` (a list), every file the
    preprocessor read (the source, each header) is appended to it, resolved, from nvcc's own
    dependency output: what a cache key must see that no caller can list. ``archs``: the targets (ARCHS) whose
    LTO-IR the fatbin holds."""
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="pipelink-nvcc-") as tmp:
        out = Path(tmp) / "out.fatbin"
        cmd = [str(nvcc.path), *lto_flags(archs), *include_view(cwd, list(include_dirs), view)]
        cmd += [*extra_flags, f"-Xcicc=--orig_src_path_name={source}", source, "-o", str(out)]
        if deps is not None:
            cmd[-3:-3] = ["-MD", "-MF", str(Path(tmp) / "out.d")]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env={**os.environ, "PWD": CWD_ALIAS})
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed on {Path(source).name} (exit {proc.returncode})",
                               file=str((cwd / source).resolve()),  # through a link to the source's folder
                               component=component, log=(proc.stderr or proc.stdout)[-8000:],
                               hint="repro (the folder nvcc ran in, kept): " + _repro(cmd, cwd, out))
        if deps is not None:
            deps += parse_depfile((Path(tmp) / "out.d").read_text(), cwd)
        return out.read_bytes(), cmd


def _repro(cmd: list[str], cwd: Path, out: Path) -> str:
    """A command that repeats the failed compile after ``cwd`` (a folder made for this run, with the generated
    files nvcc read) is gone: the folder copied to one that is kept (its links to the include trees and the
    source as they are), and the command to run there, writing out.fatbin, without the dependency file."""
    kept = Path(tempfile.mkdtemp(prefix="pipelink-nvcc-repro-")) / "run"
    shutil.copytree(cwd, kept, symlinks=True)
    repro, args = [], iter(cmd)
    for arg in args:
        if arg == "-MF":
            next(args, None)
        elif arg != "-MD":
            repro.append(out.name if arg == str(out) else arg)
    return f"cd {shlex.quote(str(kept))} && {shlex.join(repro)}"


def parse_depfile(text: str, cwd: Path) -> list[str]:
    """The prerequisites of nvcc's make rule (``out.fatbin : a.cu \\<newline> /usr/include/x.h``),
    resolved against ``cwd``; a space inside a path is escaped with a backslash."""
    body = text.replace("\\\n", " ").partition(": ")[2]
    return sorted({str((cwd / p.replace("\\ ", " ")).resolve()) for p in re.split(r"(?<!\\)\s+", body) if p})
