"""Typed TOML loading for contracts and link specs, driven by dataclass fields.

Each schema field carries its documentation (``doc(...)``). One walker turns a TOML table into
the dataclass with precise errors (file, table path, field), and the same fields generate the
JSON Schema for editors and the reference in docs/, so the three cannot drift apart.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

from .errors import ExpressionError, PipelinkError
from .expr import Expr

MISSING = dataclasses.MISSING


def doc(text: str, default: Any = MISSING, *, key: str | None = None) -> Any:
    """A schema field: its documentation, optional default, and TOML key when it differs."""
    meta = {"doc": text, "key": key}
    if default is MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict)) or (dataclasses.is_dataclass(default) and not isinstance(default, Expr)):
        return dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def toml_key(f: dataclasses.Field) -> str:
    return f.metadata.get("key") or f.name


def schema_fields(tp: type) -> list[dataclasses.Field]:
    """The fields that are TOML keys (declared with ``doc``); others are runtime state."""
    return [f for f in dataclasses.fields(tp) if "doc" in f.metadata]


def read_toml(path: Path, error: type[PipelinkError]) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", file=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"malformed TOML: {exc}", file=str(path),
                    hint="check quoting and table headers; https://toml.io describes the syntax") from None


def load(cls: type, data: Any, *, file: str, path: str, error: type[PipelinkError],
         component: str | None = None) -> Any:
    """Build ``cls`` from TOML ``data``; ``path`` names the table for error messages."""
    return _convert(cls, data, file=file, path=path, error=error, component=component)


def _convert(tp: Any, value: Any, *, file: str, path: str, error: type[PipelinkError], component: str | None) -> Any:
    def fail(msg: str, hint: str | None = None) -> PipelinkError:
        return error(msg, file=file, component=component, field=path or None, hint=hint)

    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(options[0], value, file=file, path=path, error=error, component=component)
    if tp is Expr:
        try:
            return Expr.parse(value, where=path)
        except ExpressionError as exc:
            raise error(exc.message, file=file, component=component, field=path, hint=exc.hint) from None
    if tp is str:
        if not isinstance(value, str):
            raise fail(f"expected a string, got {_kind(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise fail(f"expected true or false, got {_kind(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(f"expected an integer, got {_kind(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(f"expected a number, got {_kind(value)}")
        return float(value)
    if origin is list:
        (item,) = get_args(tp)
        if not isinstance(value, list):
            raise fail(f"expected an array, got {_kind(value)}")
        return [_convert(item, v, file=file, path=f"{path}[{i}]", error=error, component=component)
                for i, v in enumerate(value)]
    if origin is dict:
        _, item = get_args(tp)
        if not isinstance(value, dict):
            raise fail(f"expected a table, got {_kind(value)}")
        return {k: _convert(item, v, file=file, path=f"{path}.{k}" if path else k, error=error, component=component)
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise fail(f"expected a table, got {_kind(value)}")
        hints = typing.get_type_hints(tp)
        fields = {toml_key(f): f for f in schema_fields(tp)}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise fail(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}",
                       hint=f"allowed here: {', '.join(sorted(fields))}")
        kwargs = {}
        for key, f in fields.items():
            sub = f"{path}.{key}" if path else key
            if key not in value:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise error(f"missing required field '{key}'", file=file, component=component, field=sub,
                                hint=f.metadata.get("doc"))
                continue
            kwargs[f.name] = _convert(hints[f.name], value[key], file=file, path=sub, error=error, component=component)
        return tp(**kwargs)
    raise TypeError(f"schema type {tp!r} not supported")  # a bug in pipelink, not user error


def _kind(value: Any) -> str:
    return {str: "a string", int: "an integer", float: "a float", bool: "a boolean", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__) + f" ({value!r})"[:60]


# --- JSON Schema and Markdown reference, generated from the same dataclasses ---------------

def json_schema(cls: type, title: str) -> dict:
    defs: dict[str, dict] = {}
    root = _schema_of(cls, defs)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **defs.pop(cls.__name__),
            "$defs": defs} if root else {}


def _schema_of(tp: Any, defs: dict) -> dict:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _schema_of([a for a in get_args(tp) if a is not type(None)][0], defs)
    if tp is Expr:
        return {"type": ["integer", "string"], "description": "integer or expression over facts"}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if origin is list:
        return {"type": "array", "items": _schema_of(get_args(tp)[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(get_args(tp)[1], defs)}
    if dataclasses.is_dataclass(tp):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}  # placeholder against recursion
            hints = typing.get_type_hints(tp)
            props, required = {}, []
            for f in schema_fields(tp):
                props[toml_key(f)] = {**_schema_of(hints[f.name], defs), "description": f.metadata.get("doc", "")}
                if f.default is MISSING and f.default_factory is MISSING:
                    required.append(toml_key(f))
            defs[tp.__name__] = {"type": "object", "description": (tp.__doc__ or "").strip(),
                                 "properties": props, "required": required, "additionalProperties": False}
        return {"$ref": f"#/$defs/{tp.__name__}"}
    raise TypeError(tp)


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return type_name([a for a in get_args(tp) if a is not type(None)][0]) + " (optional)"
    if tp is Expr:
        return "int or expression"
    if origin is list:
        return f"array of {type_name(get_args(tp)[0])}"
    if origin is dict:
        return f"table of {type_name(get_args(tp)[1])}"
    if dataclasses.is_dataclass(tp):
        return tp.__name__
    return tp.__name__


def markdown_reference(cls: type, heading: str) -> str:
    """One section per dataclass reachable from ``cls``, each field with type, default, doc."""
    seen: list[type] = []

    def visit(tp: Any) -> None:
        for arg in get_args(tp) or ():
            visit(arg)
        if dataclasses.is_dataclass(tp) and tp not in seen:
            seen.append(tp)
            for f in schema_fields(tp):
                visit(typing.get_type_hints(tp)[f.name])

    visit(cls)
    out = [f"# {heading}\n", "Generated from the schema dataclasses (`python docs/generate_reference.py`, or `pipelink schema contract|spec --markdown`); do not edit.\n"]
    for tp in seen:
        out.append(f"\n## {tp.__name__}\n\n{(tp.__doc__ or '').strip()}\n")
        out.append("| key | type | default | meaning |\n| --- | --- | --- | --- |")
        hints = typing.get_type_hints(tp)
        for f in schema_fields(tp):
            if f.default is not MISSING:
                shown = f.default.text if isinstance(f.default, Expr) else repr(f.default).replace("'", '"')
                default = "—" if f.default is None else f"`{shown}`"
            elif f.default_factory is not MISSING:
                value = f.default_factory()
                default = "empty" if not dataclasses.is_dataclass(value) else "defaults"
            else:
                default = "**required**"
            out.append(f"| `{toml_key(f)}` | {type_name(hints[f.name])} | {default} | {f.metadata.get('doc', '')} |")
    return "\n".join(out) + "\n"
