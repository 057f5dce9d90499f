"""Typed TOML loading for contracts and link specs, driven by dataclass fields.

Each schema field carries its documentation (``doc(...)``). One walker turns a TOML table into
the dataclass with precise errors (file, table path, field), and the same fields generate the
JSON Schema for editors and the reference in docs/, so the three cannot drift apart. Each field's
limits are part of its type (``Annotated[int, Bounds(...)]``, ``Name``, ``Line``): one declaration
drives the load-time check, the JSON Schema and the reference column.

Why not pydantic v2 or msgspec (issue 10 asked): they would replace only the ~75-line conversion
walker. Most of what was missing were cross-field checks (a fact's default inside its own domain,
expressions evaluated at the defaults, pinned buffers that overlap while live, names that refer to
other tables), which would become validators of the same length; and we would need strict mode (the
default turns "4" into 4), an adapter for ``Expr``, a translator to keep errors located as
file/component/field, and a compiled dependency carried to the H200. Not a clear shrink.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import re
import tomllib
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from .errors import ExpressionError, PipelinkError, show
from .expr import Expr
from .fsutil import read_bounded

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


TOML_LIMIT = 1 << 20  # a contract or spec is a few KB; a bigger one is a mistake, not a file to parse


def read_toml(path: Path, error: type[PipelinkError], what: str) -> dict:
    """A contract or link spec (``what``): a regular file of at most TOML_LIMIT bytes (a FIFO or a
    device is refused before it is read), UTF-8, TOML; anything else is ``error`` naming the file."""
    raw = read_bounded(path, TOML_LIMIT, what, error=error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not valid UTF-8: byte {raw[exc.start]:#04x} at offset {exc.start}", file=str(path),
                    hint="TOML files are UTF-8; save the file as UTF-8") from None
    return parse_toml(text, str(path), error)


def parse_toml(text: str, file: str, error: type[PipelinkError]) -> dict:
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise error(f"malformed TOML: {exc}", file=file,
                    hint="check quoting and table headers; https://toml.io describes the syntax") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise error("arrays or inline tables nested too deeply to parse", file=file,
                    hint="no contract or spec field nests more than a few levels") from None


# --- constraints: Annotated[type, constraint, ...] on a schema field -------------------------
# Each is checked when the field is loaded (for Expr fields: when the expression can be evaluated,
# see ``expressions``), and written into the JSON Schema and the reference.

MAX_NAME = 64
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CXX_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
    while xor xor_eq""".split())
# C++ reserves names that begin with __ or _ and a capital; the glue and component.h name theirs pl_/PL_.
_RESERVED_PREFIX = re.compile(r"__|_[A-Z]|[pP][lL]_")


def did_you_mean(word: object, choices) -> str | None:
    """The closest of ``choices`` to a misspelled ``word`` (a typo, a swapped pair of letters), if one is close."""
    import difflib
    found = difflib.get_close_matches(str(word)[:200], [str(c) for c in choices], n=1, cutoff=0.75)
    return found[0] if found else None


def identifier_problem(name: str) -> str | None:
    """Why ``name`` cannot be a name in generated C++ (and the file names made from it), or None."""
    if len(name) > MAX_NAME:
        return f"{show(name)} is {len(name)} characters long, over the limit of {MAX_NAME} by {len(name) - MAX_NAME}"
    if not _IDENTIFIER.fullmatch(name):
        return f"{show(name)} is not a C identifier (ASCII letters, digits and _, not starting with a digit)"
    if name in CXX_KEYWORDS:
        return f"{show(name)} is a C++ keyword"
    if _RESERVED_PREFIX.match(name):
        return f"{show(name)} begins with a reserved prefix (__, _ and a capital letter, or pl_)"
    return None


@dataclasses.dataclass(frozen=True)
class Identifier:
    """A name that reaches generated C++: a short C identifier, not a keyword or a reserved name."""
    hint = "use letters, digits and _ (at most 64), starting with a letter"

    def problem(self, value: str) -> str | None:
        return identifier_problem(value)

    def json(self) -> dict:
        return {"$ref": "#/$defs/identifier"}  # one definition (the keyword list is long), see _schema_of

    def definition(self) -> dict:
        return {"type": "string", "description": "A C identifier, not a C++ keyword or reserved name.",
                "pattern": f"^[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME - 1}}}$",
                "not": {"anyOf": [{"enum": sorted(CXX_KEYWORDS)}, {"pattern": "^(__|_[A-Z]|[pP][lL]_)"}]}}

    def label(self) -> str:
        return "identifier"


@dataclasses.dataclass(frozen=True)
class Line:
    """Free text on one line: it may reach a comment in generated code, so no control characters."""
    max_len: int
    hint = "one line of printable text"

    def problem(self, value: str) -> str | None:
        if len(value) > self.max_len:
            over = len(value) - self.max_len
            return f"text is {len(value)} characters long, over the limit of {self.max_len} by {over}"
        bad = next((ch for ch in value if ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0 or ch in "\u2028\u2029"), None)
        return None if bad is None else f"{show(value)} holds the control character {bad!r}"

    def json(self) -> dict:
        return {"maxLength": self.max_len, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029]*$"}

    def label(self) -> str:
        return f"one line, ≤ {self.max_len} characters"


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Inclusive integer bounds; ``why`` says where the limit comes from."""
    lo: int
    hi: int
    why: str = ""
    step: int = 1  # values must be multiples of it

    @property
    def hint(self) -> str:
        return self.why

    def problem(self, value: int) -> str | None:
        if value < self.lo:
            return f"{show(value)} is below the minimum {self.lo} by {show(self.lo - value)}"
        if value > self.hi:
            return f"{show(value)} is over the limit {self.hi} by {show(value - self.hi)}"
        if value % self.step:
            return f"{value} is not a multiple of {self.step}"
        return None

    def json(self) -> dict:
        return {"minimum": self.lo, "maximum": self.hi, **({"multipleOf": self.step} if self.step > 1 else {})}

    def label(self) -> str:
        return f"{self.lo}..{self.hi}" + (f", multiple of {self.step}" if self.step > 1 else "")


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of a fixed set of values."""
    values: tuple

    @property
    def hint(self) -> str:
        return f"one of {', '.join(map(str, self.values))}"

    def problem(self, value: Any) -> str | None:
        return None if value in self.values else f"{show(value)} is not one of {', '.join(map(str, self.values))}"

    def json(self) -> dict:
        return {"enum": list(self.values)}

    def label(self) -> str:
        return "one of " + ", ".join(f"`{v}`" for v in self.values)


Name = Annotated[str, Identifier()]


def _split(tp: Any) -> tuple[Any, tuple]:
    """(type, constraints) of a field type: Optional and Annotated taken apart."""
    if get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in get_args(tp) if a is not type(None))
    if get_origin(tp) is Annotated:
        return tp.__origin__, tp.__metadata__
    return tp, ()


@functools.cache  # resolving string annotations is most of a load's time
def _hints(tp: type) -> dict[str, Any]:
    return typing.get_type_hints(tp, include_extras=True)


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
    if origin is Annotated:
        value = _convert(tp.__origin__, value, file=file, path=path, error=error, component=component)
        if not isinstance(value, Expr):  # expressions are checked once they can be evaluated
            for c in tp.__metadata__:
                problem = c.problem(value)
                if problem:
                    raise fail(problem, c.hint)
        return value
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
        if isinstance(value, int) and value.bit_length() > 1000:  # float() raises beyond about 2**1024
            raise fail(f"{show(value)} is too large for a number")
        return float(value)
    if origin is list:
        (item,) = get_args(tp)
        if not isinstance(value, list):
            raise fail(f"expected an array, got {_kind(value)}")
        return [_convert(item, v, file=file, path=f"{path}[{i}]", error=error, component=component)
                for i, v in enumerate(value)]
    if origin is dict:
        key, item = get_args(tp)
        if not isinstance(value, dict):
            raise fail(f"expected a table, got {_kind(value)}")
        for k in value:  # a bad key is reported at the table: the key itself may be unprintable
            for c in _split(key)[1]:
                problem = c.problem(k)
                if problem:
                    raise fail(f"key {problem}", c.hint)
        return {k: _convert(item, v, file=file, path=f"{path}.{k}" if path else k, error=error, component=component)
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise fail(f"expected a table, got {_kind(value)}")
        hints = _hints(tp)
        fields = {toml_key(f): f for f in schema_fields(tp)}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            guess = did_you_mean(unknown[0], fields)
            raise fail(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(show, unknown))}" +
                       (f" (did you mean '{guess}'?)" if guess else ""),
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
            dict: "a table"}.get(type(value), type(value).__name__) + f" ({show(value)})"


def expressions(obj: Any, path: str = "") -> Iterator[tuple[str, Expr, tuple]]:
    """Every expression in a loaded schema object: (TOML path, expression, its constraints)."""
    hints = _hints(type(obj))
    for f in schema_fields(type(obj)):
        sub = f"{path}.{toml_key(f)}" if path else toml_key(f)
        yield from _expressions_in(getattr(obj, f.name), hints[f.name], sub)


def _expressions_in(value: Any, tp: Any, path: str) -> Iterator[tuple[str, Expr, tuple]]:
    tp, constraints = _split(tp)
    if isinstance(value, Expr):
        yield path, value, constraints
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _expressions_in(v, get_args(tp)[0], f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _expressions_in(v, get_args(tp)[1], f"{path}.{k}")
    elif dataclasses.is_dataclass(value):
        yield from expressions(value, path)


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
    if origin is Annotated:  # for an expression the bounds apply to its literal form
        out = _schema_of(tp.__origin__, defs)
        for c in tp.__metadata__:
            out.update(c.json())
            if isinstance(c, Identifier):
                defs["identifier"] = c.definition()
        return out
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
        key, item = get_args(tp)
        names = {"propertyNames": _schema_of(key, defs)} if get_origin(key) is Annotated else {}
        return {"type": "object", **names, "additionalProperties": _schema_of(item, defs)}
    if dataclasses.is_dataclass(tp):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}  # placeholder against recursion
            hints = _hints(tp)
            props, required = {}, []
            for f in schema_fields(tp):
                props[toml_key(f)] = {**_schema_of(hints[f.name], defs), "description": f.metadata.get("doc", "")}
                if f.default is MISSING and f.default_factory is MISSING:
                    required.append(toml_key(f))
            defs[tp.__name__] = {"type": "object", "description": class_doc(tp),
                                 "properties": props, "required": required, "additionalProperties": False}
        return {"$ref": f"#/$defs/{tp.__name__}"}
    raise TypeError(tp)


def class_doc(tp: type) -> str:
    """A schema class's docstring without its indentation. Python 3.13 strips docstring indentation
    at compile time and 3.11 does not; cleandoc gives both the same text (the reference and the JSON
    Schemas in docs/ are checked byte for byte)."""
    return inspect.cleandoc(tp.__doc__ or "")


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return type_name([a for a in get_args(tp) if a is not type(None)][0]) + " (optional)"
    if origin is Annotated:
        labels = [c.label() for c in tp.__metadata__]
        return "identifier" if labels == ["identifier"] else f"{type_name(tp.__origin__)} ({'; '.join(labels)})"
    if tp is Expr:
        return "int or expression"
    if origin is list:
        return f"array of {type_name(get_args(tp)[0])}"
    if origin is dict:
        key = get_args(tp)[0]
        keyed = f" keyed by {type_name(key)}" if get_origin(key) is Annotated else ""
        return f"table of {type_name(get_args(tp)[1])}{keyed}"
    if dataclasses.is_dataclass(tp):
        return tp.__name__
    return tp.__name__


def markdown_reference(cls: type, heading: str) -> str:
    """One section per dataclass reachable from ``cls``, each field with type, default, doc."""
    seen: list[type] = []

    def visit(tp: Any) -> None:
        if get_origin(tp) is Annotated:
            return visit(tp.__origin__)
        for arg in get_args(tp) or ():
            visit(arg)
        if dataclasses.is_dataclass(tp) and tp not in seen:
            seen.append(tp)
            for f in schema_fields(tp):
                visit(_hints(tp)[f.name])

    visit(cls)
    out = [f"# {heading}\n", "Generated from the schema dataclasses (`python docs/generate_reference.py`, or `pipelink schema contract|spec --markdown`); do not edit.\n"]
    for tp in seen:
        out.append(f"\n## {tp.__name__}\n\n{class_doc(tp)}\n")
        out.append("| key | type | default | meaning |\n| --- | --- | --- | --- |")
        hints = _hints(tp)
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
