"""The Bible as a document-level corpus: two SWORD modules, a chapter a document, a verse a sentence.

Pure functions over plain Python data (a module's raw OSIS verses by reference), so that the
tests can feed invented verses; :class:`SwordLibrary` is the thin layer over pysword.

1. **Reading** (:meth:`SwordLibrary.read`): every verse entry of a module, by its own
   versification (the conf's ``Versification``, read by pysword). Book introductions and
   chapter-heading entries (a SWORD module's verse 0) are not verses and are not read.
2. **Cleaning** (:func:`clean_osis`): OSIS markup out, without gluing or losing words. What
   each element does is a table below (:data:`REMOVED_ELEMENTS`, :data:`INLINE_ELEMENTS`,
   :data:`BOUNDARY_ELEMENTS`): notes (footnotes, cross-references), editorial headings and
   speaker labels go with their content; Strong's ``<w>`` keeps its word; where a removed note
   or a line break stood between two words, a space keeps them apart. Canonical titles (the
   Psalms' titles) are kept at the start of their verse: the WEB marks them as pre-verse
   ``<title canonical="true">``, the Reina-Valera writes them as the verse's first words.
   Non-textual divisions (a glossary, an introduction) and anything after a book's end marker
   are removed with their content: the WEB stores its whole glossary after Revelation 22:21.
3. **Drop capitals** (:func:`normalize_drop_capital`): the Reina-Valera prints the first word
   of a chapter in capitals (``EN la vorta``: invented words here and below); those words get
   the casing they have elsewhere in the module's text, in modules that open most chapters so.
4. **Alignment** (:func:`align_modules`): verses are paired by (book, chapter, verse). What
   cannot be paired is left out and counted by reason (:data:`REASONS`): a chapter whose verse
   count differs between the two versifications is left out whole, never paired verse by verse,
   and so is one whose verse lengths say that the two texts divide it differently.
5. **Split** (:func:`split_chapters`): whole chapters; every :data:`SPLIT_PERIOD`-th kept
   chapter in canonical order goes to valid, another to test (``--held-out-every``).
"""

import functools
import html
import math
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .io import DataError, PrepareError
from .text import TextDocument

# ---------------------------------------------------------------------------------------
# Cleaning the OSIS markup of one verse

# Elements removed with everything inside them: not the text of the Bible.
REMOVED_ELEMENTS = {
    "note": "notes (footnotes, cross-references)",
    "speaker": "speaker labels (editorial, the Song of Songs')",
    "rdg": "variant readings",
    "rdgGroup": "variant readings",
    "figure": "figures",
    "index": "index entries",
    "head": "list and table headings",
    "caption": "figure captions",
}
# Elements whose content is the text's own words, kept where they stand without a boundary:
# Strong's numbers (<w>), words the translators added (<transChange>), names, emphasis, ...
INLINE_ELEMENTS = frozenset((
    "w", "transChange", "hi", "divineName", "foreign", "name", "seg", "reference", "mentioned", "inscription",
    "a", "catchWord", "abbr", "date", "salute", "signed", "closer"))
# Elements that separate text (paragraphs, poetry lines, line breaks, list items, chapter and
# verse milestones, quotations): where one stood between two words, a space keeps them apart.
BOUNDARY_ELEMENTS = frozenset((
    "div", "chapter", "verse", "p", "l", "lg", "lb", "list", "item", "milestone", "table", "row", "cell", "q"))
# Word elements: two of them side by side are two words, even where the module has no space
# between them (the Reina-Valera's "<w>zorba</w><transChange>vash</transChange><w>...").
WORD_ELEMENTS = frozenset(("w", "transChange"))
# Division types that hold no Bible text (OSIS divisionType list): removed with their content.
NON_TEXT_DIVISIONS = frozenset((
    "glossary", "introduction", "front", "back", "preface", "titlePage", "tableofContents", "appendix", "index",
    "concordance", "acknowledgement", "dedication", "imprimatur", "bibliography", "coverPage", "gazetteer", "map",
    "publicationData", "summary"))
PREVERSE = "x-preverse"

_TAG = re.compile(r"<(/?)([A-Za-z_][\w:.-]*)((?:\s+[\w:.-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*(/?)>")
_ATTRIBUTE = re.compile(r"([\w:.-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
# Scripts written without spaces between words: no space is ever put between two of their letters.
_UNSPACED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN")

SOFT, HARD = "soft", "hard"  # a boundary between two word elements / around a removed or block element
_WORD = re.compile(r"\w+")
_LAST_WORD = re.compile(r"\w*$")
_FIRST_WORD = re.compile(r"\w*")


@dataclass
class CleanVerse:
    """A verse's text without markup: ``title`` the canonical title before it (pre-verse), if any."""

    title: str
    text: str

    def joined(self) -> str:
        return " ".join(part for part in (self.title, self.text) if part)


def _attributes(text: str) -> Dict[str, str]:
    return {name: first if first or not second else second for name, first, second in _ATTRIBUTE.findall(text)}


def _tokens(raw: str):
    """Text pieces (str) and tags ((closing, name, attributes, self_closing)) of OSIS text, in order."""
    position = 0
    for match in _TAG.finditer(raw):
        if match.start() > position:
            yield raw[position:match.start()]
        yield match.group(1) == "/", match.group(2), _attributes(match.group(3)), match.group(4) == "/"
        position = match.end()
    if position < len(raw):
        yield raw[position:]


def _spaced(character: str) -> bool:
    return not unicodedata.name(character, "").startswith(_UNSPACED_SCRIPTS)


def _opening(character: str) -> bool:
    return unicodedata.category(character) in ("Ps", "Pi", "Pd") or character in "¿¡"


def _closing(character: str) -> bool:
    category = unicodedata.category(character)
    return category in ("Pe", "Pf", "Pd") or (category == "Po" and character not in "¿¡*#§¶&@")


def _needs_space(before: str, after: str, boundary: str) -> bool:
    if before.isspace() or after.isspace() or not (_spaced(before) and _spaced(after)):
        return False
    if boundary == SOFT:
        return before.isalnum() and after.isalnum()
    return not _closing(after) and not _opening(before)


def _never(left: str, right: str) -> bool:
    return False


def join_pieces(pieces: Sequence[str], joins: Callable[[str, str], bool] = _never) -> str:
    """Text pieces and boundaries (:data:`SOFT`, :data:`HARD`) as one line: a boundary becomes a
    space where the text on both sides would otherwise touch and two words would be glued
    (``God`` + note + ``created``), never before closing punctuation (``word`` + note + ``.``).
    Two word elements that touch (:data:`SOFT`) stay one word when ``joins(left, right)`` says so
    (an enclitic: ``vórjo`` + ``le``)."""
    out: List[str] = []
    pending = None
    for piece in pieces:
        if piece in (SOFT, HARD):
            pending = HARD if HARD in (pending, piece) else SOFT
            continue
        if not piece:
            continue
        if pending and out and _needs_space(out[-1][-1], piece[0], pending):
            if pending == HARD or not joins(_LAST_WORD.search("".join(out)).group(), _FIRST_WORD.match(piece).group()):
                out.append(" ")
        pending = None
        out.append(piece)
    return " ".join("".join(out).split())


JOIN_MARGIN = 2


class WordJoins:
    """Whether two word elements that touch without a space (``<w>vórjo</w><transChange>le
    </transChange>``) are one word: when the module writes the two together elsewhere more than
    :data:`JOIN_MARGIN` times as often as apart. Counted on the module's text cleaned with every
    such pair apart (``apart``: those pairs, not counted as written apart). A pair the module
    never writes elsewhere stays apart: two words wrongly glued are worse than an enclitic split."""

    def __init__(self, texts: Iterable[str], apart: Counter):
        self.words, self.pairs = Counter(), Counter()
        for text in texts:
            words = _WORD.findall(text.lower())
            self.words.update(words)
            self.pairs.update(zip(words, words[1:]))
        self.pairs.subtract(apart)

    def __call__(self, left: str, right: str) -> bool:
        left, right = left.lower(), right.lower()
        return self.words[left + right] > JOIN_MARGIN * max(0, self.pairs[(left, right)])


def clean_osis(raw: str, removed: Optional[Counter] = None, joins: Callable[[str, str], bool] = _never) -> CleanVerse:
    """A verse's OSIS text as plain text; ``removed`` counts what was taken out, by kind; ``joins``:
    see :func:`join_pieces`."""
    removed = Counter() if removed is None else removed
    title: List[str] = []
    body: List[str] = []
    # open container elements: [name, role], role one of "removed", "title", "kept"
    open_elements: List[List[str]] = []
    removed_divisions: Dict[str, str] = {}  # sID of an open non-text division -> its type
    preverse: set = set()
    after_book = False
    body_started = False  # a canonical title before any text of the verse is its title
    tokens = list(_tokens(raw))
    for index, token in enumerate(tokens):
        roles = {role for _, role in open_elements}
        outside_text = after_book or bool(removed_divisions)
        if isinstance(token, str):
            text = html.unescape(token)
            if outside_text:
                removed["back matter characters"] += len(text.strip())
            elif "removed" in roles:
                continue
            elif "title" in roles and not body_started:
                title.append(text)
            elif preverse and "title" not in roles and text.strip():
                removed["pre-verse text outside titles"] += 1
            else:
                body.append(text)
                body_started = body_started or bool(text.strip())
            continue
        closing, name, attributes, self_closing = token
        pieces = title if "title" in roles and not body_started else body
        if closing:
            for position in range(len(open_elements) - 1, -1, -1):
                if open_elements[position][0] == name:
                    del open_elements[position:]
                    break
            if name in WORD_ELEMENTS and _next_is_word_start(tokens, index):
                pieces.append(SOFT)
            elif name not in INLINE_ELEMENTS:
                pieces.append(HARD)
            continue
        if name == "div" and self_closing:
            division, start, end = attributes.get("type", ""), attributes.get("sID"), attributes.get("eID")
            if division == "x-milestone" and attributes.get("subType") == PREVERSE:
                (preverse.add if start else preverse.discard)(start or end)
            elif division in NON_TEXT_DIVISIONS and start:
                removed_divisions[start] = division
                removed[f"<div type=\"{division}\"> divisions"] += 1
            elif division in NON_TEXT_DIVISIONS and end:
                removed_divisions.pop(end, None)
            elif division == "book" and end:
                after_book = True  # what follows a book's end in its last verse is not the book
            pieces.append(HARD)
            continue
        if outside_text or "removed" in roles:
            if not self_closing:
                open_elements.append([name, "removed"])
            continue
        if name in REMOVED_ELEMENTS or (name == "title" and attributes.get("canonical") != "true") or (
                name == "div" and attributes.get("type") in NON_TEXT_DIVISIONS):
            if not self_closing:
                open_elements.append([name, "removed"])
            kind = ("editorial titles" if name == "title" else REMOVED_ELEMENTS.get(name)
                    or f"<div type=\"{attributes.get('type')}\"> divisions")
            removed[kind] += 1
            pieces.append(HARD)
            continue
        if name == "title":
            if not self_closing:
                open_elements.append([name, "title"])
                removed["canonical titles (kept)"] += 1
            pieces.append(HARD)
            continue
        if name not in INLINE_ELEMENTS and name not in BOUNDARY_ELEMENTS:
            removed[f"unknown element <{name}> (content kept)"] += 1
        if not self_closing:
            open_elements.append([name, "kept"])
        if name not in INLINE_ELEMENTS:
            pieces.append(HARD)
    return CleanVerse(join_pieces(title, joins), join_pieces(body, joins))


def _next_is_word_start(tokens, index: int) -> bool:
    """Whether the next element after the closing tag at ``index`` (past other closing word
    elements) opens a word element, with no text between."""
    for token in tokens[index + 1:]:
        if isinstance(token, str):
            return False
        closing, name, _, self_closing = token
        if name not in WORD_ELEMENTS:
            return False
        if not closing:
            return not self_closing
    return False


# ---------------------------------------------------------------------------------------
# Drop capitals


def _is_capitals(word: str) -> bool:
    """A word of two letters or more, all capitals (``EN``, ``ZORBÁ``)."""
    return len(word) > 1 and word.isupper() and sum(character.isalpha() for character in word) > 1


def _capital_like(word: str) -> bool:
    return word.isupper() and (len(word) == 1 or _is_capitals(word))


def _sentence_start(text: str, position: int) -> bool:
    """Whether a word at ``position`` starts a sentence: nothing but spaces and opening punctuation
    before it since the start or since ``.``, ``!`` or ``?``."""
    index = position - 1
    while index >= 0 and (text[index].isspace() or _opening(text[index])):
        index -= 1
    return index < 0 or text[index] in ".!?"


def title_case_words(texts: Iterable[str]) -> frozenset:
    """The words (lower-cased) that ``texts`` write with a capital more often than without, where
    no sentence starts: names (``zorbá``), as against ``frumen``. Words in capitals are not counted."""
    title, lower = Counter(), Counter()
    for text in texts:
        for match in _WORD.finditer(text):
            word = match.group()
            if not word[0].isalpha() or _is_capitals(word) or _sentence_start(text, match.start()):
                continue
            if word[0].isupper() and word[1:] == word[1:].lower():
                title[word.lower()] += 1
            elif word == word.lower():
                lower[word] += 1
    return frozenset(word for word, count in title.items() if count > lower[word])


def _capital_runs(text: str) -> List[List[re.Match]]:
    """Runs of words in capitals (single capital letters included, ``Y``, ``Á``) separated by
    spaces only, each with at least one word of two capitals or more."""
    runs, run = [], []
    for match in _WORD.finditer(text):
        if _capital_like(match.group()) and (not run or not text[run[-1].end():match.start()].strip()):
            run.append(match)
            continue
        if any(_is_capitals(word.group()) for word in run):
            runs.append(run)
        run = [match] if _capital_like(match.group()) else []
    if any(_is_capitals(word.group()) for word in run):
        runs.append(run)
    return runs


def find_drop_capital(text: str, chapter_start: bool) -> Optional[List[re.Match]]:
    """The words of ``text`` printed as a drop capital, or None.

    At a chapter's start (its first verse): the first run of capitals that the next word does not
    continue in capitals: ``EN la vorta``, ``Zalmo de Darvo. ZORBÁ es mi brastor`` (a title
    before it), ``ALEF. BRINADOS los`` (a Hebrew letter heading in capitals before it).
    Elsewhere only where a verse opens a new section with one (``HUBO en los días``): a run at
    the verse's start directly followed by a word in lower case, so that ``TEKEL: Brozado`` and
    ``YO ZOY EL QUE ZOY`` inside a verse stay as they are."""
    words = list(_WORD.finditer(text))
    for run in _capital_runs(text):
        following = next((word for word in words if word.start() >= run[-1].end()), None)
        if chapter_start:
            if following is None or not _capital_like(following.group()):
                return run
            continue
        opened = not text[:run[0].start()].strip() or all(_opening(c) for c in text[:run[0].start()].strip())
        spaced = following is not None and not text[run[-1].end():following.start()].strip()
        if opened and spaced and following.group()[0].islower():
            return run
        return None
    return None


def normalize_drop_capital(text: str, chapter_start: bool, title_words: frozenset) -> str:
    """``text`` with its drop capital (:func:`find_drop_capital`) in the casing its words have
    elsewhere: a capital where a sentence starts, names (``title_words``) capitalised, the rest in
    lower case (``Y FRUMEN acabados`` -> ``Y frumen acabados``, ``Y ZORBÁ dijo`` -> ``Y Zorbá
    dijo``)."""
    run = find_drop_capital(text, chapter_start)
    if run is None:
        return text
    pieces, position = [], 0
    for index, match in enumerate(run):
        word = match.group()
        if index == 0 and _sentence_start(text, match.start()) or word.lower() in title_words:
            cased = word[:1] + word[1:].lower()
        else:
            cased = word.lower()
        pieces.append(text[position:match.start()] + cased)
        position = match.end()
    return "".join(pieces) + text[position:]


# ---------------------------------------------------------------------------------------
# Modules as plain data


@dataclass
class ModuleText:
    """One module's verses by reference: ``books[book][chapter - 1][verse - 1]``, books in the
    canonical order of its versification (OSIS names: ``Gen``, ``3John``); each verse raw OSIS
    (:func:`read_module`) or clean text (:func:`clean_module`)."""

    name: str
    versification: str
    books: Dict[str, List[List[str]]]
    language: str = ""
    description: str = ""


@dataclass
class CleanModule:
    """A module's clean verses (title and text joined) and what cleaning did."""

    text: ModuleText
    removed: Counter
    # chapters ("Gen.1") whose markup names another chapter: the text does not follow the versification there
    misplaced_chapters: Dict[str, str]
    drop_capitals: int  # verses whose drop capital was normalized
    reordered_verses: List[str] = field(default_factory=list)
    # (chapters that open with a drop capital, chapters): normalized only where most do
    chapters_opening_in_capitals: Tuple[int, int] = (0, 0)


# A module prints drop capitals when at least this share of its chapters opens with one.
DROP_CAPITAL_SHARE = 0.5

# Verses a module has in each other's place, against the order of other translations (``"Matt.23.13"``
# holds what others have at 23:14 and the other way round): swapped back when the module is cleaned.
# The WEB's preface says that it numbers Matthew 23:13 and 23:14 the other way round.
KNOWN_VERSE_ORDER = {"engWEB2015eb": (("Matt.23.13", "Matt.23.14"),)}

_MARKER = re.compile(r"<(chapter|verse)\b([^>]*)>")
_OSIS_REFERENCE = re.compile(r"[1-4]?[A-Za-z]+\.\d+(?:\.\d+)?")  # sID/eID may also be bare ids ("gen26")


def misplaced_markers(raw_verses: Sequence[str], book: str, chapter: int) -> List[str]:
    """The chapter and verse markers in a chapter's raw verses that name another chapter (the end
    of the chapter before in its first verse, the start of the next in its last, are in place)."""
    this, before, after = f"{book}.{chapter}", f"{book}.{chapter - 1}", f"{book}.{chapter + 1}"
    wrong = []
    for position, verse in enumerate(raw_verses):
        for match in _MARKER.finditer(verse):
            attributes = _attributes(match.group(2))
            for name, value in attributes.items():
                if name not in ("osisID", "sID", "eID"):
                    continue
                for reference in value.split():
                    if not _OSIS_REFERENCE.fullmatch(reference):
                        continue
                    chapter_of = reference if match.group(1) == "chapter" else reference.rsplit(".", 1)[0]
                    if chapter_of == this or (name == "eID" and position == 0 and chapter_of == before) or (
                            name != "eID" and position == len(raw_verses) - 1 and chapter_of == after):
                        continue
                    wrong.append(reference)
    return wrong


def clean_module(raw: ModuleText) -> CleanModule:
    """Every verse of ``raw`` cleaned (:func:`clean_osis`), its drop capitals normalized.

    Two passes: the first keeps every two touching word elements apart and counts the module's
    words, from which the second decides which of them are one word (:class:`WordJoins`)."""
    apart: Counter = Counter()
    touched = set()

    def record(left: str, right: str) -> bool:
        apart[(left.lower(), right.lower())] += 1
        touched.add(current[0])
        return False

    removed: Counter = Counter()
    current = [None]
    verses: Dict[Tuple[str, int, int], CleanVerse] = {}
    misplaced: Dict[str, str] = {}
    for book, chapters in raw.books.items():
        for chapter_index, chapter in enumerate(chapters):
            wrong = misplaced_markers(chapter, book, chapter_index + 1)
            if wrong:
                misplaced[f"{book}.{chapter_index + 1}"] = wrong[0]
            for verse_index, osis in enumerate(chapter):
                current[0] = (book, chapter_index + 1, verse_index + 1)
                verses[current[0]] = clean_osis(osis, removed, record)
    if touched:
        joins = WordJoins((verse.joined() for verse in verses.values()), apart)
        for book, chapter, verse in touched:
            verses[(book, chapter, verse)] = clean_osis(raw.books[book][chapter - 1][verse - 1], None, joins)
    title_words = title_case_words(verse.text for verse in verses.values())
    openings = [clean.text for (_, _, verse), clean in verses.items() if verse == 1 and clean.text]
    printed = sum(find_drop_capital(text, True) is not None for text in openings)
    # a module that prints drop capitals opens (nearly) every chapter with one; in one that does
    # not, a chapter that opens in capitals means them (a divine name in capitals)
    normalize = bool(openings) and printed >= DROP_CAPITAL_SHARE * len(openings)
    changed = 0
    books: Dict[str, List[List[str]]] = {}
    for (book, chapter, verse), clean in verses.items():
        text = normalize_drop_capital(clean.text, verse == 1, title_words) if normalize else clean.text
        changed += text != clean.text
        chapters = books.setdefault(book, [])
        while len(chapters) < chapter:
            chapters.append([])
        chapters[chapter - 1].append(CleanVerse(clean.title, text).joined())
    reordered = []
    for first, second in KNOWN_VERSE_ORDER.get(raw.name, ()):
        (book, chapter, verse), (_, _, other) = (_parse_reference(first), _parse_reference(second))
        if book in books and len(books[book]) >= chapter and len(books[book][chapter - 1]) >= max(verse, other):
            texts = books[book][chapter - 1]
            texts[verse - 1], texts[other - 1] = texts[other - 1], texts[verse - 1]
            reordered += [first, second]
    return CleanModule(ModuleText(raw.name, raw.versification, books, raw.language, raw.description), removed,
                       misplaced, changed, reordered, (printed, len(openings)))


def _parse_reference(reference: str) -> Tuple[str, int, int]:
    book, chapter, verse = reference.rsplit(".", 2)
    return book, int(chapter), int(verse)


# ---------------------------------------------------------------------------------------
# Alignment by reference

BOOK_IN_ONE_MODULE = "book in one module only"
CHAPTER_IN_ONE_MODULE = "chapter in one module only"
MARKERS_ELSEWHERE = "chapter's markup names another chapter (the text does not follow its versification there)"
VERSE_COUNT_DIFFERS = "chapter's verse count differs between the versifications"
LAST_VERSE_EMPTY = "chapter's last verse empty on one side (its verses are divided differently)"
DIVISION_DIFFERS = "verse lengths contradict the pairing (the chapter's verses are divided differently)"
VERSE_EMPTY = "verse empty on one side"
LENGTHS_DISAGREE = "verse lengths disagree (one side holds more than the other)"
# Whole chapters are left out for the first six, single verses for the last two.
REASONS = (BOOK_IN_ONE_MODULE, CHAPTER_IN_ONE_MODULE, MARKERS_ELSEWHERE, VERSE_COUNT_DIFFERS, LAST_VERSE_EMPTY,
           DIVISION_DIFFERS, VERSE_EMPTY, LENGTHS_DISAGREE)
CHAPTER_REASONS = REASONS[:6]

# The length check (Gale & Church 1993, "A Program for Aligning Sentences in Bilingual Corpora"):
# the best alignment of a chapter's verses by their lengths, allowing a verse to pair with two or
# with none; where it is not verse n with verse n throughout, the two texts divide the chapter
# differently. One verse-for-verse pairing is far likelier than anything else between two
# translations numbered alike (the prior), and shifts of more than BAND verses are not searched.
SAME_VERSE_PRIOR = 0.999
BAND = 12


@dataclass
class Alignment:
    """Chapters kept, in canonical order: (name ``Gen.1``, source verses, target verses, verse
    numbers), and what was left out, by reason."""

    chapters: List[Tuple[str, List[str], List[str], List[int]]]
    # reason -> verses: references with text in at least one module; with the verses kept, these
    # account for every reference that holds text in either module
    left_out_verses: Counter
    left_out_chapters: Dict[str, List[str]]  # chapter reason -> chapters (books, for BOOK_IN_ONE_MODULE)
    left_out_references: Dict[str, List[str]]  # verse reason -> verses (``Luke.17.36``)
    empty_in_both: int = 0
    length_model: Dict[str, float] = field(default_factory=dict)


def _has_text(verses: Sequence[str]) -> int:
    return sum(1 for verse in verses if verse.strip())


def _references_with_text(source: Sequence[str], target: Sequence[str]) -> int:
    """Verse numbers of a chapter that hold text in at least one of the two modules."""
    return sum(1 for number in range(max(len(source), len(target)))
               if any(number < len(side) and side[number].strip() for side in (source, target)))


def length_model(pairs: Sequence[Tuple[int, int]]) -> Tuple[float, float]:
    """(ratio, variance) of source against target length in characters, from verse pairs:
    ``source - ratio * target`` is taken as normal with variance ``variance * (source + ratio *
    target)`` (Gale & Church's model, its parameters from the median, robust to the misaligned)."""
    pairs = [(source, target) for source, target in pairs if source and target]
    if not pairs:
        return 1.0, 1.0
    ratio = _median([source / target for source, target in pairs])
    # the median of a chi-square variable with one degree of freedom is 0.4549
    variance = _median([(source - ratio * target) ** 2 / (source + ratio * target)
                        for source, target in pairs]) / 0.4549
    return ratio, max(variance, 1e-3)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _pair_cost(source: int, target: int, ratio: float, variance: float) -> float:
    deviation = abs(source - ratio * target) / math.sqrt(variance * (source + ratio * target))
    return -math.log(max(math.erfc(deviation / math.sqrt(2)), 1e-300))


def length_alignment(source: Sequence[int], target: Sequence[int], ratio: float, variance: float) -> List[Tuple]:
    """The likeliest alignment of two sequences of verse lengths: beads ``(i, a, j, b)``, source
    verses ``i..i+a`` with target verses ``j..j+b`` (a, b in 0-2, not both 2 or 0)."""
    n, m = len(source), len(target)
    other = -math.log((1 - SAME_VERSE_PRIOR) / 4)
    beads = ((1, 1, -math.log(SAME_VERSE_PRIOR)), (2, 1, other), (1, 2, other), (1, 0, other), (0, 1, other))
    cost = {(0, 0): (0.0, None)}
    for i in range(n + 1):
        for j in range(max(0, i - BAND), min(m, i + BAND) + 1):
            best = None
            for a, b, prior in beads:
                previous = cost.get((i - a, j - b))
                if previous is None or (a == b == 0):
                    continue
                total = previous[0] + prior
                if a and b:
                    total += _pair_cost(sum(source[i - a:i]), sum(target[j - b:j]), ratio, variance)
                if best is None or total < best[0]:
                    best = (total, (a, b))
            if best is not None:
                cost[(i, j)] = best
    if (n, m) not in cost:
        return [(0, n, 0, m)]  # beyond the band: nothing pairs
    path, i, j = [], n, m
    while i or j:
        a, b = cost[(i, j)][1]
        path.append((i - a, a, j - b, b))
        i, j = i - a, j - b
    return path[::-1]


def check_division(source: Sequence[str], target: Sequence[str], ratio: float,
                   variance: float) -> Tuple[bool, List[int]]:
    """(whether the verses' lengths agree with pairing verse n with verse n, the indices of single
    verses whose two sides the length alignment leaves unpaired while pairing the rest as numbered)."""
    path = length_alignment([len(verse) for verse in source], [len(verse) for verse in target], ratio, variance)
    off = [bead for bead in path if not (bead[1] == bead[3] == 1 and bead[0] == bead[2])]
    unpaired_source = {i for i, a, _, b in off if a == 1 and b == 0}
    unpaired_target = {j for _, a, j, b in off if a == 0 and b == 1}
    both = unpaired_source & unpaired_target
    rest = [bead for bead in off if not (bead[1] + bead[3] == 1 and (bead[0] if bead[1] else bead[2]) in both)]
    return not rest, sorted(both)


def align_modules(source: CleanModule, target: CleanModule) -> Alignment:
    """Verses of two cleaned modules paired by (book, chapter, verse); what cannot be paired is
    left out with its reason (:data:`REASONS`), whole chapters for the chapter reasons."""
    verses_out: Counter = Counter()
    chapters_out: Dict[str, List[str]] = {}
    references_out: Dict[str, List[str]] = {}
    empty_in_both = 0

    def leave_chapter(reason: str, name: str, source_verses: Sequence[str], target_verses: Sequence[str]) -> None:
        verses_out[reason] += _references_with_text(source_verses, target_verses)
        chapters_out.setdefault(reason, []).append(name)

    source_books, target_books = source.text.books, target.text.books
    candidates = []
    for book in list(source_books) + [book for book in target_books if book not in source_books]:
        source_chapters, target_chapters = source_books.get(book, []), target_books.get(book, [])
        source_has = any(_has_text(chapter) for chapter in source_chapters)
        target_has = any(_has_text(chapter) for chapter in target_chapters)
        if source_has != target_has:
            verses_out[BOOK_IN_ONE_MODULE] += sum(_has_text(chapter) for chapter in source_chapters + target_chapters)
            chapters_out.setdefault(BOOK_IN_ONE_MODULE, []).append(book)
            continue
        for index in range(max(len(source_chapters), len(target_chapters))):
            name = f"{book}.{index + 1}"
            source_verses = source_chapters[index] if index < len(source_chapters) else []
            target_verses = target_chapters[index] if index < len(target_chapters) else []
            if not _has_text(source_verses) or not _has_text(target_verses):
                if _has_text(source_verses) or _has_text(target_verses):
                    leave_chapter(CHAPTER_IN_ONE_MODULE, name, source_verses, target_verses)
                continue
            if name in source.misplaced_chapters or name in target.misplaced_chapters:
                leave_chapter(MARKERS_ELSEWHERE, name, source_verses, target_verses)
            elif len(source_verses) != len(target_verses):
                leave_chapter(VERSE_COUNT_DIFFERS, name, source_verses, target_verses)
            elif bool(source_verses[-1].strip()) != bool(target_verses[-1].strip()):
                leave_chapter(LAST_VERSE_EMPTY, name, source_verses, target_verses)
            else:
                candidates.append((name, source_verses, target_verses))
    ratio, variance = length_model([(len(s), len(t)) for _, source_verses, target_verses in candidates
                                    for s, t in zip(source_verses, target_verses)])
    chapters = []
    for name, source_verses, target_verses in candidates:
        numbers = []
        for number, (s, t) in enumerate(zip(source_verses, target_verses), start=1):
            if s.strip() and t.strip():
                numbers.append(number)
            elif s.strip() or t.strip():
                verses_out[VERSE_EMPTY] += 1
                references_out.setdefault(VERSE_EMPTY, []).append(f"{name}.{number}")
            else:
                empty_in_both += 1
        kept_source = [source_verses[number - 1] for number in numbers]
        kept_target = [target_verses[number - 1] for number in numbers]
        agrees, unpaired = check_division(kept_source, kept_target, ratio, variance)
        if not agrees:
            leave_chapter(DIVISION_DIFFERS, name, kept_source, kept_target)
            continue
        for index in unpaired:
            verses_out[LENGTHS_DISAGREE] += 1
            references_out.setdefault(LENGTHS_DISAGREE, []).append(f"{name}.{numbers[index]}")
        keep = [index for index in range(len(numbers)) if index not in set(unpaired)]
        if keep:
            chapters.append((name, [kept_source[i] for i in keep], [kept_target[i] for i in keep],
                             [numbers[i] for i in keep]))
    return Alignment(chapters, verses_out, chapters_out, references_out, empty_in_both,
                     {"ratio": round(ratio, 4), "variance": round(variance, 4), "same_verse_prior": SAME_VERSE_PRIOR,
                      "band": BAND})


# ---------------------------------------------------------------------------------------
# The split

SPLIT_PERIOD = 40  # --held-out-every: a valid and a test chapter in every 40 (2.5% each)


def split_offsets(period: int = SPLIT_PERIOD) -> Tuple[int, int]:
    """Where in each ``period`` chapters the valid and the test chapter lie: a quarter and three
    quarters of the way (10 and 30 of 40), so that the two are spread apart."""
    return period // 4, 3 * period // 4


def split_rule(period: int = SPLIT_PERIOD) -> str:
    valid, test = split_offsets(period)
    return (f"whole chapters: the kept chapters numbered from 0 in canonical order; number % {period} == {valid} -> "
            f"valid, number % {period} == {test} -> test, every other -> train")


def split_chapters(chapters: Sequence[Tuple], period: int = SPLIT_PERIOD) -> Dict[str, List[Tuple]]:
    """The kept chapters by split (:func:`split_rule`): every ``period``-th chapter, spread over the
    books and their genres, whole, so that no window of sentences crosses two splits."""
    if period < 4:
        raise DataError(f"--held-out-every must be at least 4 (a valid and a test chapter among train chapters), "
                        f"got {period}")
    valid, test = split_offsets(period)
    splits: Dict[str, List[Tuple]] = {"train": [], "valid": [], "test": []}
    for number, chapter in enumerate(chapters):
        position = number % period
        splits["valid" if position == valid else "test" if position == test else "train"].append(chapter)
    return {split: chosen for split, chosen in splits.items() if chosen}


# ---------------------------------------------------------------------------------------
# Reading SWORD modules: the one place that touches pysword

PYSWORD_VERSION = "0.2.8"
# Where SWORD front-ends look for modules (later ones win, as in pysword): the Debian packages'
# folder, a local installation's, the user's own (installmgr writes there).
DEFAULT_SWORD_PATHS = ("/usr/share/sword", "/usr/local/share/sword", "~/.sword")
INSTALL_HELP = ("The default modules come with Debian's packages: apt-get install sword-text-web sword-text-sparv "
                "(engWEB2015eb, spaRV1909eb). Other modules: CrossWire's installmgr (package sword-utils; "
                "installmgr -init && installmgr -sc && installmgr -r CrossWire && installmgr -ri CrossWire MODULE) "
                "installs into ~/.sword, or unpack a module's zip from a SWORD module repository into ~/.sword or "
                "into a folder given with --sword-path")
TEXT_DRIVERS = ("rawtext", "rawtext4", "ztext", "ztext4")


def _sword_modules():
    try:
        from pysword.modules import SwordModules
    except ImportError:
        raise DataError(f"reading SWORD modules needs pysword, which is not installed: pip install "
                        f"pysword=={PYSWORD_VERSION} (make setup installs it with the project)") from None
    return SwordModules


def resolve_books(requested: Sequence[str], known: Sequence[Sequence[str]]) -> List[str]:
    """OSIS names of the ``requested`` books, each given by its OSIS name (``3John``) or its name in
    pysword (``III John``), case ignored; ``known``: (OSIS name, name, abbreviation) of every book."""
    names = {}
    for osis_name, *others in known:
        for name in (osis_name, *others):
            names.setdefault(name.lower(), osis_name)
    resolved = []
    for book in requested:
        if book.strip().lower() not in names:
            raise DataError(f"--books: unknown book {book.strip()!r}; books are named by their OSIS names: "
                            f"{', '.join(dict.fromkeys(osis_name for osis_name, *_ in known))}")
        resolved.append(names[book.strip().lower()])
    return list(dict.fromkeys(resolved))


class SwordLibrary:
    """The SWORD modules found in ``sword_path`` (else in :data:`DEFAULT_SWORD_PATHS`), read by pysword."""

    def __init__(self, sword_path: Optional[str] = None):
        sword_modules = _sword_modules()
        self.searched = [sword_path] if sword_path else [os.path.expanduser(path) for path in DEFAULT_SWORD_PATHS]
        self.folders = [path for path in self.searched if os.path.isdir(os.path.join(path, "mods.d"))]
        self._modules = sword_modules(self.folders) if self.folders else None
        self.confs = self._modules.parse_modules() if self.folders else {}

    def check(self, name: str) -> dict:
        """The conf of module ``name``, which must be a Bible text in OSIS markup pysword reads."""
        if name not in self.confs:
            where = ", ".join(self.searched)
            found = f" (found there: {', '.join(sorted(self.confs))})" if self.confs else ""
            raise DataError(f"SWORD module {name!r} not found in {where}{found}. {INSTALL_HELP}")
        conf = self.confs[name]
        driver = conf.get("moddrv", "").lower()
        if driver not in TEXT_DRIVERS:
            raise DataError(f"SWORD module {name!r}: ModDrv={conf.get('moddrv')!r} is not a Bible text (pysword reads "
                            f"{', '.join(TEXT_DRIVERS)})")
        markup = conf.get("sourcetype", "Plaintext")
        if markup.lower() not in ("osis", "plaintext"):
            raise DataError(f"SWORD module {name!r}: SourceType={markup!r}: only OSIS markup (or plain text) "
                            f"is cleaned here")
        from pysword.canons import canons

        versification = conf.get("versification", "KJV")
        if versification.lower() not in canons:
            raise DataError(f"SWORD module {name!r}: Versification={versification!r} is unknown to pysword "
                            f"(known: {', '.join(sorted(canons))})")
        if "cipherkey" in conf and not conf["cipherkey"].strip():
            raise DataError(f"SWORD module {name!r} is locked (CipherKey is empty): unlock it with its key first")
        return conf

    def _bible(self, name: str):
        self.check(name)
        try:
            bible = self._modules.get_bible_from_module(name)
        except (IOError, ValueError) as error:
            raise DataError(f"SWORD module {name!r}: {error} (are its data files installed?)") from None
        # pysword decompresses a book's whole block for every verse it reads: keep the last blocks
        # (reading the WEB takes ~35 s without, a few with)
        if hasattr(bible, "_decompressed_text"):
            bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)
        return bible

    def books(self, name: str) -> List[Tuple[str, str, str]]:
        """(OSIS name, name, abbreviation) of every book of the module's versification, in canonical order."""
        structure = self._bible(name).get_structure()
        return [(book.osis_name, book.name, book.preferred_abbreviation)
                for books in structure.get_books().values() for book in books]

    def read(self, name: str, books: Optional[Sequence[str]] = None) -> ModuleText:
        """The module's raw verses by its own versification; ``books``: OSIS names to read (default all)."""
        conf = self.check(name)
        bible = self._bible(name)
        chosen: Dict[str, List[List[str]]] = {}
        for testament_books in bible.get_structure().get_books().values():
            for book in testament_books:
                if books is not None and book.osis_name not in books:
                    continue
                chapters = []
                for chapter, length in enumerate(book.chapter_lengths, start=1):
                    verses = list(bible.get_iter(books=[book.name], chapters=[chapter], clean=False))
                    if len(verses) != length:
                        raise PrepareError(f"SWORD module {name!r}: pysword read {len(verses)} verses of "
                                           f"{book.osis_name}.{chapter}, its versification has {length}")
                    chapters.append(verses)
                chosen[book.osis_name] = chapters
        return ModuleText(name, conf.get("versification", "KJV"), chosen, conf.get("lang", ""),
                          conf.get("description", ""))


# ---------------------------------------------------------------------------------------
# The corpus: documents and what prep.json records

ALIGNMENT_RULE = ("by reference: verses paired by (book, chapter, verse), each module read with its own "
                  "versification; a chapter is a document, a verse a sentence")


def check_module_language(module: str, conf: dict, lang: str, option: str) -> None:
    """Stop when the module's conf declares another language than ``lang`` (arguments swapped)."""
    declared = conf.get("lang", "").strip()
    if declared and declared.replace("_", "-").split("-")[0].lower() != lang.lower():
        raise DataError(f"SWORD module {module!r} is in {declared!r} (its conf's Lang) but {option} is {lang!r}")


def chapter_documents(chapters: Sequence[Tuple]) -> Tuple[List[TextDocument], List[TextDocument]]:
    """Source and target documents of kept chapters, named by chapter (``Gen.1``)."""
    return ([TextDocument(name, list(source)) for name, source, _, _ in chapters],
            [TextDocument(name, list(target)) for name, _, target, _ in chapters])


def _module_record(module: CleanModule, verses_with_text: int) -> dict:
    opening, chapters = module.chapters_opening_in_capitals
    return {
        "name": module.text.name,
        "description": module.text.description,
        "versification": module.text.versification,
        "language": module.text.language,
        "verses_with_text": verses_with_text,
        "markup_removed": dict(sorted(module.removed.items())),
        "chapters_opening_in_capitals": f"{opening} of {chapters}",
        "drop_capitals_normalized": module.drop_capitals,
        "verses_reordered": module.reordered_verses,
        "chapters_whose_markup_names_another": module.misplaced_chapters,
    }


def corpus_record(source: CleanModule, target: CleanModule, alignment: Alignment,
                  books: Optional[Sequence[str]], sword_path: Sequence[str], period: int = SPLIT_PERIOD) -> dict:
    """What prep.json records about a Bible corpus (``bible``)."""
    left_out = {}
    for reason in REASONS:
        entry = {"verses": alignment.left_out_verses.get(reason, 0)}
        if reason in CHAPTER_REASONS:
            entry["books" if reason == BOOK_IN_ONE_MODULE else "chapters"] = alignment.left_out_chapters.get(reason, [])
        else:
            entry["references"] = alignment.left_out_references.get(reason, [])
        left_out[reason] = entry
    return {
        "modules": {"source": _module_record(source, _verses_with_text(source.text)),
                    "target": _module_record(target, _verses_with_text(target.text))},
        "sword_path": list(sword_path),
        "books": list(books) if books is not None else "all",
        "alignment": ALIGNMENT_RULE,
        "kept": {"chapters": len(alignment.chapters),
                 "verses": sum(len(numbers) for *_, numbers in alignment.chapters)},
        "left_out": left_out,
        "verses_empty_in_both": alignment.empty_in_both,
        "length_check": alignment.length_model,
        "split_rule": split_rule(period),
    }


def _verses_with_text(module: ModuleText) -> int:
    return sum(_has_text(chapter) for chapters in module.books.values() for chapter in chapters)


def _listed(names: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def report_lines(record: dict) -> List[str]:
    """The record of :func:`corpus_record` in words, a line each."""
    lines = []
    for side, module in record["modules"].items():
        removed = ", ".join(f"{kind} {count}" for kind, count in module["markup_removed"].items()) or "none"
        lines.append(f"{side} {module['name']} ({module['versification']}, {module['language'] or '?'}): "
                     f"{module['verses_with_text']} verses with text; markup taken out: {removed}")
        lines.append(f"{side} {module['name']}: chapters opening in capitals {module['chapters_opening_in_capitals']}, "
                     f"drop capitals normalized in {module['drop_capitals_normalized']} verses"
                     + (f"; verses put back in order: {', '.join(module['verses_reordered'])}"
                        if module["verses_reordered"] else ""))
    lines.append(f"kept: {record['kept']['chapters']} chapters, {record['kept']['verses']} verses")
    for reason, entry in record["left_out"].items():
        if not entry["verses"]:
            continue
        names = entry.get("books") or entry.get("chapters") or entry.get("references") or []
        what = "book" if "books" in entry else "chapter" if "chapters" in entry else "verse"
        lines.append(f"left out, {reason}: {entry['verses']} verses ({len(names)} {what}{'s' * (len(names) != 1)}: "
                     f"{_listed(names)})")
    if record["verses_empty_in_both"]:
        lines.append(f"verses empty in both modules (not counted above): {record['verses_empty_in_both']}")
    return lines
