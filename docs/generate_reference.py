"""Regenerate docs/reference.md and the JSON Schemas for editors from the schema dataclasses.

    python docs/generate_reference.py          # rewrite the files
    python docs/generate_reference.py --check  # exit 1 if any file is out of date (the tests run this)

The output is the same under every Python the README promises: class docstrings are read through
inspect.cleandoc (schema.class_doc), so 3.13's compile-time stripping of their indentation changes
nothing.

Editors: point the TOML language server (e.g. taplo, "Even Better TOML") at
docs/contract.schema.json for component contracts and docs/spec.schema.json for link specs.
"""

import json
import sys
from pathlib import Path

from pipelink import schema
from pipelink.contract import Contract
from pipelink.spec import LinkSpec

HERE = Path(__file__).resolve().parent
files = {
    HERE / "reference.md": schema.markdown_reference(Contract, "Contract reference (component TOML)") + "\n"
    + schema.markdown_reference(LinkSpec, "Link spec reference (link TOML)"),
    HERE / "contract.schema.json": json.dumps(schema.json_schema(Contract, "pipelink component contract"), indent=2) + "\n",
    HERE / "spec.schema.json": json.dumps(schema.json_schema(LinkSpec, "pipelink link spec"), indent=2) + "\n",
}
if "--check" in sys.argv:
    stale = [p.name for p, text in files.items() if not p.exists() or p.read_text() != text]
    if stale:
        sys.exit(f"out of date: {', '.join(stale)}; run python docs/generate_reference.py")
else:
    for path, text in files.items():
        path.write_text(text)
