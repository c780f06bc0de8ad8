"""Every measured figure the README states is the one in docs/: the README's prose and tables
(outside code) give each decimal figure (a score, a ratio, a time) as it stands in a page of
docs/, which says what printed it. A figure changed in one place and not the other fails here."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a decimal number: 98.29, 0.91, 1.61x, 2.64 (not version strings such as 2.13.0 or 0.12.3.1)
FIGURE = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?![\d.]*\d)(?!\.\d)")


def prose(markdown: str) -> str:
    """The text outside code blocks and inline code."""
    without_blocks = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    return re.sub(r"`[^`\n]*`", " ", without_blocks)


def figures(text: str):
    return {match.group(0).lstrip("+") for match in FIGURE.finditer(text)}


def docs_text() -> str:
    pages = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    assert pages
    return "\n".join(open(page, encoding="utf-8").read() for page in pages)


def test_every_readme_figure_is_in_the_docs():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = prose(handle.read())
    in_docs = figures(docs_text())
    stated = figures(readme)
    assert len(stated) > 20  # the README states its headline results
    missing = sorted(stated - in_docs, key=float)
    assert not missing, f"README figures found in no page of docs/: {missing}"


def test_figures_are_read_as_written():
    text = "RFA 95.65 ± 0.76 against 98.29; 1.61x; torch 2.13.0 and fairseq 0.12.3.1; `1.23` in code; +0.30"
    assert figures(prose(text)) == {"95.65", "0.76", "98.29", "1.61", "0.30"}
