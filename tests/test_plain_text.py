"""Raw document-level text: the three boundary forms, messy files, and the refusals."""

import pytest

from rfa_doc_mt.data.io import DataError
from rfa_doc_mt.data.plain_text import (
    check_parallel_text,
    format_documents,
    parse_documents,
    read_documents,
    write_documents,
)


def write_bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def shape(text):
    return [document.sentences for document in text.documents]


MARKED = "<d>\nOne a.\nOne b.\n<d>\nTwo a.\n"
BLANK = "One a.\nOne b.\n\nTwo a.\n"


@pytest.mark.parametrize("text, form", [(MARKED, "marked"), (BLANK, "blank"), ("One a.\nOne b.\nTwo a.\n", "single")])
def test_each_form_is_detected(tmp_path, text, form):
    read = read_documents(write_bytes(tmp_path / "f.txt", text.encode()))
    assert read.form == form
    expected = [["One a.", "One b."], ["Two a."]] if form != "single" else [["One a.", "One b.", "Two a."]]
    assert shape(read) == expected


def test_messy_files_keep_their_counts_and_boundaries(tmp_path):
    """CRLF, a byte-order mark, spaces at line ends and inside, a <d> with trailing white space,
    no final newline, empty lines at the end: the same documents, sentences stripped at the ends only."""
    clean = read_documents(write_bytes(tmp_path / "clean.txt", MARKED.encode()))
    messy_text = "\ufeff<d>\r\n  One a.  \r\nOne   b.\t\r\n<d> \t\r\nTwo a.\r\n\r\n\r\n"
    messy = read_documents(write_bytes(tmp_path / "messy.txt", messy_text.encode("utf-8")))
    assert messy.form == "marked"
    assert [len(s) for s in shape(messy)] == [len(s) for s in shape(clean)]
    assert shape(messy) == [["One a.", "One   b."], ["Two a."]]
    no_newline = read_documents(write_bytes(tmp_path / "n.txt", BLANK.rstrip("\n").encode()))
    assert shape(no_newline) == [["One a.", "One b."], ["Two a."]]
    assert no_newline.form == "blank"


def test_docids_group_consecutive_lines(tmp_path):
    text = write_bytes(tmp_path / "t.txt", b"a\nb\nc\nd\n")
    ids = write_bytes(tmp_path / "t.docids", b"x\nx\ny\nz\n")
    read = read_documents(text, docids=ids)
    assert read.form == "docids"
    assert [d.name for d in read.documents] == ["x", "y", "z"]
    assert shape(read) == [["a", "b"], ["c"], ["d"]]


@pytest.mark.parametrize("text, message", [
    (b"<d>\na\n<d>\n<d>\nb\n", "f.txt:3: empty document"),
    (b"<d>\na\n<d>\n", "f.txt:3: empty document"),
    (b"a\n<d>\nb\n", "f.txt:1: text before the first <d>"),
    (b"<d>\na\n\nb\n", "f.txt:3: empty line inside document 1"),
    (b"a\n\n\nb\n", "f.txt:3: empty document (two empty lines in a row"),
    (b"\na\n\nb\n", "f.txt:1: empty document"),
    (b"<d>\na\n\xff\n", "f.txt:3: not UTF-8"),
    (b"", "the file is empty"),
    (b"\n\n", "the file is empty"),
])
def test_bad_files_stop_with_file_and_line(tmp_path, text, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        read_documents(write_bytes(tmp_path / "f.txt", text))


def test_a_document_id_that_comes_back_is_refused(tmp_path):
    text = write_bytes(tmp_path / "t.txt", b"a\nb\nc\n")
    ids = write_bytes(tmp_path / "t.docids", b"x\ny\nx\n")
    with pytest.raises(DataError, match=r"t.docids:3: document id 'x' comes back .* started at line 1"):
        read_documents(text, docids=ids)
    short = write_bytes(tmp_path / "s.docids", b"x\ny\n")
    with pytest.raises(DataError, match="2 document ids but .* 3 lines"):
        read_documents(text, docids=short)


def sides(tmp_path, source: bytes, target: bytes):
    return (read_documents(write_bytes(tmp_path / "s.en", source)),
            read_documents(write_bytes(tmp_path / "t.de", target)))


def test_parallel_sides_must_agree(tmp_path):
    check_parallel_text(*sides(tmp_path, MARKED.encode(), "<d>\nEins a.\nEins b.\n<d>\nZwei a.\n".encode()))
    # a <d> line on one side only, at line 3 of the source
    with pytest.raises(DataError, match=r"s.en:3: a <d> line on one side only: .*t.de:3 is not a <d> line"):
        check_parallel_text(*sides(tmp_path, b"<d>\na\n<d>\nb\nc\n", b"<d>\nA\nX\n<d>\nB\n"))
    # the same number of sentences, a boundary in another place
    with pytest.raises(DataError, match="disagree on where a document starts"):
        check_parallel_text(*sides(tmp_path, b"a\nb\n\nc\n", b"A\n\nB\nC\n"))
    # the target has a document less
    with pytest.raises(DataError, match=r"s.en:4: document 2 starts here .* no document boundary"):
        check_parallel_text(*sides(tmp_path, b"<d>\na\nb\n<d>\nc\n", b"A\nB\nC\n"))
    with pytest.raises(DataError, match="3 sentences but .* has 2"):
        check_parallel_text(*sides(tmp_path, b"a\nb\nc\n", b"A\nB\n"))


@pytest.mark.parametrize("text", [MARKED, BLANK, "One a.\nOne b.\nTwo a.\n"])
def test_writing_back_keeps_the_form(tmp_path, text):
    read = parse_documents("f", text.splitlines())
    assert format_documents(shape(read), read.form) == text
    path = tmp_path / "out.txt"
    write_documents(str(path), shape(read), read.form)
    assert path.read_text() == text


def test_translations_may_be_empty_sentences(tmp_path):
    """A model may give an empty translation: read back as an empty sentence where asked, last line included."""
    path = write_bytes(tmp_path / "hyp.txt", b"<d>\na\n\n<d>\nb\n\n")
    with pytest.raises(DataError, match="hyp.txt:3: empty line inside document 1"):
        read_documents(path)
    assert shape(read_documents(path, empty_sentences=True)) == [["a", ""], ["b", ""]]
    ids = write_bytes(tmp_path / "hyp.docids", b"x\nx\ny\n")
    assert shape(read_documents(write_bytes(tmp_path / "h2.txt", b"a\n\nb\n"), docids=ids,
                                empty_sentences=True)) == [["a", ""], ["b"]]
