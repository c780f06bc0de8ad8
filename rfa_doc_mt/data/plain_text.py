"""Raw document-level text, one sentence per line, in the formats people exchange it in.

Document boundaries come in one of three forms:

* ``marked``: a line ``<d>`` before every document (Maruf et al. 2019's TED, News Commentary
  and Europarl release);
* ``blank``: an empty line between two documents;
* ``docids``: a separate file with one document id per sentence line (contextual-mt's
  ``.docids``); the sentences of a document are consecutive lines with one id;
* ``single``: none of these: the whole file is one document.

:func:`read_documents` detects the form of each file (``marked`` when any line is ``<d>``,
else ``blank`` when an empty line stands between two sentences, else ``single``) unless it is
told, and :func:`write_documents` writes translations back in the form they came in.

Real files are not clean, and none of these changes a count or a boundary: Windows line
endings, a UTF-8 byte-order mark, white space at either end of a line (a ``<d>`` line with
trailing spaces or ``\\r`` is a boundary), runs of spaces inside a line (the tokenizer folds
them), empty lines at the end of the file, a missing final newline. A sentence is its line
without the white space at its ends, and nothing else is changed. Everything else that is
wrong stops with the file and line: text that is not UTF-8, an empty document, an empty line
inside a ``<d>`` document, text before the first ``<d>``, a document id that comes back after
another document.
"""

import io
import os
import re
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence, TextIO, Tuple

from .io import DataError, _not_utf8, atomic_write
from .text import TextDocument

DOCUMENT_MARK = "<d>"
FORMATS = ("marked", "blank", "docids", "single")
BYTE_ORDER_MARK = "\ufeff"
# what str.splitlines would also split on, but a text file does not (form feed, U+2028, ...)
_LINE_BREAK = re.compile(r"\r?\n")


@dataclass
class DocumentText:
    """The documents of one file and the form their boundaries were given in."""

    path: str
    documents: List[TextDocument]
    form: str

    @property
    def sentences(self) -> List[str]:
        return [sentence for document in self.documents for sentence in document.sentences]


def decode_text(path: str, data: bytes) -> List[str]:
    """Lines of UTF-8 ``data`` (from ``path``, for messages), without terminators or a byte-order mark.
    An empty last line (the file's final newline) is not a line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(_not_utf8(path, data, error.start)) from None
    if text.startswith(BYTE_ORDER_MARK):
        text = text[1:]
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_raw_lines(path: str) -> List[str]:
    """The lines of a file (``-``: standard input), see :func:`decode_text`."""
    if path == "-":
        return decode_text("<stdin>", sys.stdin.buffer.read())
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    with open(path, "rb") as handle:
        return decode_text(path, handle.read())


def detect_form(lines: Sequence[str]) -> str:
    stripped = [line.strip() for line in lines]
    if DOCUMENT_MARK in stripped:
        return "marked"
    last = max((number for number, line in enumerate(stripped) if line), default=-1)
    first = next((number for number, line in enumerate(stripped) if line), len(stripped))
    if any(not line for line in stripped[first:last]):
        return "blank"
    return "single"


def _trailing_blank_lines(stripped: Sequence[str]) -> int:
    """Number of lines at the end that hold nothing but white space (ignored)."""
    count = 0
    for line in reversed(stripped):
        if line:
            break
        count += 1
    return count


def parse_marked(path: str, lines: Sequence[str], empty_sentences: bool = False) -> List[TextDocument]:
    stripped = [line.strip() for line in lines]
    end = len(stripped) - (0 if empty_sentences else _trailing_blank_lines(stripped))
    documents: List[TextDocument] = []
    for number, line in enumerate(stripped[:end], start=1):
        if line == DOCUMENT_MARK:
            if documents and not documents[-1].sentences:
                raise DataError(f"{path}:{documents[-1].boundary_line}: empty document (the next {DOCUMENT_MARK} "
                                f"line follows at line {number})")
            documents.append(TextDocument(f"doc{len(documents) + 1}", [], [], boundary_line=number))
            continue
        if not documents:
            raise DataError(f"{path}:{number}: text before the first {DOCUMENT_MARK} line (this file marks every "
                            f"document with a {DOCUMENT_MARK} line before it)")
        if not line and not empty_sentences:
            raise DataError(f"{path}:{number}: empty line inside document {len(documents)} (this file marks "
                            f"documents with {DOCUMENT_MARK} lines; an empty sentence cannot be translated)")
        documents[-1].sentences.append(line)
        documents[-1].line_numbers.append(number)
    if not documents:
        raise DataError(f"{path}: no documents (the file is empty)")
    if not documents[-1].sentences:
        raise DataError(f"{path}:{documents[-1].boundary_line}: empty document (a {DOCUMENT_MARK} line at the end)")
    return documents


def parse_blank(path: str, lines: Sequence[str]) -> List[TextDocument]:
    stripped = [line.strip() for line in lines]
    end = len(stripped) - _trailing_blank_lines(stripped)
    documents = [TextDocument("doc1", [], [])]
    for number, line in enumerate(stripped[:end], start=1):
        if line:
            documents[-1].sentences.append(line)
            documents[-1].line_numbers.append(number)
        elif not documents[-1].sentences:
            what = "the file starts with an empty line" if number == 1 else "two empty lines in a row"
            raise DataError(f"{path}:{number}: empty document ({what}; this file separates documents by one "
                            f"empty line)")
        else:
            documents.append(TextDocument(f"doc{len(documents) + 1}", [], []))
    if not documents[0].sentences:
        raise DataError(f"{path}: no documents (the file is empty)")
    return documents


def parse_single(path: str, lines: Sequence[str], empty_sentences: bool = False) -> List[TextDocument]:
    stripped = [line.strip() for line in lines]
    end = len(stripped) - (0 if empty_sentences else _trailing_blank_lines(stripped))
    document = TextDocument(os.path.basename(path) if path != "-" else "stdin", [], [])
    for number, line in enumerate(stripped[:end], start=1):
        if not line and not empty_sentences:
            raise DataError(f"{path}:{number}: empty line (this file has no document boundaries)")
        document.sentences.append(line)
        document.line_numbers.append(number)
    if not document.sentences:
        raise DataError(f"{path}: no sentences (the file is empty)")
    return [document]


def parse_docids(path: str, lines: Sequence[str], docids_path: str,
                 empty_sentences: bool = False) -> List[TextDocument]:
    """Documents of ``lines`` by the ids in ``docids_path``, one per line."""
    ids = [line.strip() for line in read_raw_lines(docids_path)]
    stripped = [line.strip() for line in lines]
    if len(stripped) - _trailing_blank_lines(stripped) == len(ids) and not empty_sentences:
        stripped = stripped[:len(ids)]
    if len(stripped) != len(ids):
        raise DataError(f"{docids_path} has {len(ids)} document ids but {path} has {len(stripped)} lines")
    documents: List[TextDocument] = []
    started = {}
    for number, (line, document_id) in enumerate(zip(stripped, ids), start=1):
        if not document_id:
            raise DataError(f"{docids_path}:{number}: empty document id")
        if "\t" in document_id:
            raise DataError(f"{docids_path}:{number}: a document id holds a tab")
        if DOCUMENT_MARK == line:
            raise DataError(f"{path}:{number}: a {DOCUMENT_MARK} line in a file whose documents are given by "
                            f"{docids_path}")
        if not line and not empty_sentences:
            raise DataError(f"{path}:{number}: empty line (document {document_id!r} of {docids_path})")
        if not documents or documents[-1].name != document_id:
            if document_id in started:
                raise DataError(f"{docids_path}:{number}: document id {document_id!r} comes back after another "
                                f"document (it started at line {started[document_id]}): a document's sentences "
                                f"must be consecutive lines")
            started[document_id] = number
            documents.append(TextDocument(document_id, [], []))
        documents[-1].sentences.append(line)
        documents[-1].line_numbers.append(number)
    if not documents:
        raise DataError(f"{path}: no sentences (the file is empty)")
    return documents


def parse_documents(path: str, lines: Sequence[str], form: str = "auto", docids: Optional[str] = None,
                    empty_sentences: bool = False) -> DocumentText:
    """The documents of ``lines`` (read from ``path``) in ``form`` (``auto``: detected, or
    ``docids`` when a docids file is given). ``empty_sentences``: an empty line inside a
    document is an empty sentence (a translation may be empty), not an error; in the ``blank``
    form an empty line is a boundary all the same."""
    if form not in FORMATS + ("auto",):
        raise DataError(f"unknown document form {form!r}; known: auto, {', '.join(FORMATS)}")
    if docids is not None:
        if form not in ("auto", "docids"):
            raise DataError(f"{docids}: a document-id file goes with --boundaries docids (or auto), not {form}")
        form = "docids"
    elif form == "docids":
        raise DataError(f"{path}: --boundaries docids needs a document-id file")
    elif form == "auto":
        form = detect_form(lines)
    if form == "docids":
        documents = parse_docids(path, lines, docids, empty_sentences)
    elif form == "blank":
        documents = parse_blank(path, lines)
    else:
        documents = {"marked": parse_marked, "single": parse_single}[form](path, lines, empty_sentences)
    return DocumentText(path, documents, form)


def read_documents(path: str, form: str = "auto", docids: Optional[str] = None,
                   empty_sentences: bool = False) -> DocumentText:
    """The documents of a file (``-``: standard input); see the module docstring and
    :func:`parse_documents`."""
    return parse_documents(path, read_raw_lines(path), form, docids, empty_sentences)


def check_parallel_text(source: DocumentText, target: DocumentText) -> None:
    """Stop at the first place where the two sides disagree: the number of sentences, where a
    document starts, a ``<d>`` line on one side only."""
    source_starts = _document_starts(source)
    target_starts = _document_starts(target)
    for index, (source_start, target_start) in enumerate(zip(source_starts, target_starts)):
        if source_start[0] != target_start[0]:
            raise DataError(_boundary_message(source, target, index, source_start, target_start))
    if len(source_starts) != len(target_starts):
        longer, shorter = (source, target) if len(source_starts) > len(target_starts) else (target, source)
        starts = _document_starts(longer)
        sentence, line = starts[min(len(source_starts), len(target_starts))]
        raise DataError(f"{longer.path}:{line}: document {min(len(source_starts), len(target_starts)) + 1} starts "
                        f"here (sentence {sentence + 1}), but {shorter.path} has no document boundary there "
                        f"({len(_document_starts(shorter))} documents against {len(starts)})")
    source_count, target_count = len(source.sentences), len(target.sentences)
    if source_count != target_count:
        raise DataError(f"{source.path} has {source_count} sentences but {target.path} has {target_count}")


def _document_starts(text: DocumentText) -> List[Tuple[int, int]]:
    """(index of the first sentence, line that starts it: the ``<d>`` line or the first sentence) per document."""
    starts, sentence = [], 0
    for document in text.documents:
        line = document.boundary_line or document.line_numbers[0]
        starts.append((sentence, line))
        sentence += len(document.sentences)
    return starts


def _boundary_message(source: DocumentText, target: DocumentText, index: int, source_start: Tuple[int, int],
                      target_start: Tuple[int, int]) -> str:
    earlier = min((source, source_start), (target, target_start), key=lambda side: side[1][0])
    later = target if earlier[0] is source else source
    text, (sentence, line) = earlier
    if text.form == "marked" and later.form == "marked":
        return (f"{text.path}:{line}: a {DOCUMENT_MARK} line on one side only: document {index + 1} starts here, "
                f"but {later.path}:{line} is not a {DOCUMENT_MARK} line")
    return (f"{text.path}:{line}: document {index + 1} starts here, at sentence {sentence + 1}, but in "
            f"{later.path} it starts at sentence {max(source_start[0], target_start[0]) + 1}: the two sides "
            f"disagree on where a document starts")


def format_documents(documents: Sequence[Sequence[str]], form: str, names: Sequence[str] = ()) -> str:
    """Sentences grouped by document, as text in ``form`` (``docids``: the sentences only)."""
    out = io.StringIO()
    for index, sentences in enumerate(documents):
        if form == "marked":
            out.write(DOCUMENT_MARK + "\n")
        elif form == "blank" and index > 0:
            out.write("\n")
        for sentence in sentences:
            if "\n" in sentence or "\r" in sentence:
                raise DataError(f"document {index + 1}: a translation holds a line break: {sentence!r}")
            out.write(sentence + "\n")
    return out.getvalue()


def write_documents(path: Optional[str], documents: Sequence[Sequence[str]], form: str,
                    stdout: Optional[TextIO] = None) -> None:
    """Write ``documents`` in ``form`` to ``path`` (whole or not at all), or to standard output
    when ``path`` is None or ``-``."""
    text = format_documents(documents, form)
    if path is None or path == "-":
        stream = stdout or sys.stdout
        stream.write(text)
        stream.flush()
        return
    with atomic_write(path) as handle:
        handle.write(text)
