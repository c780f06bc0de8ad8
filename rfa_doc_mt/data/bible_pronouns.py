"""A contrastive test of context use built from the Bible corpus itself: English -> Spanish
third-person pronouns whose gender the English leaves open.

English ``it``, ``they`` and ``them`` have no gender; their Spanish translation has one
(``él``/``ella``, ``ellos``/``ellas``, ``lo``/``la``, ``los``/``las``), set by the antecedent, which
may lie in an earlier verse. From the held-out chapters of a prepared Bible corpus, valid and test
(no model trains on them; the untokenized verses of the same run,
:func:`rfa_doc_mt.data.bible.split_chapters`), a verse becomes an example when

1. its Spanish holds exactly one third-person pronoun whose gender can be flipped
   (:func:`find_pronouns`): ``él``, ``ella``, ``ellos``, ``ellas`` (the module writes the pronoun
   without its accent in capitals, ``El``: taken as one before a verb, :meth:`SpanishLexicon.kind`);
   ``lo``, ``la``, ``los``, ``las`` standing alone before a verb (before a noun they are articles);
   the same as enclitics on a verb (``tómalo``, ``hacerla``, ``dándolos``, ``tomólas``:
   :meth:`SpanishLexicon.clitic_host`). A word that may be either pronoun or article, or a gendered
   word that agrees with the pronoun right beside it (``ellos mismos``), refuses the verse;
2. its English leaves that pronoun's gender open (:func:`english_reason`): it has ``it`` for a
   singular pronoun, ``they``/``them``/``themselves`` for a plural one, and no gendered English
   pronoun the Spanish one could translate (``he``/``him``/``she``/``her`` for ``él``/``ella``;
   ``him``/``her`` for an object clitic, whose subject ``he`` is another word). ``its`` and
   ``their`` are not enough: Spanish says ``su``, which has no gender;
3. it is not the first verse of its chapter: every example carries context (up to
   :data:`CONTEXT_VERSES` verses before it, as Voita et al.'s examples: what a model of L = 4
   sentences reads).

The contrastive variant is the reference with that pronoun's gender flipped (:func:`flip`):
``él``<->``ella``, ``ellos``<->``ellas``, ``lo``<->``la``, ``los``<->``las``, enclitics too (``tómalo``
-> ``tómala``: the stress does not move), casing kept, ``Ella`` -> ``El`` where the module writes
capitals without accents. Examples are written in Voita et al.'s JSON (:mod:`.voita`), split in two
phenomena by where the antecedent can be (:func:`antecedent_distance`): ``pronoun_gender_verse``
where a noun of the pronoun's gender and number (by its determiner there, or by those the text
gives it elsewhere: :meth:`SpanishLexicon.noun_gender`) comes earlier in the same verse,
``pronoun_gender_context`` where none does (the antecedent is in the context, further back, or a
name or a noun the text never writes with a determiner: the heuristic cannot tell which).
``ctx_dist`` is 0 for the first; for the second, the nearest context verse holding a noun of that
gender and number (a candidate, not necessarily the antecedent), or :data:`BEYOND_CONTEXT` when
none of the verses carried holds one.

No Bible text is quoted here: the examples in comments are invented or single words.
"""

import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .contrastive_formats import DEFAULT_CONTEXT_SENTENCES
from .voita import join_sentences, write_contrastive

LANGUAGE_PAIR = ("en", "es")
CONTEXT_VERSES = DEFAULT_CONTEXT_SENTENCES
BEYOND_CONTEXT = CONTEXT_VERSES + 1  # ctx_dist when no verse carried holds a noun of the pronoun's gender
VERSE, CONTEXT = "verse", "context"
PHENOMENA = {VERSE: "pronoun_gender_verse", CONTEXT: "pronoun_gender_context"}

MASCULINE, FEMININE, SINGULAR, PLURAL = "masculine", "feminine", "singular", "plural"
STRESSED = {"él": (MASCULINE, SINGULAR), "ella": (FEMININE, SINGULAR), "ellos": (MASCULINE, PLURAL),
            "ellas": (FEMININE, PLURAL)}
CLITICS = {"lo": (MASCULINE, SINGULAR), "la": (FEMININE, SINGULAR), "los": (MASCULINE, PLURAL),
           "las": (FEMININE, PLURAL)}
FLIPPED = {"él": "ella", "ella": "él", "ellos": "ellas", "ellas": "ellos", "lo": "la", "la": "lo", "los": "las",
           "las": "los"}
# Determiners of a noun phrase by gender and number (la, los, las: where they are articles)
DETERMINERS = {
    (MASCULINE, SINGULAR): ("el", "del", "al", "un", "este", "ese", "aquel"),
    (FEMININE, SINGULAR): ("la", "una", "esta", "esa", "aquella"),
    (MASCULINE, PLURAL): ("los", "unos", "estos", "esos", "aquellos"),
    (FEMININE, PLURAL): ("las", "unas", "estas", "esas", "aquellas"),
}
# Feminine nouns starting with a stressed "a" take el/un (el agua, un alma): after these, a noun
# starting with a/ha counts by what the module's other determiners of it say
MASCULINE_FORMS_OF_FEMININE = ("el", "del", "al", "un")
# Words after which only a verb can follow (clitics, "no"), and determiners, after which a noun
# (or adjective) follows: the module's own text says which a word is (SpanishLexicon)
VERB_CUES = frozenset(("se", "le", "les", "me", "te", "nos", "os", "no", "yo", "tú"))
ARTICLE_CUES = frozenset(("la", "los", "las"))
NOUN_CUES = frozenset(("el", "un", "una", "unos", "unas", "mi", "tu", "su", "mis", "tus", "sus", "este", "esta",
                       "estos", "estas", "ese", "esa", "esos", "esas", "aquel", "aquella", "aquellos", "aquellas",
                       "del", "al", "nuestro", "nuestra", "vuestro", "vuestra", "cada"))
# Endings only verbs have (future, preterite, an accented last vowel), lower case
VERB_ENDING = re.compile(r"(?:[áéíó]|rás|rán|remos|aron|ieron|eron|áis|éis)$")
# Imperfect and future subjunctive endings (the Reina-Valera's laws: "si alguno lo hiriere"), with
# the infinitive endings of their verbs
SUBJUNCTIVE_ENDINGS = tuple((ending + person, infinitives) for ending, infinitives in (
    ("ase", ("ar",)), ("are", ("ar",)), ("iese", ("er", "ir")), ("iere", ("er", "ir")))
    for person in ("", "n", "s", "is"))
VERB_EVIDENCE = 2  # a word is a verb on its text's evidence when seen this often after VERB_CUES ...
VERB_MARGIN = 10  # ... and this many times as often as after NOUN_CUES
NON_GENDERED_CLITICS = ("me", "te", "se", "nos", "os", "le", "les")
IRREGULAR_IMPERATIVES = frozenset(("pon", "haz", "di", "ten", "sal", "ven", "da"))
NEUTER_ARTICLE_RELATIVES = frozenset(("que", "cual"))
NOUN_EVIDENCE = 2  # determiners seen before a word to take its gender from them ...
NOUN_AGREEMENT = 0.8  # ... this share of them of one gender and number
# words ending like an enclitic that are other pronouns or determiners (el-lo, aquel-la)
NOT_ENCLITIC = frozenset(("ello", "ella", "ellas", "ellos", "aquella", "aquellas", "aquellos"))
# gendered words that would agree with the pronoun right beside it (ellos mismos, todas ellas)
AGREEING = frozenset(("mismo", "misma", "mismos", "mismas", "todo", "toda", "todos", "todas", "solo", "sola",
                      "solos", "solas", "ambos", "ambas", "juntos", "juntas"))

ENGLISH_OPEN = {SINGULAR: ("it",), PLURAL: ("they", "them", "themselves")}
ENGLISH_SUBJECT_GENDERED = ("he", "she")
ENGLISH_OBJECT_GENDERED = ("him", "himself", "her", "hers", "herself")

STRESSED_FORM, PROCLITIC, ENCLITIC = "stressed", "proclitic", "enclitic"
VERB, NOUN, UNSURE = "verb", "noun", "unsure"

# Why a held-out verse is not an example, in the order they are checked (a verse counts under the first)
NO_PRONOUN = "no third-person pronoun of a gender to flip in the Spanish"
UNSURE_WORD = "a word that may be a clitic pronoun or an article (la, lo, los, las, El before a word of either kind)"
TWO_PRONOUNS = "two or more such pronouns in the Spanish"
AGREEMENT = "a gendered word agreeing with the pronoun right beside it (mismo, todos, solo, ...)"
ENGLISH_NO_OPEN = "no English it (singular) or they/them/themselves (plural) of the pronoun's number"
ENGLISH_GENDERED = "a gendered English pronoun the Spanish one could translate (he/him/she/her ...)"
FIRST_VERSE = "first verse of its chapter (no context to carry)"
REFUSALS = (NO_PRONOUN, UNSURE_WORD, TWO_PRONOUNS, AGREEMENT, ENGLISH_NO_OPEN, ENGLISH_GENDERED, FIRST_VERSE)

_WORD = re.compile(r"\w+")


def strip_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def _cased(word: str, like: str) -> str:
    """``word`` in the casing of ``like`` (all capitals, a capital first, lower case)."""
    if len(like) > 1 and like.isupper():
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


class SpanishLexicon:
    """What a module's own Spanish text says about its words: how often each follows a word only
    a verb can follow (a clitic, ``no``) and one a noun follows (a determiner), which determiners
    each follows, and which words it writes (accents stripped, for forms that gain an accent
    with an enclitic: ``toma`` -> ``tómalo``)."""

    def __init__(self, sentences: Iterable[str]):
        self.words: Counter = Counter()  # as written
        self.plain: set = set()  # lower case, accents stripped
        self.after_verb_cue: Counter = Counter()
        self.after_noun_cue: Counter = Counter()
        self.after_article: Counter = Counter()  # after la, los, las: articles or pronouns
        self.determiner_pairs: Counter = Counter()  # (determiner, word), lower case
        for sentence in sentences:
            words = _WORD.findall(sentence)
            self.words.update(words)
            for written, following in zip(words, words[1:]):
                before, word = written.lower(), following.lower()
                if before in VERB_CUES:
                    self.after_verb_cue[word] += 1
                # a capital El may be the pronoun (the module writes no accent on capitals)
                if before in NOUN_CUES and written != "El":
                    self.after_noun_cue[word] += 1
                if before in ARTICLE_CUES:
                    self.after_article[word] += 1
                self.determiner_pairs[(before, word)] += 1
        self.plain = {strip_accents(word.lower()) for word in self.words}

    def kind(self, word: Optional[str]) -> str:
        """:data:`VERB`, :data:`NOUN` or :data:`UNSURE`: what follows ``la``/``lo``/``los``/``las``
        (or a capital ``El``), which are pronouns before a verb and articles before a noun."""
        if word is None:
            return UNSURE
        word = word.lower()
        verbal, nominal = self.after_verb_cue[word], self.after_noun_cue[word]
        if (VERB_ENDING.search(word) or self.subjunctive(word)
                or (verbal >= VERB_EVIDENCE and verbal >= VERB_MARGIN * nominal)):
            return VERB
        # a verb seen after la/los/las far more often than after a clitic or "no" would be a
        # word nobody writes without its pronoun: it is a noun there
        if verbal == 0 or nominal >= verbal or self.after_article[word] >= VERB_MARGIN * verbal:
            return NOUN
        return UNSURE

    def subjunctive(self, word: str) -> bool:
        """Whether ``word`` is a subjunctive of a verb whose infinitive the text writes (``tocase``,
        ``cubriere``: ``tocar``, ``cubrir``), or another person of one the text uses as a verb
        (``hubiereis``: ``hubiere`` follows ``no`` and clitics); ``clase`` is not (no ``clar``), nor is
        a word the text writes after determiners, or the plural of one (``lugares``: ``el lugar``,
        not the future subjunctive of a verb ``lugar``)."""
        lower = word.lower()
        plain = strip_accents(lower)
        for written in ((lower, lower[:-2]) if lower.endswith("es") else (lower,)):
            if self.after_noun_cue[written] > self.after_verb_cue[written]:
                return False
        for ending, infinitives in SUBJUNCTIVE_ENDINGS:
            if plain.endswith(ending) and len(plain) > len(ending) + 1:
                stem = plain[:-len(ending)]
                if any(stem + infinitive in self.plain for infinitive in infinitives):
                    return True
                siblings = [stem + other for other, kind in SUBJUNCTIVE_ENDINGS
                            if kind == infinitives and other != ending]
                if any(self.after_verb_cue[sibling] > self.after_noun_cue[sibling] for sibling in siblings):
                    return True
        return False

    def clitic_host(self, base: str) -> bool:
        """Whether ``base`` (a word without its final lo/la/los/las) is a verb form that takes
        enclitics: a gerund (``dándo``), an infinitive the text writes (``hacer``), a form with an
        accented last vowel (``tomó``, ``haré``), an imperative (``tomad``, ``pon``), a form whose
        accent only the enclitic explains (``tóma``: ``toma`` is a word), or one of these with a
        dative or reflexive clitic before (``dáme``, ``llévate``)."""
        base = base.lower()
        plain = strip_accents(base)
        if len(base) < 2:
            return False
        if re.search(r"[áé]ndo$", base):
            return True
        if base[-1] in "áéíóú" and len(base) > 2:  # not "só" (sólo)
            return True
        if re.search(r"(?:ar|er|ir)$", plain) and plain in self.plain:
            return True
        if re.search(r"[aei]d$", plain) and plain[:-1] + "r" in self.plain:
            return True
        if plain in IRREGULAR_IMPERATIVES:  # dí, dá: written with an accent or without
            return True
        # an accent before the last syllable that the plain form does not have: the stress kept
        # where an enclitic made the word longer; not participles (ído: ídolo is a noun)
        if base != plain and plain in self.plain and not re.search(r"(?:ado|ido)$", plain):
            return True
        for clitic in NON_GENDERED_CLITICS:
            if base.endswith(clitic) and len(base) > len(clitic) + 1 and self.clitic_host(base[:-len(clitic)]):
                return True
        return False

    def capital_stressed(self) -> str:
        """How the module writes ``él`` at the start of a sentence: ``Él``, or ``El`` where it
        writes no accents on capitals."""
        return "Él" if self.words["Él"] else "El"

    def determiner_gender(self, determiner: str, noun: str) -> Optional[Tuple[str, str]]:
        """(gender, number) of the noun phrase ``determiner noun``; None where ``determiner`` is
        none or it cannot be told (el/un before a noun starting with a stressed a may be feminine:
        by the other determiners the text gives it, ``esta agua``)."""
        determiner, noun = determiner.lower(), noun.lower()
        for key, forms in DETERMINERS.items():
            if determiner in forms:
                if determiner in MASCULINE_FORMS_OF_FEMININE and strip_accents(noun).startswith(("a", "ha")):
                    feminine = sum(self.determiner_pairs[(d, noun)] for d in ("esta", "esa", "aquella", "la"))
                    masculine = sum(self.determiner_pairs[(d, noun)] for d in ("este", "ese", "aquel"))
                    if feminine and not masculine:
                        return FEMININE, SINGULAR
                    if masculine and not feminine:
                        return MASCULINE, SINGULAR
                    return None
                return key
        return None

    def noun_gender(self, word: str) -> Optional[Tuple[str, str]]:
        """(gender, number) of ``word`` as a noun (or adjective used as one) by the determiners the
        text puts before it (``hombres``: ``los``, ``estos``, ``unos``), where at least
        :data:`NOUN_EVIDENCE` of them agree on one and :data:`NOUN_AGREEMENT` of them do; None
        for words that are not nouns (pronouns, determiners, verbs) or nouns without such evidence
        (names: ``Zorb``)."""
        lower = word.lower()
        if lower in STRESSED or lower in CLITICS or lower in NOUN_CUES or self.kind(lower) != NOUN:
            return None
        counts = Counter()
        for key, forms in DETERMINERS.items():
            for determiner in forms:
                if determiner in MASCULINE_FORMS_OF_FEMININE and strip_accents(lower).startswith(("a", "ha")):
                    continue
                counts[key] += self.determiner_pairs[(determiner, lower)]
        total = sum(counts.values())
        if not counts or total < NOUN_EVIDENCE:
            return None
        key, count = counts.most_common(1)[0]
        return key if count >= NOUN_AGREEMENT * total else None


@dataclass
class Pronoun:
    """A third-person pronoun of the Spanish verse: ``text[start:end]`` is the word holding it,
    ``clitic`` the pronoun's own letters at its end (the whole word but for enclitics)."""

    start: int
    end: int
    word: str
    form: str  # STRESSED_FORM, PROCLITIC, ENCLITIC
    gender: str
    number: str
    clitic: str = ""

    @property
    def name(self) -> str:
        """The reference pronoun (``ella``, ``lo``), lower case."""
        return (self.clitic or self.word).lower()


@dataclass
class VersePronouns:
    """What :func:`find_pronouns` finds in a Spanish verse."""

    pronouns: List[Pronoun] = field(default_factory=list)
    unsure: List[str] = field(default_factory=list)  # words that may be a pronoun or an article
    # (start, gender and number) of nouns whose gender can be told: by their determiner, or the text's
    noun_phrases: List[Tuple[int, Tuple[str, str]]] = field(default_factory=list)


def _words(text: str) -> List[re.Match]:
    return list(_WORD.finditer(text))


def _next_word(text: str, words: Sequence[re.Match], index: int) -> Optional[str]:
    """The word right after ``words[index]``, where only spaces stand between them."""
    if index + 1 < len(words) and not text[words[index].end():words[index + 1].start()].strip():
        return words[index + 1].group()
    return None


def _neuter_article_before(word: str) -> bool:
    """Whether the neuter article ``lo`` can stand before ``word``: a relative (``lo que``) or a
    masculine adjective or participle (``lo bueno``, ``lo hurtado``)."""
    return word.lower() in NEUTER_ARTICLE_RELATIVES or strip_accents(word.lower()).endswith("o")


def find_pronouns(text: str, lexicon: SpanishLexicon) -> VersePronouns:
    """The flippable third-person pronouns of a Spanish verse, the words that may or may not be
    one (:data:`UNSURE`), and its nouns whose gender and number can be told."""
    found = VersePronouns()
    words = _words(text)
    for index, match in enumerate(words):
        word = match.group()
        lower = word.lower()
        following = _next_word(text, words, index)
        if lower in STRESSED:
            found.pronouns.append(Pronoun(match.start(), match.end(), word, STRESSED_FORM, *STRESSED[lower]))
            continue
        if word == "El":  # sentence-initial: the article, or the pronoun written without its accent
            kind = lexicon.kind(following)
            if kind == VERB and lexicon.capital_stressed() == "El":
                found.pronouns.append(Pronoun(match.start(), match.end(), word, STRESSED_FORM, MASCULINE, SINGULAR))
                continue
            if kind == UNSURE:
                found.unsure.append(word)
                continue
        if lower in CLITICS:
            kind = lexicon.kind(following)
            if lower == "lo" and kind == NOUN and not _neuter_article_before(following):
                kind = UNSURE  # lo is no article before a noun: before a word of no evidence, a verb?
            if kind == VERB:
                found.pronouns.append(Pronoun(match.start(), match.end(), word, PROCLITIC, *CLITICS[lower]))
            elif kind == UNSURE:
                found.unsure.append(word)
            elif lower != "lo" and following is not None:  # lo before an adjective or "que" is neuter
                found.noun_phrases.append((match.start(), CLITICS[lower]))
            continue
        enclitic = None if lower in NOT_ENCLITIC else re.fullmatch(r"(\w+?)(los|las|lo|la)", lower)
        if enclitic and lexicon.clitic_host(enclitic.group(1)):
            clitic = word[len(enclitic.group(1)):]
            found.pronouns.append(Pronoun(match.start(), match.end(), word, ENCLITIC, *CLITICS[clitic.lower()],
                                          clitic=clitic))
            continue
        key = lexicon.determiner_gender(word, following) if following is not None else None
        key = key or lexicon.noun_gender(word)
        if key is not None:
            found.noun_phrases.append((match.start(), key))
    return found


def flip(text: str, pronoun: Pronoun, lexicon: SpanishLexicon) -> str:
    """``text`` with ``pronoun``'s gender flipped, its casing kept."""
    if pronoun.form == ENCLITIC:
        clitic = pronoun.clitic
        replaced = pronoun.word[:-len(clitic)] + _cased(FLIPPED[clitic.lower()], clitic)
    else:
        lower = pronoun.word.lower()
        if pronoun.word == "El":
            lower = "él"
        flipped = FLIPPED[lower]
        replaced = _cased(flipped, pronoun.word)
        if flipped == "él" and pronoun.word[:1].isupper():
            replaced = lexicon.capital_stressed()
    return text[:pronoun.start] + replaced + text[pronoun.end:]


def _english_words(text: str) -> set:
    return {word.lower() for word in _WORD.findall(text)}


def english_reason(english: str, pronoun: Pronoun) -> Optional[str]:
    """Why the English verse does not leave ``pronoun``'s gender open (None: it does)."""
    words = _english_words(english)
    if not words & set(ENGLISH_OPEN[pronoun.number]):
        return ENGLISH_NO_OPEN
    if pronoun.number == SINGULAR:
        gendered = ENGLISH_OBJECT_GENDERED + (ENGLISH_SUBJECT_GENDERED if pronoun.form == STRESSED_FORM else ())
        if words & set(gendered):
            return ENGLISH_GENDERED
    return None


def spanish_reason(found: VersePronouns) -> Optional[str]:
    if found.unsure:
        return UNSURE_WORD
    if not found.pronouns:
        return NO_PRONOUN
    if len(found.pronouns) > 1:
        return TWO_PRONOUNS
    return None


def agrees_beside(text: str, pronoun: Pronoun) -> bool:
    """Whether a gendered word that would agree with ``pronoun`` stands right beside it."""
    before = _WORD.findall(text[:pronoun.start])
    after = _WORD.findall(text[pronoun.end:])
    return bool((before and before[-1].lower() in AGREEING) or (after and after[0].lower() in AGREEING))


def antecedent_distance(found: VersePronouns, pronoun: Pronoun, context: Sequence[VersePronouns]) -> int:
    """0 when a noun of the pronoun's gender and number comes before it in the verse; else the
    distance to the nearest context verse holding one (``context``: nearest last); else
    :data:`BEYOND_CONTEXT`."""
    key = (pronoun.gender, pronoun.number)
    if any(start < pronoun.start and found_key == key for start, found_key in found.noun_phrases):
        return 0
    for distance, verse in enumerate(reversed(context), start=1):
        if any(found_key == key for _, found_key in verse.noun_phrases):
            return distance
    return BEYOND_CONTEXT


@dataclass
class PronounSets:
    """Examples by phenomenon (:data:`PHENOMENA`'s keys) and what became of every held-out verse."""

    examples: Dict[str, List[dict]]
    verses: int
    refused: Counter

    def record(self) -> dict:
        counts = {key: len(examples) for key, examples in self.examples.items()}
        by_pronoun = Counter(example["categories"]["pronoun"] for examples in self.examples.values()
                             for example in examples)
        return {
            "phenomena": {PHENOMENA[VERSE]: "a noun of the pronoun's gender and number comes before it in the verse",
                          PHENOMENA[CONTEXT]: "none does: the antecedent is in the context, further back, or a "
                                              "word the heuristic cannot tell (a name)"},
            "from": "the held-out (valid and test) chapters' verses",
            "verses": self.verses,
            "examples": {PHENOMENA[key]: count for key, count in counts.items()},
            "refused": {reason: self.refused.get(reason, 0) for reason in REFUSALS},
            "by_pronoun": dict(sorted(by_pronoun.items())),
            "context_verses": CONTEXT_VERSES,
        }


def build_pronoun_sets(chapters: Sequence[Tuple[str, Sequence[str], Sequence[str], Sequence[int]]],
                       lexicon: SpanishLexicon) -> PronounSets:
    """Contrastive examples from parallel chapters as :func:`rfa_doc_mt.data.bible.split_chapters`
    gives them: (name ``Gen.1``, English verses, Spanish verses, verse numbers)."""
    examples: Dict[str, List[dict]] = {VERSE: [], CONTEXT: []}
    refused: Counter = Counter()
    verses = 0
    for name, source_verses, target_verses, numbers in chapters:
        analysed = [find_pronouns(text, lexicon) for text in target_verses]
        for index, (english, spanish) in enumerate(zip(source_verses, target_verses)):
            verses += 1
            found = analysed[index]
            reason = spanish_reason(found)
            pronoun = found.pronouns[0] if reason is None else None
            if reason is None and agrees_beside(spanish, pronoun):
                reason = AGREEMENT
            if reason is None:
                reason = english_reason(english, pronoun)
            if reason is None and index == 0:
                reason = FIRST_VERSE
            if reason is not None:
                refused[reason] += 1
                continue
            first = max(0, index - CONTEXT_VERSES)
            distance = antecedent_distance(found, pronoun, analysed[first:index])
            context_target = list(target_verses[first:index])
            examples[VERSE if distance == 0 else CONTEXT].append({
                "src": join_sentences(list(source_verses[first:index]) + [english]),
                "dst": [join_sentences(context_target + [spanish]),
                        join_sentences(context_target + [flip(spanish, pronoun, lexicon)])],
                "true_ind": 0,
                "ctx_dist": distance,
                "categories": {"pronoun": pronoun.name, "form": pronoun.form, "gender": pronoun.gender,
                               "number": pronoun.number},
                "verse": f"{name}.{numbers[index]}",
            })
    return PronounSets(examples, verses, refused)


def write_pronoun_sets(sets: PronounSets, folder: str) -> List[str]:
    """The phenomena that have examples as Voita et al.'s JSON in ``folder``; their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for key, name in PHENOMENA.items():
        if sets.examples[key]:
            path = os.path.join(folder, f"{name}.json")
            write_contrastive(path, sets.examples[key])
            paths.append(path)
    return paths


def skip_reason(source_lang: str, target_lang: str, splits: Dict[str, Sequence]) -> Optional[str]:
    """Why a corpus gets no pronoun set (None: it gets one); ``splits``: its chapters by split."""
    if (source_lang, target_lang) != LANGUAGE_PAIR:
        return (f"it is built for {LANGUAGE_PAIR[0]} -> {LANGUAGE_PAIR[1]} only (English it/they/them against the "
                f"gender of Spanish pronouns), and this corpus is {source_lang} -> {target_lang}")
    if not splits.get("test"):
        return "no test split (too few chapters kept for the split rule to put one in test)"
    return None


def report_lines(record: dict) -> List[str]:
    """The ``pronoun_sets`` record of prep.json's ``bible`` field in words."""
    if "verses" not in record:
        return [f"note: no contrastive pronoun set (consistency/): {record['skipped']}"]
    examples = ", ".join(f"{name} {count}" for name, count in record["examples"].items())
    refused = ", ".join(f"{reason}: {count}" for reason, count in record["refused"].items() if count)
    pronouns = ", ".join(f"{pronoun} {count}" for pronoun, count in record["by_pronoun"].items())
    lines = [f"pronoun set from {record['verses']} held-out (valid and test) verses: {examples} examples ({pronouns})",
             f"pronoun set, verses refused: {refused or 'none'}"]
    if "skipped" in record:
        lines.append(f"note: no contrastive pronoun set (consistency/): {record['skipped']}")
    return lines
