"""Readers for WIT3 (IWSLT TED) files: one talk = one document.

* ``IWSLT15.TED.<set>.<pair>.<lang>.xml``: ``<doc docid=..>`` elements holding aligned
  ``<seg id=..>`` segments (a segment may hold more than one sentence).
* ``train.tags.<pair>.<lang>``: plain text lines; each talk starts with metadata lines
  (``<url>``, ``<keywords>``, ``<speaker>``, ``<talkid>``, ``<title>``, ``<description>``,
  ``<reviewer>``, ``<translator>``, ...), then its transcript, one or more sentences a line.
"""

import glob
import os
import re
from typing import Dict, List, Sequence, Tuple
from xml.parsers import expat

from .io import DataError, text_lines
from .text import TextDocument, check_parallel_documents

DEV_SETS = ("dev2010",)
TEST_SETS = ("tst2010", "tst2011", "tst2012", "tst2013")


def read_wit3_xml(path: str) -> List[TextDocument]:
    """Documents of a WIT3 XML file, named by ``docid``, one sentence per segment."""
    return _parse_wit3_xml(path)[0]


def _parse_wit3_xml(path: str) -> Tuple[List[TextDocument], Dict[str, List[str]]]:
    """Documents and, per docid, the segment ids in file order."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    documents: List[TextDocument] = []
    segment_ids: Dict[str, List[str]] = {}
    state = {"document": None, "segment_text": None, "segment_id": None, "segment_line": 0}
    parser = expat.ParserCreate("UTF-8")

    def start(tag: str, attributes: Dict[str, str]) -> None:
        line = parser.CurrentLineNumber
        if tag == "doc":
            if state["document"] is not None:
                raise DataError(f"{path}:{line}: <doc> inside another <doc>")
            name = attributes.get("docid", "").strip()
            if not name:
                raise DataError(f"{path}:{line}: <doc> without a docid")
            if name in segment_ids:
                raise DataError(f"{path}:{line}: docid {name!r} appears twice")
            state["document"] = TextDocument(name, [], [])
            segment_ids[name] = []
        elif tag == "seg":
            if state["document"] is None:
                raise DataError(f"{path}:{line}: <seg> outside a <doc>")
            state["segment_text"] = []
            state["segment_id"] = attributes.get("id", "").strip()
            state["segment_line"] = line

    def text(data: str) -> None:
        if state["segment_text"] is not None:
            state["segment_text"].append(data)

    def end(tag: str) -> None:
        document = state["document"]
        if tag == "seg":
            sentence = " ".join("".join(state["segment_text"]).split())
            line = state["segment_line"]
            if not sentence:
                raise DataError(f"{path}:{line}: empty segment in document {document.name!r}")
            ids = segment_ids[document.name]
            if state["segment_id"] in ids:
                raise DataError(f"{path}:{line}: segment id {state['segment_id']!r} repeated in document "
                                f"{document.name!r}")
            ids.append(state["segment_id"])
            document.sentences.append(sentence)
            document.line_numbers.append(line)
            state["segment_text"] = None
        elif tag == "doc":
            if not document.sentences:
                raise DataError(f"{path}:{parser.CurrentLineNumber}: document {document.name!r} has no segments")
            documents.append(document)
            state["document"] = None

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        with open(path, "rb") as handle:
            parser.ParseFile(handle)
    except expat.ExpatError as error:
        raise DataError(f"{path}:{error.lineno}: malformed XML: {expat.ErrorString(error.code)}")
    if not documents:
        raise DataError(f"{path}: no <doc> elements")
    return documents, segment_ids


def read_parallel_wit3_xml(source_path: str, target_path: str) -> Tuple[List[TextDocument], List[TextDocument]]:
    """Both sides of one WIT3 set, checked to hold the same talks and segment ids."""
    source, source_ids = _parse_wit3_xml(source_path)
    target, target_ids = _parse_wit3_xml(target_path)
    check_parallel_documents(source_path, target_path, source, target)
    for document in source:
        if source_ids[document.name] != target_ids[document.name]:
            pairs = zip(source_ids[document.name], target_ids[document.name])
            mismatch = next(i for i, (a, b) in enumerate(pairs) if a != b)
            raise DataError(
                f"{source_path}:{document.line_of(mismatch)}: segment id {source_ids[document.name][mismatch]!r} of "
                f"document {document.name!r} faces segment id {target_ids[document.name][mismatch]!r} in {target_path}")
    return source, target


_TAG_LINE = re.compile(r"<(\w+)[^>]*>(.*?)(?:</\1>)?$")


def read_train_tags(path: str) -> List[TextDocument]:
    """Talks of a WIT3 ``train.tags`` file, named by ``<talkid>`` (``talk<n>`` without one).

    Empty transcript lines are kept (as empty sentences) so that both sides stay aligned
    line by line; :func:`read_parallel_train_tags` decides what to do with them.
    """
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    documents: List[TextDocument] = []
    tags: Dict[str, str] = {}
    current = TextDocument("", [], [])

    def finish() -> None:
        if current.sentences:
            current.name = tags.get("talkid") or f"talk{len(documents) + 1}"
            if "\t" in current.name:
                raise DataError(f"{path}:{current.line_of(0)}: talk id {current.name!r} contains a tab")
            documents.append(TextDocument(current.name, list(current.sentences), list(current.line_numbers)))

    for line_number, line in text_lines(path):
        stripped = line.strip()
        if stripped.startswith("<"):
            # the first metadata line after transcript lines opens the next talk
            if current.sentences:
                finish()
                tags = {}
                current = TextDocument("", [], [])
            match = _TAG_LINE.match(stripped)
            if match:
                tags[match.group(1).lower()] = match.group(2).strip()
        else:
            current.sentences.append(" ".join(stripped.split()))
            current.line_numbers.append(line_number)
    finish()
    if not documents:
        raise DataError(f"{path}: no transcript lines")
    return documents


def read_parallel_train_tags(source_path: str, target_path: str) -> Tuple[List[TextDocument], List[TextDocument], int]:
    """Both sides of ``train.tags``: same talks, same line counts; line pairs where either
    side is empty are dropped (their number is returned) as they carry no translation."""
    source = read_train_tags(source_path)
    target = read_train_tags(target_path)
    if len(source) != len(target):
        raise DataError(f"{source_path} has {len(source)} talks but {target_path} has {len(target)}")
    kept_source, kept_target, dropped = [], [], 0
    for source_document, target_document in zip(source, target):
        if (len(source_document.sentences) != len(target_document.sentences)
                or source_document.name != target_document.name):
            check_parallel_documents(source_path, target_path, [source_document], [target_document])
        pairs = [i for i, (s, t) in enumerate(zip(source_document.sentences, target_document.sentences)) if s and t]
        dropped += len(source_document.sentences) - len(pairs)
        if pairs:
            kept_source.append(_subset(source_document, pairs))
            kept_target.append(_subset(target_document, pairs))
    check_parallel_documents(source_path, target_path, kept_source, kept_target)
    return kept_source, kept_target, dropped


def _subset(document: TextDocument, indices: Sequence[int]) -> TextDocument:
    return TextDocument(document.name, [document.sentences[i] for i in indices],
                        [document.line_numbers[i] for i in indices])


def find_wit3_xml(wit3_dir: str, set_name: str, source_lang: str, target_lang: str, lang: str) -> str:
    """Path of ``IWSLT*.TED.<set>.<pair>.<lang>.xml`` for either direction of the pair."""
    candidates = []
    for pair in (f"{source_lang}-{target_lang}", f"{target_lang}-{source_lang}"):
        candidates += glob.glob(os.path.join(wit3_dir, f"IWSLT*.TED.{set_name}.{pair}.{lang}.xml"))
    if not candidates:
        expected = os.path.join(wit3_dir, f"IWSLT15.TED.{set_name}.{source_lang}-{target_lang}.{lang}.xml")
        raise DataError(f"{expected}: file not found (no IWSLT*.TED.{set_name} file for {source_lang}-{target_lang})")
    # several campaigns' copies of the same set: take the newest (IWSLT17 > IWSLT15)
    return sorted(candidates)[-1]


def find_train_tags(wit3_dir: str, source_lang: str, target_lang: str) -> Tuple[str, str]:
    """Paths of ``train.tags`` for both sides, or ``("", "")`` when neither side exists."""
    for pair in (f"{source_lang}-{target_lang}", f"{target_lang}-{source_lang}"):
        source_path = os.path.join(wit3_dir, f"train.tags.{pair}.{source_lang}")
        target_path = os.path.join(wit3_dir, f"train.tags.{pair}.{target_lang}")
        if os.path.isfile(source_path) or os.path.isfile(target_path):
            for path in (source_path, target_path):
                if not os.path.isfile(path):
                    raise DataError(f"{path}: file not found (the other side of train.tags exists)")
            return source_path, target_path
    return "", ""


def wit3_campaign(file_name: str) -> str:
    """``IWSLT17.TED.tst2016.zh-en.zh.xml`` -> ``IWSLT17``."""
    return os.path.basename(file_name).split(".", 1)[0]


def describe_sets(set_names: Sequence[str], files: Sequence[str]) -> str:
    """What a split read by :func:`read_wit3_sets` holds, by campaign: ``IWSLT15 dev2010``,
    ``IWSLT17 tst2016+tst2017`` (``files``: two per set, source side first)."""
    groups: List[Tuple[str, List[str]]] = []
    for set_name, source_file in zip(set_names, files[::2]):
        campaign = wit3_campaign(source_file)
        if groups and groups[-1][0] == campaign:
            groups[-1][1].append(set_name)
        else:
            groups.append((campaign, [set_name]))
    return " + ".join(f"{campaign} {'+'.join(names)}" for campaign, names in groups)


def read_wit3_sets(wit3_dir: str, set_names: Sequence[str], source_lang: str, target_lang: str):
    """Talks of several WIT3 sets concatenated: (source, target, the files read)."""
    source, target, files = [], [], []
    for set_name in set_names:
        source_path = find_wit3_xml(wit3_dir, set_name, source_lang, target_lang, source_lang)
        target_path = find_wit3_xml(wit3_dir, set_name, source_lang, target_lang, target_lang)
        set_source, set_target = read_parallel_wit3_xml(source_path, target_path)
        source += set_source
        target += set_target
        files += [os.path.basename(source_path), os.path.basename(target_path)]
    return source, target, files
