"""The embedded synthetic document corpus: an invented language pair ``src`` -> ``tgt``.

No real training corpus is available offline, so the project generates its own,
deterministically from a seed. Both languages are lowercase invented words separated by
single spaces (no BPE needed); a sentence has 4-9 tokens, a document 6-12 sentences.

Plain sentences translate word for word through a fixed lexicon, with one local reordering
rule: an adjective precedes its noun in ``src`` and follows it in ``tgt``
(``ka ADJ NOUN`` -> ``le NOUN' ADJ'``). Four phenomena, named after Voita et al. (2019)'s
test sets, make the translation of a sentence depend on a sentence 1-3 back (by default; the
largest distance is a setting, ``max_distance``, below):

* ``deixis``: the source 2nd-person pronoun ``vu`` is formal (``siv``) or informal
  (``tej``) in the target, as set by the most recent title word (formal "sir"-like or
  informal "pal"-like, a document keeps one register) in this or the 3 previous sentences.
* ``anaphora``: the source 3rd-person pronoun ``ze`` becomes ``hon`` or ``hun`` in the target,
  agreeing with the grammatical gender of the target noun of the most recent animate noun in
  the 3 previous sentences (the last one in that sentence).
* ``lex_cohesion``: an ambiguous source noun has two target senses; a cue adjective right
  before it (``ka CUE NOUN``) selects the sense; a mention without a cue takes the sense of
  the most recent cued mention of the same noun in the 3 previous sentences.
* ``ellipsis_vp``: ``NP dak mes`` ("NP does too") becomes ``NP' VERB' ok`` in the target,
  repeating the verb of the most recent sentence with a verb in the 3 previous sentences.

:func:`translate_sentence` states these rules; the generator plans documents so that every
phenomenon sentence's deciding cue lies 1-3 sentences back with no competing cue in between,
and the written target side is :func:`translate_document` of the source side.

The long-range corpus (``max_distance`` above 3, e.g. ``--max-distance 14`` with documents of
``--document-sentences 30-50``): the rules read the previous ``max_distance`` sentences, and a
cue lies 1 to ``max_distance`` sentences back, its distance drawn uniformly over the buckets of
:func:`distance_buckets` (1, 2-3, 4-7, 8-14, ...) and then within its bucket, so that each bucket
is as frequent in training as the test sets make it; the contrastive sets then hold the same
number of pairs per bucket and ``max_distance`` context sentences before the current one.

Contrastive sets (``consistency/``: the test sets; ``valid_consistency/``: validation sets for
checkpoint selection, drawn from another random stream) follow Voita et al.'s JSON format
(``src``, ``dst`` candidates, ``true_ind``, ``ctx_dist``; ``max_distance`` context sentences + the
current one joined by ``" _eos "``). Examples ``2k`` and ``2k+1`` form a mirrored pair: the same current
source sentence and the same candidate list, with the context changed so that the other
candidate is true. A model that only reads the current sentence therefore gets exactly one
example of each pair right. Both examples of a pair carry its number as ``group`` (an addition to
Voita et al.'s format): their outcomes are not independent, and the significance tests resample
pairs, not examples (scoring/compare.py).
"""

import argparse
import dataclasses
import hashlib
import json
import os
import random
import sys
import time
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from .io import Document, atomic_write, write_docs, write_lines

SOURCE_LANGUAGE = "src"
TARGET_LANGUAGE = "tgt"
PHENOMENA = ("deixis", "anaphora", "lex_cohesion", "ellipsis_vp")
CONTEXT_SENTENCES = 3
SEPARATOR = " _eos "  # Voita et al.'s separator between the sentences of a window
SPLITS = ("train", "valid", "test")
MIN_SENTENCE_TOKENS, MAX_SENTENCE_TOKENS = 4, 9
MIN_DOCUMENT_SENTENCES, MAX_DOCUMENT_SENTENCES = 6, 12
DOCUMENT_SENTENCES = (MIN_DOCUMENT_SENTENCES, MAX_DOCUMENT_SENTENCES)

FORMALITIES = ("formal", "informal")
GENDERS = ("masculine", "feminine")

# Hand-picked function words (source, target); invented words never take these forms.
DETERMINER = ("ka", "le")
COPULA = ("su", "ir")
INTENSIFIER = ("nimi", "bal")
COMMA = (",", ",")
YOU = "vu"
YOU_TARGET = {"formal": "siv", "informal": "tej"}
PRONOUN = "ze"
PRONOUN_TARGET = {"masculine": "hon", "feminine": "hun"}
DOES, TOO = "dak", "mes"
TOO_TARGET = "ok"

# Word classes of the invented lexicon and how many words each holds.
NUM_ANIMATE_NOUNS_PER_GENDER = 12
NUM_INANIMATE_NOUNS = 20
NUM_VERBS = 16
NUM_ADJECTIVES = 16
NUM_ADVERBS = 8
NUM_TITLES_PER_FORMALITY = 3
NUM_AMBIGUOUS_NOUNS = 6
NUM_CUES_PER_SENSE = 2
_LEXICON_SEED = 20190601  # the language itself never changes with the corpus seed

# Generation knobs, tuned so that about 40% of sentences hold a phenomenon.
_EPISODE_ATTEMPTS_PER_SENTENCE = 2
_EPISODE_PROBABILITY = 0.45
_ADJECTIVE_PROBABILITY = 0.3
_ADVERB_PROBABILITY = 0.3
_INTENSIFIER_PROBABILITY = 0.3
_FREE_ANIMATE_PROBABILITY = 0.45
_TRANSITIVE_PROBABILITY = 0.65


@dataclasses.dataclass(frozen=True)
class Entry:
    """One source word: its class, its target word(s), and a class attribute.

    ``target`` is a string, or for context-dependent words a dict from the deciding value to
    the target word. ``attribute`` is the gender of an animate noun, the formality of a title,
    ``(ambiguous noun, sense)`` of a cue adjective, or ``None``.
    """
    kind: str
    target: object
    attribute: object = None


def _invent_words(rng: random.Random, count: int, consonants: str, vowels: str,
                  taken: set, final_vowel: Optional[str] = None, final_consonant: bool = False) -> List[str]:
    """``count`` new CVCV(C) words not in ``taken`` (which they are added to)."""
    words = []
    while len(words) < count:
        letters = [rng.choice(consonants), rng.choice(vowels), rng.choice(consonants),
                   final_vowel or rng.choice(vowels)]
        if final_consonant:
            letters.append(rng.choice(consonants))
        word = "".join(letters)
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def _build_lexicon():
    rng = random.Random(_LEXICON_SEED)
    source_consonants, source_vowels = "bdgkmnprstvz", "aeiou"
    target_consonants, target_vowels = "cfhjlnrtwxy", "aeiou"
    function_words = (DETERMINER, COPULA, INTENSIFIER, COMMA)
    source_taken = {source for source, _ in function_words} | {YOU, PRONOUN, DOES, TOO}
    target_taken = {target for _, target in function_words} | {TOO_TARGET} \
        | set(YOU_TARGET.values()) | set(PRONOUN_TARGET.values())

    def source_words(count):
        return _invent_words(rng, count, source_consonants, source_vowels, source_taken)

    def target_nouns(count, final_vowel):
        # Target nouns end in a class vowel (o masculine, a feminine, e inanimate, i/u senses
        # of ambiguous nouns) for human readers; models see whole words, so it gives nothing away.
        return _invent_words(rng, count, target_consonants, target_vowels, target_taken, final_vowel)

    def target_words(count):
        return _invent_words(rng, count, target_consonants, target_vowels, target_taken,
                             final_consonant=True)

    lexicon: Dict[str, Entry] = {
        DETERMINER[0]: Entry("determiner", DETERMINER[1]),
        COPULA[0]: Entry("copula", COPULA[1]),
        INTENSIFIER[0]: Entry("intensifier", INTENSIFIER[1]),
        COMMA[0]: Entry("comma", COMMA[1]),
        YOU: Entry("you", dict(YOU_TARGET)),
        PRONOUN: Entry("pronoun", dict(PRONOUN_TARGET)),
        DOES: Entry("does", None),
        TOO: Entry("too", TOO_TARGET),
    }
    classes: Dict[str, object] = {}
    for gender, vowel in zip(GENDERS, "oa"):
        nouns = source_words(NUM_ANIMATE_NOUNS_PER_GENDER)
        for source, target in zip(nouns, target_nouns(len(nouns), vowel)):
            lexicon[source] = Entry("animate_noun", target, gender)
        classes[gender] = tuple(nouns)
    for kind, count in (("inanimate_noun", NUM_INANIMATE_NOUNS), ("verb", NUM_VERBS),
                        ("adjective", NUM_ADJECTIVES), ("adverb", NUM_ADVERBS)):
        words = source_words(count)
        targets = target_nouns(count, "e") if kind == "inanimate_noun" else target_words(count)
        for source, target in zip(words, targets):
            lexicon[source] = Entry(kind, target)
        classes[kind] = tuple(words)
    for formality in FORMALITIES:
        titles = source_words(NUM_TITLES_PER_FORMALITY)
        for source, target in zip(titles, target_words(len(titles))):
            lexicon[source] = Entry("title", target, formality)
        classes[formality] = tuple(titles)
    ambiguous = source_words(NUM_AMBIGUOUS_NOUNS)
    sense_words = (target_nouns(len(ambiguous), "i"), target_nouns(len(ambiguous), "u"))
    cues: Dict[Tuple[str, int], Tuple[str, ...]] = {}
    for index, noun in enumerate(ambiguous):
        lexicon[noun] = Entry("ambiguous_noun", {0: sense_words[0][index], 1: sense_words[1][index]})
        for sense in (0, 1):
            cue_words = source_words(NUM_CUES_PER_SENSE)
            for source, target in zip(cue_words, target_words(len(cue_words))):
                lexicon[source] = Entry("cue_adjective", target, (noun, sense))
            cues[noun, sense] = tuple(cue_words)
    classes["ambiguous_noun"] = tuple(ambiguous)
    classes["cue_adjective"] = cues
    return lexicon, classes


LEXICON, _CLASSES = _build_lexicon()
ANIMATE_NOUNS: Dict[str, Tuple[str, ...]] = {gender: _CLASSES[gender] for gender in GENDERS}
INANIMATE_NOUNS: Tuple[str, ...] = _CLASSES["inanimate_noun"]
VERBS: Tuple[str, ...] = _CLASSES["verb"]
ADJECTIVES: Tuple[str, ...] = _CLASSES["adjective"]
ADVERBS: Tuple[str, ...] = _CLASSES["adverb"]
TITLES: Dict[str, Tuple[str, ...]] = {formality: _CLASSES[formality] for formality in FORMALITIES}
AMBIGUOUS_NOUNS: Tuple[str, ...] = _CLASSES["ambiguous_noun"]
CUE_ADJECTIVES: Dict[Tuple[str, int], Tuple[str, ...]] = _CLASSES["cue_adjective"]
_NOUN_KINDS = ("animate_noun", "inanimate_noun", "ambiguous_noun")
_ADJECTIVE_KINDS = ("adjective", "cue_adjective")


def target_vocabulary() -> List[str]:
    """Every word the target side can contain."""
    words = set()
    for entry in LEXICON.values():
        if isinstance(entry.target, dict):
            words.update(entry.target.values())
        elif entry.target is not None:
            words.add(entry.target)
    return sorted(words)


# ----------------------------------------------------------------------------------------
# The translation rules
# ----------------------------------------------------------------------------------------

class UnresolvedContext(ValueError):
    """A context-dependent word whose deciding cue is not in the 3 previous sentences."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """How one context-dependent source word was translated."""
    phenomenon: str
    word: str             # the source word resolved (vu, ze, an ambiguous noun, dak)
    ctx_dist: int         # how many sentences back the deciding cue is (0: this sentence)
    cue_token_index: int  # position of the cue token in that sentence
    choice: str           # the target word chosen


@dataclasses.dataclass(frozen=True)
class Translation:
    target: str
    decisions: Tuple[Decision, ...]


def _tokens(sentence: str) -> List[str]:
    tokens = sentence.split(" ")
    for token in tokens:
        if token not in LEXICON:
            raise ValueError(f"not a word of the synthetic source language: {token!r} in {sentence!r}")
    return tokens


def _is_cued_mention(tokens: Sequence[str], index: int, noun: str) -> bool:
    return (tokens[index] == noun and index > 0
            and LEXICON[tokens[index - 1]].kind == "cue_adjective"
            and LEXICON[tokens[index - 1]].attribute[0] == noun)


def _most_recent(sentences: Sequence[Sequence[str]], matches: Callable[[Sequence[str], int], bool],
                 first_distance: int) -> Optional[Tuple[int, int]]:
    """(distance, token index) of the last match in the nearest sentence that has one.

    ``sentences`` are ordered oldest first; the last one is ``first_distance`` back.
    """
    for offset, tokens in enumerate(reversed(sentences)):
        for index in range(len(tokens) - 1, -1, -1):
            if matches(tokens, index):
                return first_distance + offset, index
    return None


def translate_sentence(context: Sequence[str], sentence: str, max_distance: int = CONTEXT_SENTENCES) -> Translation:
    """Translate ``sentence`` given the source sentences before it (oldest first).

    Only the last ``max_distance`` of ``context`` matter; raises :class:`UnresolvedContext`
    when a context-dependent word has no cue there.
    """
    tokens = _tokens(sentence)
    previous = [_tokens(s) for s in list(context)[-max_distance:]]

    def resolve(phenomenon, word, matches, include_current):
        searched = previous + [tokens] if include_current else previous
        found = _most_recent(searched, matches, 0 if include_current else 1)
        if found is None:
            raise UnresolvedContext(
                f"{phenomenon}: no cue for {word!r} within {max_distance} sentences before {sentence!r}")
        distance, index = found
        cue_sentence = tokens if distance == 0 else previous[len(previous) - distance]
        return distance, index, cue_sentence[index]

    target: List[str] = []
    decisions: List[Decision] = []
    for position, token in enumerate(tokens):
        entry = LEXICON[token]
        if entry.kind == "you":
            distance, index, title = resolve(
                "deixis", token, lambda toks, i: LEXICON[toks[i]].kind == "title", include_current=True)
            choice = entry.target[LEXICON[title].attribute]
            decisions.append(Decision("deixis", token, distance, index, choice))
        elif entry.kind == "pronoun":
            distance, index, antecedent = resolve(
                "anaphora", token, lambda toks, i: LEXICON[toks[i]].kind == "animate_noun", include_current=False)
            choice = entry.target[LEXICON[antecedent].attribute]
            decisions.append(Decision("anaphora", token, distance, index, choice))
        elif entry.kind == "ambiguous_noun":
            if _is_cued_mention(tokens, position, token):
                choice = entry.target[LEXICON[tokens[position - 1]].attribute[1]]
            else:
                distance, index, cue = resolve(
                    "lex_cohesion", token, lambda toks, i: i + 1 < len(toks) and _is_cued_mention(toks, i + 1, token),
                    include_current=False)
                choice = entry.target[LEXICON[cue].attribute[1]]
                decisions.append(Decision("lex_cohesion", token, distance, index, choice))
        elif entry.kind == "does":
            distance, index, verb = resolve(
                "ellipsis_vp", token, lambda toks, i: LEXICON[toks[i]].kind == "verb", include_current=False)
            choice = LEXICON[verb].target
            decisions.append(Decision("ellipsis_vp", token, distance, index, choice))
        else:
            choice = entry.target
        target.append(choice)
    # The one reordering rule: adjective after its noun in the target.
    for position in range(len(tokens) - 1):
        if LEXICON[tokens[position]].kind in _ADJECTIVE_KINDS and LEXICON[tokens[position + 1]].kind in _NOUN_KINDS:
            target[position], target[position + 1] = target[position + 1], target[position]
    return Translation(" ".join(target), tuple(decisions))


def translate_document(sentences: Sequence[str], max_distance: int = CONTEXT_SENTENCES) -> List[Translation]:
    """Translate each sentence of a document with its ``max_distance`` previous sentences as context."""
    return [translate_sentence(sentences[max(0, i - max_distance):i], sentence, max_distance)
            for i, sentence in enumerate(sentences)]


def distance_buckets(max_distance: int) -> List[Tuple[int, int]]:
    """The antecedent distances 1 to ``max_distance`` in buckets that double: (1, 1), (2, 3),
    (4, 7), (8, 15), ..., the last one ending at ``max_distance`` (so (8, 14) for 14)."""
    if max_distance < 1:
        raise ValueError(f"the largest antecedent distance must be at least 1, got {max_distance}")
    buckets, low = [], 1
    while low <= max_distance:
        buckets.append((low, min(2 * low - 1, max_distance)))
        low *= 2
    return buckets


def _sampling_buckets(max_distance: int) -> List[Tuple[int, int]]:
    """The units the generator balances distances over: each distance up to 3 (the default
    corpus: distances uniform over 1-3), else :func:`distance_buckets`."""
    if max_distance <= CONTEXT_SENTENCES:
        return [(d, d) for d in range(1, max_distance + 1)]
    return distance_buckets(max_distance)


def _sample_distance(rng: random.Random, max_distance: int) -> int:
    if max_distance <= CONTEXT_SENTENCES:
        return rng.randint(1, max_distance)  # the default corpus's draw, unchanged
    low, high = rng.choice(distance_buckets(max_distance))
    return rng.randint(low, high)


# ----------------------------------------------------------------------------------------
# Document generation
# ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _SentencePlan:
    """What one sentence of a document must and must not contain."""
    phenomenon: Optional[str] = None        # the context-dependent word it holds, if any
    ambiguous_noun: Optional[str] = None    # which noun, for lex_cohesion
    needs_title: bool = False
    needs_antecedent: bool = False          # exactly one animate noun
    needs_verb: bool = False
    cued_noun: Optional[str] = None         # an ambiguous noun it mentions with a cue
    forbid_title: bool = False
    forbid_animate: bool = False
    forbid_verb: bool = False
    forbid_cued: FrozenSet[str] = frozenset()

    def can_have_verb(self) -> bool:
        return not self.forbid_verb and self.phenomenon != "ellipsis_vp"

    def feasible(self) -> bool:
        if self.needs_title and (self.forbid_title or self.phenomenon == "deixis"):
            return False  # a title beside "vu" would decide it within the sentence
        if self.needs_antecedent and (self.forbid_animate or self.phenomenon == "anaphora"):
            return False
        if self.needs_verb and not self.can_have_verb():
            return False
        if self.cued_noun is not None and (self.cued_noun in self.forbid_cued
                                           or self.cued_noun == self.ambiguous_noun):
            return False
        required = (self.phenomenon in ("deixis", "anaphora", "lex_cohesion")) \
            + self.needs_antecedent + (self.cued_noun is not None)
        return required <= (2 if self.can_have_verb() else 1)


@dataclasses.dataclass
class _DocumentState:
    formality: str
    senses: Dict[str, int]  # one sense per ambiguous noun per document


def _try_open_episode(plans: List[_SentencePlan], cue_position: int, phenomenon: str,
                      distance: int, noun: Optional[str]) -> bool:
    """Plan a cue at ``cue_position`` and its phenomenon ``distance`` sentences later."""
    position = cue_position + distance
    if position >= len(plans) or plans[position].phenomenon is not None:
        return False
    updated = {q: plans[q] for q in range(cue_position, position + 1)}
    cue = updated[cue_position]
    if phenomenon == "deixis":
        cue = dataclasses.replace(cue, needs_title=True)
    elif phenomenon == "anaphora":
        cue = dataclasses.replace(cue, needs_antecedent=True)
    elif phenomenon == "lex_cohesion":
        if cue.cued_noun not in (None, noun):
            return False  # one cued mention per sentence keeps sentences short
        cue = dataclasses.replace(cue, cued_noun=noun)
    else:
        cue = dataclasses.replace(cue, needs_verb=True)
    updated[cue_position] = cue
    # No competing cue in between, so the planned cue is the most recent one.
    for q in range(cue_position + 1, position):
        plan = updated[q]
        if phenomenon == "deixis":
            updated[q] = dataclasses.replace(plan, forbid_title=True)
        elif phenomenon == "anaphora":
            updated[q] = dataclasses.replace(plan, forbid_animate=True)
        elif phenomenon == "lex_cohesion":
            updated[q] = dataclasses.replace(plan, forbid_cued=plan.forbid_cued | {noun})
        else:
            updated[q] = dataclasses.replace(plan, forbid_verb=True)
    updated[position] = dataclasses.replace(updated[position], phenomenon=phenomenon, ambiguous_noun=noun)
    if not all(plan.feasible() for plan in updated.values()):
        return False
    for q, plan in updated.items():
        plans[q] = plan
    return True


def _noun_phrase(rng: random.Random, noun: str, cue: Optional[str] = None) -> List[str]:
    if cue is not None:
        return [DETERMINER[0], cue, noun]
    if rng.random() < _ADJECTIVE_PROBABILITY:
        return [DETERMINER[0], rng.choice(ADJECTIVES), noun]
    return [DETERMINER[0], noun]


def _build_sentence(rng: random.Random, plan: _SentencePlan, state: _DocumentState) -> str:
    """Sample a source sentence that satisfies ``plan``."""
    required: List[List[str]] = []
    if plan.phenomenon == "deixis":
        required.append([YOU])
    elif plan.phenomenon == "anaphora":
        required.append([PRONOUN])
    elif plan.phenomenon == "lex_cohesion":
        required.append(_noun_phrase(rng, plan.ambiguous_noun))
    if plan.needs_antecedent:
        required.append(_noun_phrase(rng, rng.choice(ANIMATE_NOUNS[rng.choice(GENDERS)])))
    if plan.cued_noun is not None:
        sense = state.senses[plan.cued_noun]
        required.append(_noun_phrase(rng, plan.cued_noun, rng.choice(CUE_ADJECTIVES[plan.cued_noun, sense])))
    # Free noun phrases may be animate only where no antecedent count is at stake.
    free_animate = not (plan.forbid_animate or plan.needs_antecedent or plan.phenomenon == "anaphora")

    for _ in range(1000):
        if plan.phenomenon == "ellipsis_vp":
            clause = "ellipsis"
        elif plan.needs_verb or len(required) == 2:
            clause = "transitive"
        elif plan.forbid_verb:
            clause = "copular"
        else:
            clause = "transitive" if rng.random() < _TRANSITIVE_PROBABILITY else "copular"
        phrases = list(required)
        while len(phrases) < (2 if clause == "transitive" else 1):
            if free_animate and rng.random() < _FREE_ANIMATE_PROBABILITY:
                noun = rng.choice(ANIMATE_NOUNS[rng.choice(GENDERS)])
            else:
                noun = rng.choice(INANIMATE_NOUNS)
            phrases.append(_noun_phrase(rng, noun))
        rng.shuffle(phrases)
        tokens: List[str] = []
        if plan.needs_title:
            tokens += [rng.choice(TITLES[state.formality]), COMMA[0]]
        tokens += phrases[0]
        if clause == "transitive":
            tokens += [rng.choice(VERBS)] + phrases[1]
        elif clause == "copular":
            tokens.append(COPULA[0])
            if rng.random() < _INTENSIFIER_PROBABILITY:
                tokens.append(INTENSIFIER[0])
            tokens.append(rng.choice(ADJECTIVES))
        else:
            tokens += [DOES, TOO]
        if clause != "ellipsis" and rng.random() < _ADVERB_PROBABILITY:
            tokens.append(rng.choice(ADVERBS))
        if MIN_SENTENCE_TOKENS <= len(tokens) <= MAX_SENTENCE_TOKENS:
            return " ".join(tokens)
    raise RuntimeError(f"could not build a sentence for {plan}")  # unreachable with these templates


def generate_document(rng: random.Random, max_distance: int = CONTEXT_SENTENCES,
                      document_sentences: Tuple[int, int] = DOCUMENT_SENTENCES) -> List[str]:
    """Sample the source sentences of one document: ``document_sentences`` (least, most)
    sentences, each cue 1 to ``max_distance`` sentences before its phenomenon."""
    num_sentences = rng.randint(*document_sentences)
    state = _DocumentState(rng.choice(FORMALITIES), {})
    plans = [_SentencePlan() for _ in range(num_sentences)]
    sentences = []
    for position in range(num_sentences):
        for _ in range(_EPISODE_ATTEMPTS_PER_SENTENCE):
            if rng.random() < _EPISODE_PROBABILITY:
                phenomenon = rng.choice(PHENOMENA)
                distance = _sample_distance(rng, max_distance)
                noun = rng.choice(AMBIGUOUS_NOUNS) if phenomenon == "lex_cohesion" else None
                if _try_open_episode(plans, position, phenomenon, distance, noun) and noun is not None:
                    state.senses.setdefault(noun, rng.randrange(2))
        sentences.append(_build_sentence(rng, plans[position], state))
    return sentences


def _stream(seed: int, name: str) -> random.Random:
    """An independent random stream per (seed, purpose), stable across Python versions."""
    digest = hashlib.sha256(f"rfa-doc-mt-synthetic:{seed}:{name}".encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generate_documents(seed: int, split: str, num_documents: int, max_distance: int = CONTEXT_SENTENCES,
                       document_sentences: Tuple[int, int] = DOCUMENT_SENTENCES) -> List[List[str]]:
    rng = _stream(seed, split)
    return [generate_document(rng, max_distance, document_sentences) for _ in range(num_documents)]


# ----------------------------------------------------------------------------------------
# Contrastive sets
# ----------------------------------------------------------------------------------------

def _counterpart_title(title: str) -> str:
    formality = LEXICON[title].attribute
    other = FORMALITIES[1 - FORMALITIES.index(formality)]
    return TITLES[other][TITLES[formality].index(title)]


def _counterpart_cue(cue: str) -> str:
    noun, sense = LEXICON[cue].attribute
    return CUE_ADJECTIVES[noun, 1 - sense][CUE_ADJECTIVES[noun, sense].index(cue)]


def _mirror_document(rng: random.Random, sentences: Sequence[str], position: int,
                     decision: Decision) -> List[str]:
    """The document up to ``position`` with the context changed to flip ``decision``."""
    mirrored = [s.split(" ") for s in sentences[:position + 1]]
    cue_sentence = mirrored[position - decision.ctx_dist]
    if decision.phenomenon == "deixis":
        # The whole document switches register, so earlier "vu" sentences stay consistent.
        for tokens in mirrored[:position]:
            tokens[:] = [_counterpart_title(t) if LEXICON[t].kind == "title" else t for t in tokens]
    elif decision.phenomenon == "anaphora":
        gender = LEXICON[cue_sentence[decision.cue_token_index]].attribute
        other = GENDERS[1 - GENDERS.index(gender)]
        cue_sentence[decision.cue_token_index] = rng.choice(ANIMATE_NOUNS[other])
    elif decision.phenomenon == "lex_cohesion":
        # One sense per document: every earlier cue of this noun switches sense.
        for tokens in mirrored[:position]:
            tokens[:] = [_counterpart_cue(t) if LEXICON[t].kind == "cue_adjective"
                         and LEXICON[t].attribute[0] == decision.word else t for t in tokens]
    else:
        verb = cue_sentence[decision.cue_token_index]
        cue_sentence[decision.cue_token_index] = rng.choice([v for v in VERBS if v != verb])
    return [" ".join(tokens) for tokens in mirrored]


def _example(sources: Sequence[str], translations: Sequence[Translation], candidates: Sequence[str],
             true_candidate: str, ctx_dist: int) -> dict:
    context = [t.target for t in translations[:-1]]
    return {
        "src": SEPARATOR.join(sources),
        "dst": [SEPARATOR.join(context + [candidate]) for candidate in candidates],
        "true_ind": candidates.index(true_candidate),
        "ctx_dist": ctx_dist,
    }


def _pairs_per_bucket(num_pairs: int, buckets: Sequence[Tuple[int, int]]) -> Dict[Tuple[int, int], int]:
    return {bucket: num_pairs // len(buckets) + (index < num_pairs % len(buckets))
            for index, bucket in enumerate(buckets)}


def generate_contrastive_sets(seed: int, num_pairs: int, max_documents: int = 1_000_000,
                              stream: str = "contrastive", max_distance: int = CONTEXT_SENTENCES,
                              document_sentences: Tuple[int, int] = DOCUMENT_SENTENCES) -> Dict[str, List[dict]]:
    """Mirrored pairs per phenomenon from fresh documents, ``ctx_dist`` balanced over 1-3 (over
    the buckets of :func:`distance_buckets` when ``max_distance`` is larger).

    ``stream`` names the random streams the documents and choices are drawn from: the test sets
    (``contrastive``) and the validation sets (``valid-contrastive``) come from independent ones."""
    document_rng = _stream(seed, f"{stream}-documents")
    choice_rng = _stream(seed, f"{stream}-choices")
    buckets = _sampling_buckets(max_distance)
    bucket_of = {d: bucket for bucket in buckets for d in range(bucket[0], bucket[1] + 1)}
    wanted = {phenomenon: _pairs_per_bucket(num_pairs, buckets) for phenomenon in PHENOMENA}
    pairs: Dict[str, List[Tuple[dict, dict]]] = {phenomenon: [] for phenomenon in PHENOMENA}
    for _ in range(max_documents):
        if not any(n for per_distance in wanted.values() for n in per_distance.values()):
            break
        sentences = generate_document(document_rng, max_distance, document_sentences)
        translations = translate_document(sentences, max_distance)
        for position in range(max_distance, len(sentences)):
            for decision in translations[position].decisions:
                bucket = bucket_of[decision.ctx_dist]
                if not wanted[decision.phenomenon][bucket]:
                    continue
                mirrored = _mirror_document(choice_rng, sentences, position, decision)
                mirrored_translations = translate_document(mirrored, max_distance)
                mirrored_decision = mirrored_translations[position].decisions[0]
                if mirrored_decision.ctx_dist != decision.ctx_dist or mirrored_decision.choice == decision.choice:
                    raise RuntimeError(f"mirroring did not flip {decision} in {sentences[:position + 1]}")
                window = slice(position - max_distance, position + 1)
                true_candidate = translations[position].target
                mirrored_candidate = mirrored_translations[position].target
                candidates = [true_candidate, mirrored_candidate]
                choice_rng.shuffle(candidates)
                pair = [_example(sentences[window], translations[window], candidates, true_candidate,
                                 decision.ctx_dist),
                        _example(mirrored[window], mirrored_translations[window], candidates,
                                 mirrored_candidate, decision.ctx_dist)]
                choice_rng.shuffle(pair)
                pairs[decision.phenomenon].append(tuple(pair))
                wanted[decision.phenomenon][bucket] -= 1
    else:
        raise RuntimeError(f"could not find {num_pairs} contrastive pairs per phenomenon "
                           f"in {max_documents} documents")
    sets = {}
    for phenomenon, phenomenon_pairs in pairs.items():
        choice_rng.shuffle(phenomenon_pairs)  # mix distances, keep each pair adjacent
        sets[phenomenon] = [{**example, "group": number} for number, pair in enumerate(phenomenon_pairs)
                            for example in pair]
    return sets


# ----------------------------------------------------------------------------------------
# Writing the corpus
# ----------------------------------------------------------------------------------------

def _write_split(out_dir: str, split: str, documents: Sequence[Sequence[str]],
                 max_distance: int = CONTEXT_SENTENCES) -> Dict[str, int]:
    sources, targets, boundaries = [], [], []
    counts = {phenomenon: 0 for phenomenon in PHENOMENA}
    for index, sentences in enumerate(documents):
        translations = translate_document(sentences, max_distance)
        sources.extend(sentences)
        targets.extend(t.target for t in translations)
        boundaries.append(Document(f"synthetic-{split}-{index:05d}", len(sentences)))
        for translation in translations:
            for decision in translation.decisions:
                counts[decision.phenomenon] += 1
    write_lines(os.path.join(out_dir, f"{split}.{SOURCE_LANGUAGE}"), sources)
    write_lines(os.path.join(out_dir, f"{split}.{TARGET_LANGUAGE}"), targets)
    write_docs(os.path.join(out_dir, f"{split}.docs"), boundaries)
    return counts


def bucket_name(bucket: Tuple[int, int]) -> str:
    return str(bucket[0]) if bucket[0] == bucket[1] else f"{bucket[0]}-{bucket[1]}"


def write_corpus(out_dir: str, seed: int = 1, num_train_documents: int = 2000,
                 num_valid_documents: int = 100, num_test_documents: int = 100,
                 num_contrastive_pairs: int = 250, num_valid_contrastive_pairs: Optional[int] = None,
                 max_distance: int = CONTEXT_SENTENCES,
                 document_sentences: Tuple[int, int] = DOCUMENT_SENTENCES) -> dict:
    """Write {out_dir}/{train,valid,test}.{src,tgt}, {out_dir}/{split}.docs,
    {out_dir}/consistency/{phenomenon}.json (the test sets) and
    {out_dir}/valid_consistency/{phenomenon}.json (validation sets for checkpoint selection,
    ``num_valid_contrastive_pairs`` pairs each, by default as many as the test sets, from
    their own random stream); return a summary dict (documents, sentences per split, examples
    per phenomenon and per distance bucket).

    ``max_distance``: the largest antecedent distance (the rules' context, the contrastive
    examples' context sentences); ``document_sentences``: (least, most) sentences a document.
    Their defaults write the corpus every embedded table is measured on."""
    sizes = {"train": num_train_documents, "valid": num_valid_documents, "test": num_test_documents}
    for split, size in sizes.items():
        if size <= 0:
            raise ValueError(f"the {split} split needs at least one document, got {size}")
    if num_contrastive_pairs < 0:
        raise ValueError(f"num_contrastive_pairs must be >= 0, got {num_contrastive_pairs}")
    if num_valid_contrastive_pairs is not None and num_valid_contrastive_pairs < 0:
        raise ValueError(f"num_valid_contrastive_pairs must be >= 0, got {num_valid_contrastive_pairs}")
    least, most = document_sentences
    if max_distance < 1:
        raise ValueError(f"max_distance must be at least 1, got {max_distance}")
    if not 1 <= least <= most:
        raise ValueError(f"document_sentences must be (least, most) with 1 <= least <= most, got {document_sentences}")
    if num_contrastive_pairs and most <= max_distance:
        raise ValueError(f"contrastive examples need {max_distance} context sentences: documents of at most "
                         f"{most} sentences have none (raise the document length or lower max_distance)")
    os.makedirs(out_dir, exist_ok=True)
    summary = {"seed": seed, "languages": [SOURCE_LANGUAGE, TARGET_LANGUAGE],
               "documents": {}, "sentences": {}, "phenomenon_sentences": {},
               "vocabulary": {SOURCE_LANGUAGE: len(LEXICON), TARGET_LANGUAGE: len(target_vocabulary())},
               "max_distance": max_distance, "document_sentences": [least, most]}
    for split in SPLITS:
        documents = generate_documents(seed, split, sizes[split], max_distance, document_sentences)
        counts = _write_split(out_dir, split, documents, max_distance)
        summary["documents"][split] = len(documents)
        summary["sentences"][split] = sum(len(d) for d in documents)
        summary["phenomenon_sentences"][split] = counts
    if num_valid_contrastive_pairs is None:
        num_valid_contrastive_pairs = num_contrastive_pairs
    for directory, stream, num_pairs, key in (
            ("consistency", "contrastive", num_contrastive_pairs, "contrastive_examples"),
            ("valid_consistency", "valid-contrastive", num_valid_contrastive_pairs, "valid_contrastive_examples")):
        sets = generate_contrastive_sets(seed, num_pairs, stream=stream, max_distance=max_distance,
                                         document_sentences=document_sentences)
        summary[key] = {}
        summary[f"{key}_by_distance"] = {
            phenomenon: {bucket_name(b): sum(b[0] <= e["ctx_dist"] <= b[1] for e in examples)
                         for b in distance_buckets(max_distance)} for phenomenon, examples in sets.items()}
        for phenomenon, examples in sets.items():
            with atomic_write(os.path.join(out_dir, directory, f"{phenomenon}.json")) as handle:
                json.dump(examples, handle, ensure_ascii=False)
                handle.write("\n")
            summary[key][phenomenon] = len(examples)
    return summary


def _sentence_range(text: str) -> Tuple[int, int]:
    try:
        least, most = (int(part) for part in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LEAST-MOST, e.g. 30-50, got {text!r}") from None
    if not 1 <= least <= most:
        raise argparse.ArgumentTypeError(f"expected 1 <= LEAST <= MOST, got {text!r}")
    return least, most


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_long_range_arguments(parser: argparse.ArgumentParser) -> None:
    """--max-distance and --document-sentences (also python -m rfa_doc_mt.data.prepare synthetic's)."""
    parser.add_argument("--max-distance", type=_positive, default=CONTEXT_SENTENCES, metavar="D",
                        help=f"largest antecedent distance in sentences (default {CONTEXT_SENTENCES}); above "
                             f"{CONTEXT_SENTENCES} distances are balanced over the buckets 1, 2-3, 4-7, 8-14, ...")
    parser.add_argument("--document-sentences", type=_sentence_range, default=DOCUMENT_SENTENCES,
                        metavar="LEAST-MOST", help="sentences per document (default %d-%d)" % DOCUMENT_SENTENCES)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m rfa_doc_mt.data.synthetic",
        description="Write the synthetic document-level corpus (src -> tgt) and its contrastive sets.")
    parser.add_argument("out_dir", help="output directory")
    parser.add_argument("--seed", type=int, default=1, help="random seed (same seed, same bytes)")
    parser.add_argument("--train-documents", type=int, default=2000)
    parser.add_argument("--valid-documents", type=int, default=100)
    parser.add_argument("--test-documents", type=int, default=100)
    parser.add_argument("--contrastive-pairs", type=int, default=250,
                        help="mirrored pairs per phenomenon (two examples each)")
    parser.add_argument("--valid-contrastive-pairs", type=int, default=None,
                        help="mirrored pairs per phenomenon of the validation sets (default: --contrastive-pairs)")
    add_long_range_arguments(parser)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    summary = write_corpus(args.out_dir, seed=args.seed, num_train_documents=args.train_documents,
                           num_valid_documents=args.valid_documents, num_test_documents=args.test_documents,
                           num_contrastive_pairs=args.contrastive_pairs,
                           num_valid_contrastive_pairs=args.valid_contrastive_pairs,
                           max_distance=args.max_distance, document_sentences=args.document_sentences)
    json.dump(summary, sys.stdout, indent=2)
    print(f"\nwritten to {args.out_dir} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return summary


if __name__ == "__main__":
    main()
