"""Regenerate docs/component_api.md from the comments in pipelink/component.h (the component-side API).

    python docs/generate_component_api.py          # rewrite the file
    python docs/generate_component_api.py --check  # exit 1 if it is out of date (the tests run this)

In the header, the comment before `#pragma once` is the introduction, a `// ---- Title ----` line
starts a section (the comment lines right after it are the section's text), and the comment lines
directly above a declaration (a PL_DEVICE function, a template, an extern "C" function, a struct,
a #define) document it. A declaration without such a comment is an error: nothing goes undocumented.
Under each function the reference shows the PTX its inline `asm` emits (operands by their C names),
read from the function's body, or the body itself where it has no `asm` of its own.

A section titled `Example (SECTION): TITLE` holds a worked example of the section named SECTION: it
is rendered at the end of that section. The examples and the ordering rules sit at the end of the
header because nothing above its last declaration may move: every cubin's line table records the
header's line numbers, so a comment edit there keeps the number of lines of each comment (and the
cubins byte-identical); new text goes after the last declaration.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = HERE.parent / "src" / "pipelink" / "include" / "pipelink" / "component.h"
OUT = HERE / "component_api.md"

_SECTION = re.compile(r"^// ---- (.+) ----$")
_EXAMPLE = re.compile(r"^Example \((.+?)\): (.+)$")
_DECLARATION = re.compile(r'^(?:template <|PL_DEVICE |extern "C" |struct |#define )')
_NAME = re.compile(r"\b((?:pl|PL)_\w+)\b(?=\s*(?:\(|\{| static))")
_ASM = re.compile(r"\basm\s*(?:volatile\s*)?\(")
_CAST = re.compile(r"^\w+_cast<[^>]*>\((\w+)\)$")


@dataclass
class Item:
    name: str
    signatures: list[str] = field(default_factory=list)
    docs: list[list[str]] = field(default_factory=list)
    bodies: list[str | None] = field(default_factory=list)  # one per doc: the definition's body, None if declared only


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    items: dict[str, Item] = field(default_factory=dict)
    examples: list[tuple[str, list[str]]] = field(default_factory=list)


class Undocumented(ValueError):
    """A declaration in the header has no comment directly above it."""


def _comment(line: str) -> str:
    return line[3:] if line.startswith("// ") else line[2:]


def _declaration(lines: list[str], i: int) -> tuple[str, str | None, int]:
    """The declaration starting at line i without its body (a struct keeps its fields), the body of a
    function (None for anything else), and the index of the line after it."""
    head = []
    while lines[i].startswith("template <"):
        head.append(lines[i])
        i += 1
    if lines[i].startswith("#define"):
        return lines[i], None, i + 1
    if lines[i].startswith("struct"):
        end = next(n for n in range(i, len(lines)) if lines[n].startswith("};"))
        return "\n".join(lines[i:end + 1]), None, end + 1
    start = i
    while True:  # a function: its lines up to the body
        line = lines[i]
        i += 1
        head.append(line.split(" {", 1)[0].rstrip(";"))
        if "{" in line or line.endswith(";"):
            break
    if "{" not in line:
        return "\n".join(head), None, i  # declared only (defined elsewhere)
    depth = line.count("{") - line.count("}")
    while depth > 0:
        depth += lines[i].count("{") - lines[i].count("}")
        i += 1
    text = "\n".join(lines[start:i])
    return "\n".join(head), text[text.index(" {") + 2:text.rindex("}")].strip("\n"), i


def parse(text: str) -> tuple[list[str], list[Section]]:
    """The introduction and the sections of the header, each declaration with its comment; example
    sections are attached to the section they name."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("#pragma once"))
    intro = [_comment(line) for line in lines[:start]]
    sections: list[Section] = []
    comment: list[str] = []
    in_section_text = False
    i = start + 1
    while i < len(lines):
        line = lines[i]
        title = _SECTION.match(line)
        if title:
            sections.append(Section(title.group(1)))
            comment, in_section_text = [], True
            i += 1
        elif line.startswith("//"):
            (sections[-1].text if in_section_text else comment).append(_comment(line))
            i += 1
        elif _DECLARATION.match(line):
            signature, body, i = _declaration(lines, i)
            name = _NAME.search(signature).group(1)
            if not comment:
                raise Undocumented(f"{HEADER.name}: '{name}' has no comment directly above it")
            item = sections[-1].items.setdefault(name, Item(name))
            if signature not in item.signatures:
                item.signatures.append(signature)
            item.docs.append(comment)
            item.bodies.append(body)
            comment, in_section_text = [], False
        else:  # a blank line, #include, #if...: a comment must sit right on its declaration
            comment, in_section_text = [], False
            i += 1
    return intro, _attach_examples(sections)


def _attach_examples(sections: list[Section]) -> list[Section]:
    by_title = {s.title: s for s in sections}
    kept = []
    for s in sections:
        example = _EXAMPLE.match(s.title)
        if not example:
            kept.append(s)
            continue
        home = by_title.get(example.group(1))
        if home is None or _EXAMPLE.match(home.title):
            raise ValueError(f"{HEADER.name}: section '{s.title}' names no section '{example.group(1)}'")
        home.examples.append((example.group(2), s.text))
    return kept


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside strings and parentheses."""
    parts, depth, quoted, cur = [], 0, False, []
    for n, ch in enumerate(text):
        if ch == '"' and (n == 0 or text[n - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch in "([<":
            depth += 1
        elif not quoted and ch in ")]>":
            depth -= 1
        if ch == sep and not quoted and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    return parts + ["".join(cur)]


def _ptx(body: str) -> list[str]:
    """The PTX of each inline `asm` statement in a function body, %N replaced by the C operand."""
    out = []
    for m in _ASM.finditer(body):
        depth, quoted, end = 1, False, m.end()
        while depth:
            ch = body[end]
            if ch == '"' and body[end - 1] != "\\":
                quoted = not quoted
            elif not quoted:
                depth += {"(": 1, ")": -1}.get(ch, 0)
            end += 1
        args = body[m.end():end - 1]
        strings = re.match(r'\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', args)
        template = "".join(s.encode().decode("unicode_escape") for s in re.findall(r'"((?:[^"\\]|\\.)*)"',
                                                                                       strings.group(1)))
        groups = _split_top(args[strings.end():], ":")[1:]  # outputs, inputs, clobbers
        operands = []
        for group in groups[:2]:
            for op in filter(str.strip, _split_top(group, ",")):
                expr = re.match(r'\s*"[^"]*"\s*\((.*)\)\s*$', op, re.S).group(1).strip()
                cast = _CAST.match(expr)
                operands.append(cast.group(1) if cast else expr)
        ptx = re.sub(r"%(\d+)", lambda k: operands[int(k.group(1))], template).replace("%%", "%")
        lines, indent = [], 0
        for line in filter(None, (x.strip() for x in ptx.splitlines())):
            indent -= line == "}"
            lines.append("  " * indent + line)
            indent += line == "{"
        out.append("\n".join(lines))
    return out


def _emits(body: str | None) -> list[str]:
    """What a definition compiles to: its PTX, or its body where it has no asm of its own."""
    if body is None:
        return []
    ptx = _ptx(body)
    if ptx:
        return ["PTX (operands by their C names):", "", "```ptx", *"\n".join(ptx).splitlines(), "```"]
    lines = [x.rstrip() for x in body.splitlines()]
    indent = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
    return ["No inline PTX of its own; the body:", "", "```c++", *(x[indent:] for x in lines), "```"]


def _escape(line: str) -> str:
    """Markdown would take `<name>` outside a code span for an HTML tag and hide it."""
    parts = line.split("`")
    return "`".join(p.replace("<", "&lt;") if n % 2 == 0 else p for n, p in enumerate(parts))


def _prose(lines: list[str]) -> list[str]:
    """Comment lines as markdown: indented lines become a C++ block (blank lines inside it included),
    the rest stays text."""
    out: list[str] = []
    code = False
    for n, line in enumerate(lines):
        indented = line.startswith("    ")
        if code and not line.strip():  # a blank line ends the block only if no indented line follows
            rest = next((x for x in lines[n + 1:] if x.strip()), "")
            if rest.startswith("    "):
                out.append("")
                continue
        if indented != code:
            out.append("```c++" if not code else "```")
            code = not code
        out.append(line[4:] if code else _escape(line))
    if code:
        out.append("```")
    return out


def render(intro: list[str], sections: list[Section]) -> str:
    out = ["# Component API: `pipelink/component.h`", "",
           "<!-- Generated by docs/generate_component_api.py from src/pipelink/include/pipelink/component.h: "
           "edit the header's comments, not this file. -->", ""]
    out += _prose(intro) + ["", "Contents:", ""]
    for s in sections:
        parts = [", ".join(f"`{n}`" for n in s.items)] if s.items else []
        parts += [f"example: {title}" for title, _ in s.examples]
        out.append(f"- {s.title}" + (": " + "; ".join(parts) if parts else ""))
    out.append("")
    for s in sections:
        out += [f"## {s.title}", ""]
        if s.text:
            out += _prose(s.text) + [""]
        for item in s.items.values():
            out += [f"### `{item.name}`", "", "```c++", *item.signatures, "```", ""]
            for doc, body in zip(item.docs, item.bodies):
                out += _prose(doc) + [""]
                emits = _emits(body)
                out += emits + ([""] if emits else [])
        for title, text in s.examples:
            out += [f"### Example: {title}", ""] + _prose(text) + [""]
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__.strip())
        return
    try:
        text = render(*parse(HEADER.read_text()))
    except (Undocumented, ValueError) as exc:
        sys.exit(str(exc))
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"out of date: {OUT.name}; run python docs/generate_component_api.py")
    else:
        OUT.write_text(text)


if __name__ == "__main__":
    main()
