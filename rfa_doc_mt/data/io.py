"""File conventions shared by every pipeline step.

* Text: one sentence per line, UTF-8 (a byte that is not UTF-8 stops with its file and line).
* Documents: a sidecar file ``<split>.docs`` beside the text, one line per document,
  ``<number of sentences>\t<document name>``, in the order of the text. The number of
  sentences summed over the file must equal the number of lines of the text.
* Nothing is written half-way: :func:`atomic_write` writes to a temporary name in the
  destination directory and renames it into place when the block succeeds.
* Bad input stops with a :class:`DataError`, a failed step (not the input's fault) with a
  :class:`PrepareError`; steps report progress with :func:`log`.
"""

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from typing import Iterator, List, Sequence, Tuple

_UMASK = os.umask(0)
os.umask(_UMASK)


class DataError(ValueError):
    """Bad input data; the message names the file and, where known, the line."""


class PrepareError(RuntimeError):
    """A step of the pipeline (not the input data) failed, e.g. fairseq-preprocess."""


def log(message: str) -> None:
    """A progress line of a pipeline step, on standard output."""
    print(message, flush=True)


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """Open ``path`` for writing through a temporary file renamed into place on success."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it private; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256(path: str) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Document:
    name: str
    num_sentences: int


def _not_utf8(path: str, data: bytes, offset: int, first_line: int = 1) -> str:
    """Message for the byte at ``offset`` of ``data``, whose first line is line ``first_line``."""
    line_number = first_line + data.count(b"\n", 0, offset)
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return (f"{path}:{line_number}: not UTF-8 (byte 0x{data[offset]:02x} at column {column}); "
            f"convert the file to UTF-8 first (e.g. iconv -f LATIN1 -t UTF-8)")


def _locate_decode_error(path: str) -> str:
    """Message naming the line of the first byte of ``path`` that is not UTF-8."""
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return _not_utf8(path, line, error.start, first_line=line_number)
    return f"{path}: not UTF-8"


def text_lines(path: str) -> Iterator[Tuple[int, str]]:
    """``(line number, line without its terminator)`` of a UTF-8 text file, from 1."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    with open(path, encoding="utf-8") as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                yield line_number, line.rstrip("\n")
        except UnicodeDecodeError:
            # the text layer decodes in chunks: find the line in the bytes
            raise DataError(_locate_decode_error(path)) from None


def read_text(path: str) -> str:
    """A whole UTF-8 file (JSON), stopping with the line of a byte that is not UTF-8."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(_not_utf8(path, data, error.start)) from None


def read_lines(path: str) -> List[str]:
    """Read a sentence-per-line file (without line terminators); stop clearly if missing."""
    return [line for _, line in text_lines(path)]


def write_lines(path: str, lines: Sequence[str]) -> None:
    with atomic_write(path) as handle:
        for line in lines:
            if "\n" in line:
                raise DataError(f"{path}: a sentence contains a newline: {line!r}")
            handle.write(line + "\n")


def read_docs(path: str, num_sentences: int = None) -> List[Document]:
    """Read a ``.docs`` boundary file; check it against ``num_sentences`` when given."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: document boundary file not found")
    documents = []
    for line_number, line in text_lines(path):
        fields = line.split("\t", 1)
        try:
            count = int(fields[0])
        except ValueError:
            raise DataError(f"{path}:{line_number}: expected '<number of sentences>\\t<name>', got {line.strip()!r}")
        if count <= 0:
            raise DataError(f"{path}:{line_number}: empty document (0 sentences)")
        name = fields[1] if len(fields) > 1 and fields[1] else f"doc{line_number}"
        documents.append(Document(name, count))
    if not documents:
        raise DataError(f"{path}: no documents")
    if num_sentences is not None:
        total = sum(d.num_sentences for d in documents)
        if total != num_sentences:
            raise DataError(
                f"{path}: boundaries cover {total} sentences but the text has {num_sentences} lines")
    return documents


def write_docs(path: str, documents: Sequence[Document]) -> None:
    for document in documents:
        if document.num_sentences <= 0:
            raise DataError(f"{path}: document {document.name!r} is empty")
        if "\t" in document.name or "\n" in document.name:
            raise DataError(f"{path}: document name {document.name!r} contains a tab or newline")
    with atomic_write(path) as handle:
        for document in documents:
            handle.write(f"{document.num_sentences}\t{document.name}\n")


def document_offsets(documents: Sequence[Document]) -> List[int]:
    """Index of each document's first sentence, plus the total at the end."""
    offsets = [0]
    for document in documents:
        offsets.append(offsets[-1] + document.num_sentences)
    return offsets


def check_parallel(source_path: str, target_path: str, source: Sequence[str], target: Sequence[str]) -> None:
    """Stop when two sides of a parallel text disagree in length or hold empty lines."""
    if len(source) != len(target):
        raise DataError(
            f"{source_path} has {len(source)} lines but {target_path} has {len(target)}")
    for path, lines in ((source_path, source), (target_path, target)):
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                raise DataError(f"{path}:{line_number}: empty sentence")
