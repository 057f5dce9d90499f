"""Regenerate docs/reference.md from the schema dataclasses (run after changing the schema).

    python docs/generate_reference.py          # rewrite docs/reference.md
    python docs/generate_reference.py --stdout # print it (the test compares this with the file)
"""

import sys
from pathlib import Path

from pipelink import schema
from pipelink.contract import Contract
from pipelink.spec import LinkSpec

text = (schema.markdown_reference(Contract, "Contract reference (component TOML)") + "\n"
        + schema.markdown_reference(LinkSpec, "Link spec reference (link TOML)"))
if "--stdout" in sys.argv:
    sys.stdout.write(text)
else:
    (Path(__file__).resolve().parent / "reference.md").write_text(text)
