"""Every measured figure the README states is the one in docs/, where it comes from.

The README's prose, bullets and table rows (outside code) are its statements: a sentence, or a
table cell; each states figures: decimals (a score, a ratio, a time; with its spread, 95.65 ±
0.76, as one figure) and whole numbers of two digits or more (updates, minutes, window sizes), not
versions or the years of citations. A statement's figures are looked up in the pages of docs/ that
its README section links to, unit by unit (a table row, a bullet, a paragraph): each figure and the
one after it in the statement must stand in one unit, in that order, at most two figures apart
(the row or sentence they come from); a statement of one figure, in some unit. So a figure
changed in one place and not the other fails, and so does a figure moved to a sentence it does
not come from; ``test_a_changed_last_digit_fails`` changes the last digit of every number of the
README in turn and checks that each change is caught."""

import glob
import os
import re
from typing import Dict, List, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a decimal number: 98.29, 0.91, 1.61x, 2.64 (not version strings such as 2.13.0 or 0.12.3.1)
DECIMAL = r"[-+]?\d+\.\d+(?![\d.]*\d)(?!\.\d)"
# a whole number of two digits or more: 1367, 600, 14 (not part of a decimal, a version or a word)
WHOLE = r"\d{2,}(?![\d.]*\d)(?!\.\d)(?![A-Za-z_])"
NUMBER = re.compile(rf"(?<![\w.]){DECIMAL}|(?<![\w.,]){WHOLE}")
# a figure: a number, with its spread when one follows (95.65 ± 0.76 is one figure, read as
# "95.65±0.76"): a spread alone says little, the two together name one measurement
FIGURE = re.compile(rf"(?<![\w.]){DECIMAL}(?:\s*±\s*\d+\.\d+)?|(?<![\w.,]){WHOLE}")
# what is not a measured figure: the year of a citation (Wu et al. 2022, Koehn 2004), a version
# (Python 3.11, torch 2.13.0), a file or commit name, and the settings a measurement was taken at:
# a window (L = 15), a context size (k=12), a range of distances (8-14 sentences back), the decoding
# bounds (beam 4, 64 windows a batch, 1.2 x the source + 10), a size (a 16-slot memory, a 2-core CPU), a
# threshold (updates to 99% of the best), the coverage of an interval (its 95% interval)
NOT_A_FIGURE = re.compile(
    r"(?:al\.|[A-Z][a-z]+|and [A-Z]\w+) (?:19|20)\d\d\b|(?:Python|torch|fairseq|triton|numpy) [\d.]+"
    r"|\b[0-9a-f]{7}\b|\w+\.(?:md|py|sh|json|png)\b|\b[Lk] ?= ?\d+(?:, \d+)*(?:,? (?:and|or|to) \d+)?"
    r"|\b\d+-\d+\b(?!\.)|\b\d+-(?:slot|core)\b|\bbeam \d+|\d+ windows a batch|[\d.]+ x the source \+ \d+"
    r"|updates to \d+%|\d+% interval")


def prose(markdown: str) -> str:
    """The text outside code blocks, inline code, HTML comments and link targets."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"`[^`\n]*`", " ", text)


def figures(text: str) -> List[str]:
    text = NOT_A_FIGURE.sub(" ", text)
    return [re.sub(r"\s", "", match.group(0)).lstrip("+") for match in FIGURE.finditer(text)]


def units(markdown: str) -> List[str]:
    """Table rows, bullets and paragraphs of a page's prose, each a unit."""
    found, paragraph = [], []
    for line in prose(markdown).splitlines() + [""]:
        stripped = line.strip()
        starts_unit = stripped.startswith("|") or re.match(r"[*-] |\d+\. ", stripped)
        if not stripped or starts_unit or stripped.startswith("#"):
            if paragraph:
                found.append(" ".join(paragraph))
            paragraph = []
            if stripped.startswith("|"):
                found.append(stripped)
                continue
            if starts_unit:
                paragraph = [stripped]
            continue
        paragraph.append(stripped)
    return [unit for unit in found if unit]


def readme_sections(readme: str) -> List[Tuple[str, str]]:
    """(heading, text) of the README's '## ' sections (the text before the first: '')."""
    parts = re.split(r"^## (.*)$", readme, flags=re.M)
    return [("", parts[0])] + list(zip(parts[1::2], parts[2::2]))


def linked_pages(section: str) -> List[str]:
    pages = sorted(set(re.findall(r"\]\((docs/[\w.-]+\.md)", section)))
    return pages or sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def sentences(unit: str) -> List[str]:
    """The cells of a table row (ours and a paper's figures are separate statements); the
    sentences of a paragraph or bullet."""
    if unit.startswith("|"):
        return [cell.strip() for cell in unit.strip("|").split("|")]
    return re.split(r"(?<=[.;:])\s+(?=[A-Z*(])", unit)


def statements(readme: str) -> List[Tuple[str, List[str]]]:
    """(statement, the docs pages it is checked against) for every README unit with figures."""
    found = []
    for _, section in readme_sections(readme):
        pages = linked_pages(section)
        found += [(sentence, pages) for unit in units(section) for sentence in sentences(unit) if figures(sentence)]
    return found


class Docs:
    """The figures of every unit of every docs page, in order."""

    def __init__(self):
        self.units: Dict[str, List[List[str]]] = {}
        for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
            with open(path, encoding="utf-8") as handle:
                self.units[os.path.relpath(path, ROOT)] = [figures(u) for u in units(handle.read())]

    def problems(self, statement: str, pages: List[str]) -> List[str]:
        """What of ``statement`` the pages do not say: each figure must stand in some unit of
        ``pages``, and each figure and the one after it in the statement must stand in one unit in
        that order, at most REACH figures apart (a statement of one figure: in any unit)."""
        stated = figures(statement)
        missing = [f"{figure}: in no unit of {', '.join(pages)}" for figure in stated
                   if not any(figure in unit for page in pages for unit in self.units[page])]
        for first, second in zip(stated, stated[1:]):
            if not any(in_order(unit, first, second) for page in pages for unit in self.units[page]):
                missing.append(f"{first} then {second}: in no unit of {', '.join(pages)}")
        return missing


# how far apart in a unit's figures two figures stated one after the other may stand (a cell
# between them: a paper's score, a second seed)
REACH = 2


def in_order(unit: List[str], first: str, second: str) -> bool:
    """Whether ``second`` follows ``first`` in the unit within REACH figures."""
    return any(value == first and second in unit[i + 1:i + 1 + REACH] for i, value in enumerate(unit))


@pytest.fixture(scope="module")
def readme_and_docs():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return handle.read(), Docs()


def test_every_readme_figure_stands_where_it_comes_from(readme_and_docs):
    readme, docs = readme_and_docs
    checked = statements(readme)
    assert sum(len(figures(s)) for s, _ in checked) > 100  # the README states its headline results
    problems = [f"{statement[:90]}...: {problem}" for statement, pages in checked
                for problem in docs.problems(statement, pages)]
    assert not problems, "README figures not found where they come from:\n" + "\n".join(problems)


def changed_last_digits(statement: str):
    """The statement with the last digit of each of its figures changed in turn (one at a time)."""
    text = NOT_A_FIGURE.sub(lambda m: "\0" * len(m.group(0)), statement)
    for match in NUMBER.finditer(text):
        end = match.end() - 1
        digit = statement[end]
        yield match.group(0), statement[:end] + str((int(digit) + 1) % 10) + statement[end + 1:]


def test_a_changed_last_digit_fails(readme_and_docs):
    """Each figure of the README changed in its last digit (98.29 -> 98.20, 1367 -> 1368) is caught."""
    readme, docs = readme_and_docs
    unnoticed = []
    for statement, pages in statements(readme):
        for figure, changed in changed_last_digits(statement):
            if not docs.problems(changed, pages):
                unnoticed.append(f"{figure} in {statement[:80]}...")
    assert not unnoticed, "changes the check would not notice:\n" + "\n".join(unnoticed)


def test_figures_are_read_as_written():
    text = ("RFA 95.65 ± 0.76 against 98.29; 1.61x; 1367; 933 updates, torch 2.13.0 and fairseq 0.12.3.1; "
            "`1.23` in code; +0.30; Wu et al. 2022 and Koehn 2004; L = 4; L = 1, 4, 8 and 15; k=12; 8-14 back; "
            "commit 607ee26; docs/reproduction.md; beam 4, 64 windows a batch and 1.2 x the source + 10")
    assert figures(prose(text)) == ["95.65±0.76", "98.29", "1.61", "1367", "933", "0.30"]
    assert units("intro\ntext\n\n| a | 1 |\n* one\n* two\n  more\n") == ["intro text", "| a | 1 |", "* one",
                                                                           "* two more"]
