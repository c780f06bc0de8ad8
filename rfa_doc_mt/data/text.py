"""Language-specific pre- and post-processing of one sentence.

Pre-processing (before BPE): Chinese is segmented with jieba; languages with Moses rules are
tokenized with sacremoses (``escape=False``: no ``&amp;``-style escapes reach the model);
English is then truecased. The synthetic corpus's pseudo-languages ``src``/``tgt`` are
already tokens and pass unchanged.

Truecasing (``first-word``) changes only what post-processing can undo: the first word of a
line (after opening quotes and brackets) is lower-cased when a sacremoses truecaser trained on
the training text has seen it mostly so and only its first letter differs (``The`` -> ``the``,
never ``IBM`` -> ``ibm``); every other word keeps its case. Post-processing upper-cases that
first letter again. Moses' own truecaser also rewrites words inside a sentence to their most
frequent casing (``Los Angeles Times`` -> ``Los Angeles times``) and capitalises after every
``.``/``:``/``?``/``!``, which no detruecaser can undo; corpora prepared with it (``prep.json``
without ``truecasing``, or ``"truecasing": "moses"``) keep it for their own decoding.

Post-processing undoes this in reverse order: sentencepiece decode, detruecase, detokenize.
"""

import json
import logging
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

from .io import DataError, read_text

JIEBA_LANGUAGES = ("zh",)
# Languages for which sacremoses ships Moses non-breaking prefixes.
MOSES_LANGUAGES = (
    "ca", "cs", "de", "el", "en", "es", "et", "fi", "fr", "ga", "hu", "is", "it", "lt", "lv",
    "nl", "pl", "pt", "ro", "ru", "sk", "sl", "sv")
IDENTITY_LANGUAGES = ("src", "tgt")
KNOWN_LANGUAGES = tuple(sorted(JIEBA_LANGUAGES + MOSES_LANGUAGES + IDENTITY_LANGUAGES))
TRUECASED_LANGUAGES = ("en",)

# How a side was tokenized, as recorded in prep.json.
TOKENIZERS = ("jieba", "moses", "identity", "pretokenized", "given")
# How a truecased side was truecased (prep.json "truecasing"); see the module docstring.
TRUECASING = ("first-word", "moses")
FIRST_WORD_TRUECASING = "first-word"
# Tokens that open a sentence without being its first word (Moses' truecaser skips them too).
SENTENCE_OPENERS = frozenset(("(", "[", '"', "'"))


@dataclass
class TextDocument:
    """One document as read from a corpus file, before any processing."""

    name: str
    sentences: List[str]
    # line of the corpus file each sentence came from, for error messages
    line_numbers: List[int] = field(default_factory=list)
    # the line that marks the document's start, where the file has one (``<d>``)
    boundary_line: Optional[int] = None

    def line_of(self, index: int) -> str:
        return str(self.line_numbers[index]) if index < len(self.line_numbers) else "?"


def check_parallel_documents(source_path: str, target_path: str,
                             source: Sequence[TextDocument], target: Sequence[TextDocument]) -> None:
    """Stop unless both sides have the same documents (names, sentence counts), none empty."""
    if len(source) != len(target):
        raise DataError(f"{source_path} has {len(source)} documents but {target_path} has {len(target)}")
    for source_document, target_document in zip(source, target):
        if source_document.name != target_document.name:
            raise DataError(
                f"{source_path}:{source_document.line_of(0)}: document {source_document.name!r} is paired "
                f"with document {target_document.name!r} of {target_path}:{target_document.line_of(0)}")
        if len(source_document.sentences) != len(target_document.sentences):
            raise DataError(
                f"document {source_document.name!r} has {len(source_document.sentences)} sentences in "
                f"{source_path}:{source_document.line_of(0)} but {len(target_document.sentences)} in "
                f"{target_path}:{target_document.line_of(0)}")
        for path, document in ((source_path, source_document), (target_path, target_document)):
            if not document.sentences:
                raise DataError(f"{path}: document {document.name!r} is empty")
            for index, sentence in enumerate(document.sentences):
                if not sentence.strip():
                    raise DataError(f"{path}:{document.line_of(index)}: empty sentence in document {document.name!r}")


def check_language(lang: str, where: str = "") -> str:
    """Return ``lang`` if the pipeline knows it, else stop listing the known codes."""
    if lang not in KNOWN_LANGUAGES:
        prefix = f"{where}: " if where else ""
        raise DataError(
            f"{prefix}unknown language code {lang!r}; known: {', '.join(KNOWN_LANGUAGES)}")
    return lang


# Writing system of each known language that is not written in Latin script.
NON_LATIN_SCRIPTS = {"zh": "Han", "ru": "Cyrillic", "el": "Greek"}


def language_script(lang: str) -> str:
    return NON_LATIN_SCRIPTS.get(check_language(lang), "Latin")


def detect_script(texts: Iterable[str]) -> Optional[str]:
    """The writing system most letters of ``texts`` belong to (Unicode character names:
    Latin, Cyrillic, Greek, Han, ...), or None when they hold no letter."""
    counts = Counter()
    for text in texts:
        for character in text:
            if character.isalpha():
                name = unicodedata.name(character, "")
                counts["Han" if name.startswith("CJK") else name.split(" ", 1)[0].capitalize()] += 1
    return counts.most_common(1)[0][0] if counts else None


def default_tokenizer(lang: str) -> str:
    check_language(lang)
    if lang in JIEBA_LANGUAGES:
        return "jieba"
    if lang in IDENTITY_LANGUAGES:
        return "identity"
    return "moses"


def uses_truecasing(lang: str) -> bool:
    return lang in TRUECASED_LANGUAGES


def _jieba_tokenizer():
    import jieba

    # jieba logs its dictionary loading at DEBUG/INFO on every process start.
    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    return tokenizer


class Preprocessor:
    """Tokenize (and truecase, when a truecasing model is given) one sentence.

    ``tokenizer`` overrides the language default: ``"pretokenized"`` keeps text that is
    already Moses-tokenized (Voita et al.'s OpenSubtitles) as it is, because running Moses
    again would split its tokens further (``Didn 't`` becomes ``Didn ' t``).
    """

    def __init__(self, lang: str, truecase_model: Optional[str] = None, tokenizer: Optional[str] = None,
                 truecasing: str = FIRST_WORD_TRUECASING):
        self.lang = check_language(lang)
        if truecasing not in TRUECASING:
            raise DataError(f"unknown truecasing {truecasing!r}; known: {', '.join(TRUECASING)}")
        self.truecasing = truecasing
        self.tokenizer = tokenizer or default_tokenizer(lang)
        if self.tokenizer not in TOKENIZERS:
            raise DataError(f"unknown tokenizer {self.tokenizer!r}; known: {', '.join(TOKENIZERS)}")
        self.truecase_model = truecase_model
        self._jieba = _jieba_tokenizer() if self.tokenizer == "jieba" else None
        self._moses = None
        if self.tokenizer == "moses":
            from sacremoses import MosesTokenizer

            self._moses = MosesTokenizer(lang=lang)
        self._truecaser = None
        if truecase_model is not None:
            if not os.path.isfile(truecase_model):
                raise DataError(f"{truecase_model}: truecasing model not found")
            from sacremoses import MosesTruecaser

            self._truecaser = MosesTruecaser(load_from=truecase_model)

    def tokenize(self, sentence: str) -> str:
        if self._jieba is not None:
            words = self._jieba.lcut(sentence.strip())
            # jieba returns the spaces of the input as tokens of their own
            return " ".join(word.strip() for word in words if word.strip())
        if self._moses is not None:
            return self._moses.tokenize(sentence.strip(), escape=False, return_str=True)
        return " ".join(sentence.split())

    def truecase(self, tokenized: str) -> str:
        if self._truecaser is None:
            return tokenized
        if self.truecasing == "moses":
            return self._truecaser.truecase(tokenized, return_str=True)
        return truecase_first_word(tokenized, self._truecaser.model["best"])

    def __call__(self, sentence: str) -> str:
        return self.truecase(self.tokenize(sentence))


def train_truecaser(tokenized_sentences: Iterable[str], model_path: str, processes: int = 1) -> str:
    """Train a Moses truecaser on tokenized text and save it to ``model_path``."""
    from sacremoses import MosesTruecaser

    documents = [sentence.split() for sentence in tokenized_sentences]
    truecaser = MosesTruecaser()
    truecaser.train(documents, processes=processes)
    # save_model writes in place; go through a temporary name like every other output
    partial_path = model_path + ".partial"
    try:
        truecaser.save_model(partial_path)
        os.replace(partial_path, model_path)
    except BaseException:
        if os.path.exists(partial_path):
            os.unlink(partial_path)
        raise
    return model_path


def _first_word(tokens: Sequence[str]) -> Optional[int]:
    return next((index for index, token in enumerate(tokens) if token not in SENTENCE_OPENERS), None)


def truecase_first_word(tokenized: str, best_casing: Dict[str, str]) -> str:
    """Lower-case the first letter of the line's first word when ``best_casing`` (a sacremoses
    truecaser's ``model["best"]``: lower-cased word -> most frequent casing) says so and nothing
    else of the word differs, so that :func:`capitalize_first_word` gives the line back."""
    tokens = tokenized.split()
    index = _first_word(tokens)
    if index is not None:
        word = tokens[index]
        lowered = word[:1].lower() + word[1:]
        if lowered != word and best_casing.get(word.lower()) == lowered:
            tokens[index] = lowered
    return " ".join(tokens)


def capitalize_first_word(tokenized: str) -> str:
    """Upper-case the first letter of the line's first word (the inverse of :func:`truecase_first_word`)."""
    tokens = tokenized.split()
    index = _first_word(tokens)
    if index is not None:
        tokens[index] = tokens[index][:1].upper() + tokens[index][1:]
    return " ".join(tokens)


# A space jieba inserted is kept only between two Latin letters/digits ("New York", "3 D").
_CHINESE_JOINED_SPACE = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")


def detokenize_chinese(tokenized: str) -> str:
    return _CHINESE_JOINED_SPACE.sub("", " ".join(tokenized.split()))


class Postprocessor:
    """Undo the pre-processing of one output sentence: pieces → tokens → text.

    ``truecased`` defaults to whether the language is truecased by :class:`Preprocessor`;
    ``detokenize=False`` leaves tokenized text (for references that are tokenized too).
    """

    def __init__(self, lang: str, sentencepiece_model: Optional[str] = None,
                 truecased: Optional[bool] = None, detokenize: bool = True,
                 truecasing: str = FIRST_WORD_TRUECASING):
        self.lang = check_language(lang)
        self._sentencepiece = None
        if sentencepiece_model is not None:
            if not os.path.isfile(sentencepiece_model):
                raise DataError(f"{sentencepiece_model}: sentencepiece model not found")
            import sentencepiece

            self._sentencepiece = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
        self.truecased = uses_truecasing(lang) if truecased is None else truecased
        if truecasing not in TRUECASING:
            raise DataError(f"unknown truecasing {truecasing!r}; known: {', '.join(TRUECASING)}")
        self._detruecase = None
        if self.truecased and truecasing == "moses":
            from sacremoses import MosesDetruecaser

            detruecaser = MosesDetruecaser()
            self._detruecase = lambda text: detruecaser.detruecase(text, return_str=True)
        elif self.truecased:
            self._detruecase = capitalize_first_word
        self._detokenize = None
        if detokenize and lang in JIEBA_LANGUAGES:
            self._detokenize = detokenize_chinese
        elif detokenize and lang in MOSES_LANGUAGES:
            from sacremoses import MosesDetokenizer

            moses = MosesDetokenizer(lang=lang)
            self._detokenize = lambda text: moses.detokenize(text.split(), return_str=True, unescape=False)

    def decode_pieces(self, text: str) -> str:
        if self._sentencepiece is None:
            return text
        return self._sentencepiece.decode_pieces(text.split())

    def __call__(self, text: str) -> str:
        text = self.decode_pieces(text)
        if self._detruecase is not None:
            text = self._detruecase(text)
        if self._detokenize is not None:
            text = self._detokenize(text)
        return text


def truecasing_of(prep: dict) -> str:
    """How a corpus was truecased: corpora prepared before ``first-word`` used Moses' truecaser."""
    return prep.get("truecasing", "moses")


def load_prep(prep_dir: str) -> dict:
    """Read ``prep.json`` of a prepared corpus."""
    path = os.path.join(prep_dir, "prep.json")
    if not os.path.isfile(path):
        raise DataError(f"{path}: not found (is {prep_dir} a corpus written by rfa_doc_mt.data.prepare?)")
    try:
        prep = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{error.lineno}: invalid JSON: {error.msg}")
    for key in ("source_lang", "target_lang", "tokenizers"):
        if key not in prep:
            raise DataError(f"{path}: missing field {key!r}")
    return prep


class SentencePieceEncoder:
    """Tokenized sentence → space-separated sentencepiece pieces."""

    def __init__(self, model_path: str):
        if not os.path.isfile(model_path):
            raise DataError(f"{model_path}: sentencepiece model not found")
        import sentencepiece

        self._processor = sentencepiece.SentencePieceProcessor(model_file=model_path)

    def __call__(self, sentence: str) -> str:
        return " ".join(self._processor.encode(sentence, out_type=str))

    def encode_all(self, sentences: Sequence[str]) -> List[str]:
        return [" ".join(pieces) for pieces in self._processor.encode(list(sentences), out_type=str)]
