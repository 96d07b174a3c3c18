"""A self-contained HTML page from the study's markdown: headings, paragraphs, lists, tables and embedded PNGs."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.45}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #bbb;padding:.2em .5em;text-align:right}
th:first-child,td:first-child{text-align:left}img{max-width:100%}code{background:#f3f3f3;padding:0 .2em}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"""


def _inline(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _image(alt: str, src: str, base: Path) -> str:
    path = (base / src).resolve()
    if not path.exists():
        return f"<p>[missing plot {html.escape(src)}]</p>"
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>'


def _table(rows: list[str]) -> str:
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    head, body = cells[0], [r for r in cells[1:] if not all(set(c) <= set(":-") for c in r)]
    parts = ["<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    parts += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in body]
    return "".join(parts) + "</table>"


def markdown_to_html(text: str, base: Path, title: str) -> str:
    """Convert the subset of markdown the report writes; images under `base` are embedded."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
            continue
        if line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
            continue
        heading = re.match(r"^(#{1,4}) (.*)", line)
        image = re.match(r"^!\[([^\]]*)\]\(([^)]+)\)$", line.strip())
        if heading:
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif image:
            out.append(_image(image.group(1), image.group(2), base))
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
        i += 1
    body = "\n".join(out)
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>" \
        f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"  # fmt: skip
