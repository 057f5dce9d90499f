"""Callables the verify child imports by name: 'path/to/file.py:function' or 'module:function'."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from ..errors import PipelinkError


def resolve_ref(ref: str, base: Path) -> str:
    """'file.py:function' with the file made absolute from ``base`` (the spec's folder); 'module:function' as it
    is."""
    where, _, fn = ref.rpartition(":")
    return f"{(base / where).resolve()}:{fn}" if where.endswith(".py") else ref


def load_callable(ref: str):
    """'path/to/file.py:function' or 'package.module:function'."""
    where, _, name = ref.rpartition(":")
    if not where or not name:
        raise PipelinkError(f"'{ref}' is not 'file.py:function' or 'module:function'", field="verify.reference")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"pipelink_user_{abs(hash(where))}", where)
        if spec is None or not Path(where).exists():
            raise PipelinkError(f"reference file not found: {where}", field="verify.reference")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    fn = module
    for part in name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise PipelinkError(f"{where} has no '{name}'", field="verify.reference")
    return fn
