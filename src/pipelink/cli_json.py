"""`--json` on the command line: each command's result (or its error) as one JSON document on
stdout, and the JSON Schema those documents follow (published as docs/cli.schema.json, printed
by `pipelink schema cli`).

A document is {"format", "command", "pipelink_version", "exit_status", "result"} when the command
did its work (verify and bench also when a rung failed or the kernel was not run: exit_status
says which), and {"format", "command", "pipelink_version", "exit_status": 2, "error"} when what
the user gave was refused. The JSON is strict (RFC 8259): a figure that is not a finite number
is written as the string "NaN", "Infinity" or "-Infinity".
"""

from __future__ import annotations

import json
import math

from ._version import __version__
from .link.plan import PLAN_SCHEMA_VERSION
from .verify.results import result_schema

DOCUMENT_FORMAT = 1
COMMANDS = ("pack", "link", "inspect", "verify", "bench")


def document(command: str | None, exit_status: int, *, result: dict | None = None,
             error: dict | None = None) -> dict:
    """The one document a `--json` command prints: its result, or the error that refused it."""
    doc = {"format": DOCUMENT_FORMAT, "command": command, "pipelink_version": __version__,
           "exit_status": exit_status}
    if error is not None:
        doc["error"] = error
    else:
        doc["result"] = result
    return doc


def _finite(value):
    """``value`` with every non-finite float replaced by its name (strict JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(doc: dict) -> str:
    """A document as strict JSON text (paths and other objects as strings), ending in a newline."""
    plain = json.loads(json.dumps(doc, default=str))  # objects to strings first, then the floats
    return json.dumps(_finite(plain), indent=2, allow_nan=False) + "\n"


def pack_result(pkg, seconds: float) -> dict:
    """`pipelink pack`: the package written, its variants and its pack-time conformance."""
    return {"path": str(pkg.path), "name": pkg.name, "version": pkg.contract.component.version,
            "closed": pkg.closed, "toolchain": dict(pkg.toolchain), "compile_options": list(pkg.compile_options),
            "variants": [{"facts": dict(v.facts), "bytes": len(v.ltoir)} for v in pkg.variants],
            "conformance": pkg.conformance, "content_hash": pkg.content_hash(), "seconds": seconds}


def link_result(kernel, files: dict, seconds: float) -> dict:
    """`pipelink link`: the files written, and the plan's key facts, checks, warnings and resources
    (the whole plan is in the plan JSON among the files)."""
    plan = kernel.plan.to_json()
    backend = plan["backend"]
    instances = [{k: i[k] for k in ("name", "component", "version", "variant", "facts")} | {"package": inst.file}
                 for i, inst in zip(plan["instances"], kernel.plan.instances)]
    return {"name": kernel.plan.spec.link.name, "spec": str(kernel.plan.spec.path), "mode": plan["mode"],
            "files": {kind: str(path) for kind, path in files.items()}, "seconds": seconds,
            "entry": plan["entry"], "device": plan["device"], "facts": plan["facts"], "instances": instances,
            "launch": plan["launch"], "smem_bytes": plan["smem"]["bytes"], "checks": plan["checks"],
            "warnings": plan["warnings"], "resources": backend.get("resources"),
            "cubin": {"bytes": backend.get("cubin_bytes"), "sha256": backend.get("cubin_sha256"),
                      "glue_compile": backend.get("glue_compile"), "link": backend.get("link")},
            "conformance": backend.get("conformance", [])}


# --- the schema ---------------------------------------------------------------------------------

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_STR_OR_NULL = {"type": ["string", "null"]}
_FACTS = {"type": "object", "additionalProperties": {"type": "integer"}}


def _object(properties: dict, required: list[str] | None = None, *, closed: bool = True, **more) -> dict:
    return {"type": "object", "required": list(properties) if required is None else required,
            "properties": properties, **({"additionalProperties": False} if closed else {}), **more}


def _error_schema() -> dict:
    return _object({
        "type": {**_STR, "description": "the PipelinkError subclass: SmemOverflow, FactConflict, SpecError, "
                                        "... (UsageError: the command line itself)"},
        "bases": {"type": "array", "items": _STR,
                  "description": "its base classes up to PipelinkError, nearest first"},
        "message": _STR, "file": _STR_OR_NULL, "component": _STR_OR_NULL, "field": _STR_OR_NULL,
        "hint": _STR_OR_NULL, "log": {**_STR_OR_NULL, "description": "a tool's output, when one failed"},
        "text": {**_STR, "description": "everything above as the CLI prints it"}},
        description="a user error: nothing was written and nothing was run")


def _pack_schema() -> dict:
    conformance = {"type": ["object", "null"], "required": ["checked", "findings", "reason"],
                   "properties": {"checked": {"type": "boolean"}, "findings": {"type": "array", "items": {"type": "object"}},
                                  "reason": _STR},
                   "description": "the pack-time probe: the component's code checked against its contract "
                                  "(null: packed with --no-check)"}
    return _object({"path": _STR, "name": _STR, "version": _STR, "closed": {"type": "boolean"},
                    "toolchain": {"type": "object", "additionalProperties": _STR},
                    "compile_options": {"type": "array", "items": _STR},
                    "variants": {"type": "array", "minItems": 1,
                                 "items": _object({"facts": _FACTS, "bytes": _INT})},
                    "conformance": conformance, "content_hash": _STR, "seconds": _NUM})


def _link_schema() -> dict:
    check = _object({"name": _STR, "ok": {"type": "boolean"}, "detail": _STR})
    instance = _object({"name": _STR, "component": _STR, "version": _STR, "package": _STR, "variant": _FACTS,
                        "facts": _FACTS})
    return _object({
        "name": _STR, "spec": _STR_OR_NULL, "mode": {"enum": ["pipelink", "monolithic", "symbol"]},
        "files": {"type": "object", "additionalProperties": _STR,
                  "required": ["cubin", "manifest", "plan", "glue", "report", "smem_map"]},
        "seconds": _NUM, "entry": _STR, "device": {"type": "object"}, "facts": _FACTS,
        "instances": {"type": "array", "items": instance},
        "launch": _object({"grid": _INT, "block": _INT, "dynamic_smem": _INT}),
        "smem_bytes": _INT, "checks": {"type": "array", "items": check},
        "warnings": {"type": "array", "items": _STR},
        "resources": {"type": ["object", "null"], "additionalProperties": True,
                      "properties": {"registers": _INT, "stack": _INT, "local": _INT, "static_smem": _INT,
                                     "dynamic_smem": _INT}},
        "cubin": _object({"bytes": {"type": ["integer", "null"]}, "sha256": _STR_OR_NULL,
                          "glue_compile": _STR_OR_NULL, "link": _STR_OR_NULL}),
        "conformance": {"type": "array", "items": {"type": "object"}}})


def _inspect_schema() -> dict:
    kinds = {"package": {"manifest": {"type": "object"}, "contract": {**_STR, "description": "the contract TOML"}},
             "plan": {"plan": {"type": "object", "required": ["schema_version"],
                               "properties": {"schema_version": {"const": PLAN_SCHEMA_VERSION}},
                               "description": "the plan JSON less its glue (inspect reads only its own schema "
                                              "version)"},
                      "glue": {**_STR_OR_NULL, "description": "the generated glue source"}},
             "cubin": {"sass": {**_STR, "description": "cuobjdump's SASS of the cubin"},
                       "by_instance": _by_instance_schema()}}
    optional = {"by_instance"}  # only where `pipelink link` wrote the plan JSON beside the cubin
    return {"oneOf": [_object({"file": _STR, "kind": {"const": kind}, **fields},
                              ["file", "kind", *(f for f in fields if f not in optional)])
                      for kind, fields in kinds.items()]}


def _by_instance_schema() -> dict:
    row = _object({"index": {"type": "integer", "minimum": 0}, "sass": _STR})
    group = _object({"instance": {**_STR, "description": "the instance, or 'glue' for the link's own code"},
                     "component": _STR_OR_NULL, "count": {"type": "integer", "minimum": 0},
                     "instructions": {"type": "array", "items": row}})
    return {"description": "the SASS grouped by the instance each instruction was inlined from (the plan JSON "
                           "beside the cubin); 'refused' where that plan is another link's",
            "oneOf": [_object({"plan": _STR, "instructions": {"type": "integer", "minimum": 0},
                               "instances": {"type": "array", "items": group}}),
                      _object({"plan": _STR, "refused": _STR})]}


def _success(commands: list[str], result: dict, statuses: list[int]) -> dict:
    return _object({"format": {"const": DOCUMENT_FORMAT}, "command": {"enum": commands},
                    "pipelink_version": _STR, "exit_status": {"enum": statuses}, "result": result})


def cli_schema() -> dict:
    """JSON Schema of every document `--json` prints (docs/cli.schema.json)."""
    verify = {k: v for k, v in result_schema().items() if k != "$schema"}
    error = _object({"format": {"const": DOCUMENT_FORMAT}, "command": {"enum": [*COMMANDS, None]},
                     "pipelink_version": _STR, "exit_status": {"const": 2}, "error": {"$ref": "#/$defs/error"}})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "pipelink command-line JSON output",
            "description": "What `pipelink pack|link|inspect|verify|bench --json` prints on stdout: one document. "
                           "exit_status is the command's exit status: 0 done; verify and bench: 1 a rung failed, "
                           "3 linked and checked but not run, or run with no reference to check it; 2 the error "
                           "document.",
            "oneOf": [_success(["pack"], {"$ref": "#/$defs/pack"}, [0]),
                      _success(["link"], {"$ref": "#/$defs/link"}, [0]),
                      _success(["inspect"], {"$ref": "#/$defs/inspect"}, [0]),
                      _success(["verify", "bench"], {"$ref": "#/$defs/verify"}, [0, 1, 3]),
                      error],
            "$defs": {"error": _error_schema(), "pack": _pack_schema(), "link": _link_schema(),
                      "inspect": _inspect_schema(), "verify": verify}}
