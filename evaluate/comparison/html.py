"""report.html: report.md as one self-contained page, to open in any browser with no network.

The page is rendered from report.md's own Markdown (markdown-it-py, CommonMark with tables), so every section the
report has, today's and tomorrow's, is in it without a second writer. Raw HTML is off: a result's text (a run id,
an error excerpt) is shown as text, never read as markup. Every image report.md references by a relative path
(compare.png, compare-strategies.png, history.png) is embedded as a data URI; one that is missing keeps its alt text
and says so, and one that is not a relative path (an http:// address) is not fetched at view time: it is named,
not shown. Only an image inside the report's own folder is embedded: a path that leaves it (`../`, a link out of
it) is named, not read, so no text of a result or store can put another file of the machine into the page.
"""

from __future__ import annotations

import base64
import html
import mimetypes
from pathlib import Path

from markdown_it import MarkdownIt

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #1b1b1b; }
h1, h2, h3 { line-height: 1.2; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; } code { background: #f2f2f2; padding: 0 .2em; }
.missing { color: #a00; font-style: italic; }
"""


def _embedded(folder: Path, source: str) -> str | None:
    """The data URI of a relative image under folder; None when it is not one or cannot be read."""
    if not source or "://" in source or source.startswith(("/", "data:")):
        return None
    path = folder / source
    kind = mimetypes.guess_type(path.name)[0]
    if kind is None or not kind.startswith("image/") or not path.is_file():
        return None
    if not path.resolve().is_relative_to(folder.resolve()):
        return None
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _renderer(folder: Path) -> MarkdownIt:
    """CommonMark with tables and no raw HTML, whose images are embedded from folder."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def image(renderer, tokens, idx, options, env):
        token = tokens[idx]
        source, alt = token.attrGet("src") or "", html.escape(token.content)
        uri = _embedded(folder, source)
        if uri is None:
            return f'<span class="missing">[{alt}: {html.escape(source)} is not embedded in this page]</span>'
        return f'<img src="{uri}" alt="{alt}">'

    md.add_render_rule("image", image)
    return md


def page(markdown: str, folder: Path, title: str = "TPrimat comparison") -> str:
    """The whole HTML page of a report's Markdown, its images read from folder."""
    body = _renderer(folder).render(markdown)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            # nothing may be fetched at view time: the page is one file
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")
