"""nvJitLink: LTO-link component and glue LTO-IR into one sm_90a cubin."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading

from ..errors import LinkError, MissingSymbol
from .toolchain import nvjitlink_version

LINK_OPTIONS = ("-arch=sm_90a", "-lto", "-O3", "-lineinfo")  # line info: see nvcc.LTO_FLAGS


def link_cubin(inputs: list[tuple[str, bytes]], *, symbol_owners: dict[str, str] | None = None,
               ptx: bool = False) -> tuple[bytes, str]:
    """Link fatbins (name, bytes) with -lto. Returns (cubin, info log); with ``ptx``, the linked
    program's PTX after LTO instead of the cubin (for dumps).

    ``symbol_owners`` maps entry symbols to the component declaring them, so that an undefined
    reference names the component whose package lacks the symbol.
    """
    from cuda.bindings import nvjitlink

    nvjitlink_version()  # a clear error if the library is missing
    options = [*LINK_OPTIONS, "-ptx"] if ptx else list(LINK_OPTIONS)
    with _in_an_empty_folder():
        return _link(nvjitlink, options, inputs, symbol_owners, ptx)


def ptx_to_cubin(ptx: str, name: str = "kernel.ptx") -> bytes:
    """A DSL's PTX (sm_90a) compiled to a cubin by nvJitLink, for its SASS and resource usage."""
    from cuda.bindings import nvjitlink

    nvjitlink_version()
    options = ["-arch=sm_90a", "-O3"]
    data = ptx.encode()
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            raise LinkError(f"nvJitLink could not compile {name}: {exc}",
                            log=_log(handle, nvjitlink.get_error_log_size, nvjitlink.get_error_log)) from None
        out = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, out)
        return bytes(out)
    finally:
        nvjitlink.destroy(handle)


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


def _link(nvjitlink, options: list[str], inputs: list[tuple[str, bytes]], symbol_owners: dict[str, str] | None,
          ptx: bool) -> tuple[bytes, str]:
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            for name, data in inputs:
                nvjitlink.add_data(handle, nvjitlink.InputType.FATBIN, data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = _log(handle, nvjitlink.get_error_log_size, nvjitlink.get_error_log)
            _raise_link_error(exc, log, symbol_owners or {})
        size_fn, get_fn = ((nvjitlink.get_linked_ptx_size, nvjitlink.get_linked_ptx) if ptx else
                           (nvjitlink.get_linked_cubin_size, nvjitlink.get_linked_cubin))
        out = bytearray(size_fn(handle))
        get_fn(handle, out)
        info = _log(handle, nvjitlink.get_info_log_size, nvjitlink.get_info_log)
        return bytes(out).rstrip(b"\0") if ptx else bytes(out), info
    finally:
        nvjitlink.destroy(handle)


def _log(handle: int, size_fn, get_fn) -> str:
    size = size_fn(handle)
    if size <= 1:
        return ""
    buf = bytearray(size)
    get_fn(handle, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _raise_link_error(exc: Exception, log: str, owners: dict[str, str]) -> None:
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
