"""nvJitLink: LTO-link component and glue LTO-IR into one cubin for the device's target (sm_90a by default), through cuda.core's Linker (NVIDIA's
maintained wrapper; the same bytes and time as calling nvJitLink's bindings directly, bench/NOTES.md, issue 52).
The Linker must run nvJitLink, not the driver's linker it falls back to: that is checked."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading

from ..errors import LinkError, MissingSymbol
from .toolchain import nvjitlink_version

def link_options(arch: str = "sm_90a") -> tuple[str, ...]:
    return (f"-arch={arch}", "-lto", "-O3", "-lineinfo")  # line info: see nvcc.LTO_FLAGS


LINK_OPTIONS = link_options()


def link_cubin(inputs: list[tuple[str, bytes]], *, symbol_owners: dict[str, str] | None = None,
               ptx: bool = False, arch: str = "sm_90a") -> tuple[bytes, str]:
    """Link fatbins (name, bytes) with -lto for ``arch`` (each must hold LTO-IR for it). Returns (cubin, info log);
    with ``ptx``, the linked program's PTX after LTO instead of the cubin (for dumps).

    ``symbol_owners`` maps entry symbols to the component declaring them, so that an undefined
    reference names the component whose package lacks the symbol.
    """
    from cuda.core import LinkerOptions, ObjectCode

    nvjitlink_version()  # a clear error if the library is missing
    options = LinkerOptions(arch=arch, link_time_optimization=True, optimization_level=3, lineinfo=True,
                            ptx=ptx or None)  # LINK_OPTIONS (for ``arch``), and -ptx
    with _in_an_empty_folder():
        code, info = _link([ObjectCode.from_fatbin(data, name=name) for name, data in inputs], options,
                           "ptx" if ptx else "cubin", symbol_owners or {})
    return (code.rstrip(b"\0") if ptx else code), info


def ptx_to_cubin(ptx: str, name: str = "kernel.ptx") -> bytes:
    """A DSL's PTX (sm_90a) compiled to a cubin by nvJitLink, for its SASS and resource usage."""
    from cuda.core import LinkerOptions, ObjectCode

    nvjitlink_version()
    options = LinkerOptions(arch="sm_90a", optimization_level=3)
    try:
        return _link([ObjectCode.from_ptx(ptx.encode(), name=name)], options, "cubin", {})[0]
    except LinkError as exc:
        raise LinkError(f"nvJitLink could not compile {name}: {exc.message}", log=exc.log) from None


def _link(objects: list, options, target: str, owners: dict[str, str]) -> tuple[bytes, str]:
    from cuda.bindings import nvjitlink
    from cuda.core import Linker

    try:
        linker = Linker(*objects, options=options)  # adds the inputs: a bad one fails here
    except nvjitlink.nvJitLinkError as exc:  # its text: the error, then "nvJitLink error log: ..."
        head, _, log = str(exc).partition("nvJitLink error log:")
        _raise_link_error(head.strip(), log.strip(), owners)
    try:
        if linker.which_backend() != "nvJitLink":
            raise LinkError(f"cuda.core would link with {linker.which_backend()}, not nvJitLink",
                            hint="install nvidia-nvjitlink 13.0 (`pip install 'nvidia-nvjitlink==13.0.*'`)")
        try:
            out = linker.link(target)
        except nvjitlink.nvJitLinkError as exc:  # the error log is the linker's (also at the end of exc's text)
            _raise_link_error(str(exc).partition("nvJitLink error log:")[0].strip(), linker.get_error_log() or "",
                              owners)
        return bytes(out.code), linker.get_info_log() or ""
    finally:
        linker.close()


@contextlib.contextmanager
def _in_an_empty_folder():
    """Line info names every source and header as /proc/self/cwd/<file> (nvcc.CWD_ALIAS and
    nvcc.include_view), and nvJitLink, running in this process, stats each such file for the size
    and mtime it writes into .debug_line: a glue.cu or a component's source in the caller's working
    folder changed the cubin's bytes. In an empty folder nothing is found (size and mtime 0), and
    the bytes depend on the inputs only.
    The working folder is the process's. WORKING_FOLDER_LOCK keeps two threads' links apart (one would leave the
    other's folder after deleting it), and watch.run_watched takes it to start a child, which would otherwise
    start in the empty folder and find it deleted (a verify child then failed to load torch). Another thread
    that opens a relative path while a link runs still finds it in the empty folder."""
    with WORKING_FOLDER_LOCK, tempfile.TemporaryDirectory(prefix="pipelink-link-") as empty:
        before = os.getcwd()
        os.chdir(empty)
        try:
            yield
        finally:
            os.chdir(before)


WORKING_FOLDER_LOCK = threading.Lock()  # held while a link has switched the process's working folder


def _raise_link_error(exc: str, log: str, owners: dict[str, str]) -> None:
    missing = re.findall(r"(?:[Uu]ndefined reference to|Unresolved extern function) '([^']+)'", log)
    if missing:
        sym = missing[0]
        owner = owners.get(sym)
        raise MissingSymbol(f"entry symbol '{sym}' is not defined in the LTO-IR", component=owner,
                            log=log, hint="the contract's [[entry]] symbol must match an extern \"C\" __device__ "
                            "function in the source (not __forceinline__, not static); repack after fixing") from None
    if "OUTDATED" in str(exc).upper() or "version" in log.lower():
        raise LinkError(f"nvJitLink refused an input as too new: {exc}", log=log,
                        hint="repack the components with an nvcc no newer than nvJitLink") from None
    raise LinkError(f"nvJitLink failed: {exc}", log=log) from None
