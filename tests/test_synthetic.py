"""The embedded synthetic corpus: determinism, file consistency, phenomena and contrastive sets.

The checks on the written files re-derive each phenomenon from the source words themselves
(not from the generator's bookkeeping), so a generator that drifts from its own rules fails.
"""

import collections
import filecmp
import hashlib
import json
import math
import os

import pytest

from rfa_doc_mt.data import synthetic
from rfa_doc_mt.data.io import document_offsets, read_docs, read_lines
from rfa_doc_mt.data.synthetic import (
    AMBIGUOUS_NOUNS,
    DOES,
    LEXICON,
    PHENOMENA,
    PRONOUN,
    PRONOUN_TARGET,
    SEPARATOR,
    TOO_TARGET,
    YOU,
    YOU_TARGET,
    UnresolvedContext,
    translate_document,
    translate_sentence,
    write_corpus,
)

NUM_PAIRS = 250


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The default-size corpus, written once for the module."""
    out_dir = str(tmp_path_factory.mktemp("synthetic"))
    summary = write_corpus(out_dir, seed=1, num_contrastive_pairs=NUM_PAIRS)
    return out_dir, summary


def read_documents(out_dir, split):
    """[(source sentences, target sentences)] per document of a written split."""
    sources = read_lines(os.path.join(out_dir, f"{split}.src"))
    targets = read_lines(os.path.join(out_dir, f"{split}.tgt"))
    offsets = document_offsets(read_docs(os.path.join(out_dir, f"{split}.docs"), len(sources)))
    return [(sources[a:b], targets[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]


def read_contrastive(out_dir, phenomenon):
    with open(os.path.join(out_dir, "consistency", f"{phenomenon}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def kind(word):
    return LEXICON[word].kind


def is_cued_mention(tokens, index):
    return (index > 0 and kind(tokens[index - 1]) == "cue_adjective"
            and LEXICON[tokens[index - 1]].attribute[0] == tokens[index])


# ---------------------------------------------------------------------------------------
# Determinism and file consistency
# ---------------------------------------------------------------------------------------

SMALL = dict(num_train_documents=60, num_valid_documents=10, num_test_documents=10, num_contrastive_pairs=12)


def written_files(out_dir):
    return sorted(os.path.relpath(os.path.join(root, name), out_dir)
                  for root, _, names in os.walk(out_dir) for name in names)


def test_same_seed_gives_identical_bytes(tmp_path):
    first = write_corpus(str(tmp_path / "a"), seed=7, **SMALL)
    second = write_corpus(str(tmp_path / "b"), seed=7, **SMALL)
    assert first == second
    files = written_files(str(tmp_path / "a"))
    assert files == written_files(str(tmp_path / "b"))
    expected = {f"{split}.{suffix}" for split in ("train", "valid", "test") for suffix in ("src", "tgt", "docs")}
    expected |= {os.path.join(directory, f"{p}.json") for directory in ("consistency", "valid_consistency")
                 for p in PHENOMENA}
    assert set(files) == expected
    for name in files:
        assert filecmp.cmp(tmp_path / "a" / name, tmp_path / "b" / name, shallow=False), name


def test_different_seeds_give_different_corpora(tmp_path):
    write_corpus(str(tmp_path / "a"), seed=7, **SMALL)
    write_corpus(str(tmp_path / "b"), seed=8, **SMALL)
    for name in ["train.src", "train.tgt", "valid.src", "test.src"] + [
            os.path.join("consistency", f"{p}.json") for p in PHENOMENA]:
        assert not filecmp.cmp(tmp_path / "a" / name, tmp_path / "b" / name, shallow=False), name


def test_splits_do_not_repeat_each_other(corpus):
    out_dir, _ = corpus
    train = read_lines(os.path.join(out_dir, "train.src"))
    valid = read_lines(os.path.join(out_dir, "valid.src"))
    assert train[:len(valid)] != valid


def test_line_counts_match_document_files(corpus):
    out_dir, summary = corpus
    for split in ("train", "valid", "test"):
        sources = read_lines(os.path.join(out_dir, f"{split}.src"))
        targets = read_lines(os.path.join(out_dir, f"{split}.tgt"))
        assert len(sources) == len(targets)
        documents = read_docs(os.path.join(out_dir, f"{split}.docs"), num_sentences=len(sources))
        assert len(documents) == summary["documents"][split]
        assert len(sources) == summary["sentences"][split]
        assert all(6 <= d.num_sentences <= 12 for d in documents)
        assert len({d.name for d in documents}) == len(documents)
        for source, target in zip(sources, targets):
            assert 4 <= len(source.split(" ")) <= 9, source
            assert target.strip() and "  " not in target and target == target.lower()


def test_language_is_small(corpus):
    out_dir, summary = corpus
    for suffix in ("src", "tgt"):
        words = {w for line in read_lines(os.path.join(out_dir, f"train.{suffix}")) for w in line.split()}
        assert len(words) <= 300
        assert len(words) <= summary["vocabulary"][suffix]


def test_target_side_is_the_generators_translation(corpus):
    out_dir, _ = corpus
    for split in ("valid", "test"):
        for sources, targets in read_documents(out_dir, split):
            assert [t.target for t in translate_document(sources)] == targets


def test_phenomena_are_frequent_and_balanced(corpus):
    _, summary = corpus
    counts = summary["phenomenon_sentences"]["train"]
    fraction = sum(counts.values()) / summary["sentences"]["train"]
    assert 0.3 <= fraction <= 0.55, fraction
    for phenomenon in PHENOMENA:
        assert counts[phenomenon] >= 0.15 * sum(counts.values()), counts


def test_main_prints_the_summary(tmp_path, capsys):
    summary = synthetic.main([str(tmp_path), "--seed", "3", "--train-documents", "5", "--valid-documents", "2",
                              "--test-documents", "2", "--contrastive-pairs", "3"])
    assert json.loads(capsys.readouterr().out) == summary
    assert summary["documents"] == {"train": 5, "valid": 2, "test": 2}
    assert summary["contrastive_examples"] == {p: 6 for p in PHENOMENA}


# ---------------------------------------------------------------------------------------
# The translation rules
# ---------------------------------------------------------------------------------------

def words(kind_name, attribute=None):
    return [w for w, e in LEXICON.items() if e.kind == kind_name and (attribute is None or e.attribute == attribute)]


def test_rules_resolve_from_context_and_refuse_without_it():
    formal, informal = words("title", "formal")[0], words("title", "informal")[0]
    adjective, thing = words("adjective")[0], words("inanimate_noun")[0]
    you_sentence = f"{YOU} su nimi {adjective}"
    with pytest.raises(UnresolvedContext):
        translate_sentence([], you_sentence)
    filler = f"ka {thing} su {adjective}"
    assert translate_sentence([f"{formal} , {filler}", filler], you_sentence).target.split()[0] == YOU_TARGET["formal"]
    assert translate_sentence([f"{formal} , {filler}", f"{informal} , {filler}"],
                              you_sentence).target.split()[0] == YOU_TARGET["informal"]
    # The cue must be at most 3 sentences back.
    with pytest.raises(UnresolvedContext):
        translate_sentence([f"{formal} , {filler}", filler, filler, filler], you_sentence)
    man, woman = words("animate_noun", "masculine")[0], words("animate_noun", "feminine")[0]
    pronoun_sentence = f"{PRONOUN} su {adjective} {words('adverb')[0]}"
    assert translate_sentence([f"ka {woman} su {adjective}", f"ka {man} su {adjective}"],
                              pronoun_sentence).target.split()[0] == PRONOUN_TARGET["masculine"]
    decision, = translate_sentence([f"ka {woman} su {adjective}", filler], pronoun_sentence).decisions
    assert (decision.phenomenon, decision.ctx_dist, decision.choice) == ("anaphora", 2, PRONOUN_TARGET["feminine"])
    # Adjectives follow their noun in the target.
    source = f"ka {adjective} {thing} su {adjective}"
    assert translate_sentence([], source).target.split() == [
        "le", LEXICON[thing].target, LEXICON[adjective].target, "ir", LEXICON[adjective].target]
    with pytest.raises(ValueError):
        translate_sentence([], "ka notaword su nimi")


# ---------------------------------------------------------------------------------------
# Every phenomenon sentence has its cue within 3 sentences (checked from the words)
# ---------------------------------------------------------------------------------------

def most_recent(previous, matches):
    """(distance, token) of the last match in the nearest previous sentence, or None."""
    for distance, tokens in enumerate(reversed(previous), start=1):
        for index in range(len(tokens) - 1, -1, -1):
            if matches(tokens, index):
                return distance, tokens[index]
    return None


def test_every_phenomenon_sentence_has_its_cue_within_three_sentences(corpus):
    out_dir, _ = corpus
    seen = collections.Counter()
    for sources, targets in read_documents(out_dir, "train"):
        documents_tokens = [s.split(" ") for s in sources]
        formalities = {LEXICON[w].attribute for tokens in documents_tokens for w in tokens if kind(w) == "title"}
        assert len(formalities) <= 1, sources  # one register per document
        senses = collections.defaultdict(set)
        for i, (tokens, target) in enumerate(zip(documents_tokens, targets)):
            previous = documents_tokens[max(0, i - 3):i]
            target_tokens = target.split(" ")
            found_phenomena = 0
            if YOU in tokens:
                found_phenomena += 1
                assert not any(kind(w) == "title" for w in tokens), sources[i]
                cue = most_recent(previous, lambda t, j: kind(t[j]) == "title")
                assert cue is not None, sources[max(0, i - 3):i + 1]
                assert YOU_TARGET[LEXICON[cue[1]].attribute] in target_tokens
                seen["deixis", cue[0]] += 1
            if PRONOUN in tokens:
                found_phenomena += 1
                assert not any(kind(w) == "animate_noun" for w in tokens), sources[i]
                cue = most_recent(previous, lambda t, j: kind(t[j]) == "animate_noun")
                assert cue is not None, sources[max(0, i - 3):i + 1]
                assert PRONOUN_TARGET[LEXICON[cue[1]].attribute] in target_tokens
                seen["anaphora", cue[0]] += 1
            for j, word in enumerate(tokens):
                if kind(word) != "ambiguous_noun":
                    continue
                if is_cued_mention(tokens, j):
                    senses[word].add(LEXICON[tokens[j - 1]].attribute[1])
                    continue
                found_phenomena += 1
                cue = most_recent(previous, lambda t, k: t[k] == word and is_cued_mention(t, k))
                assert cue is not None, sources[max(0, i - 3):i + 1]
                sense = next(LEXICON[t[k - 1]].attribute[1] for t in reversed(previous)
                             for k in range(len(t)) if t[k] == word and is_cued_mention(t, k))
                assert LEXICON[word].target[sense] in target_tokens
                seen["lex_cohesion", cue[0]] += 1
            if DOES in tokens:
                found_phenomena += 1
                assert not any(kind(w) == "verb" for w in tokens), sources[i]
                cue = most_recent(previous, lambda t, j: kind(t[j]) == "verb")
                assert cue is not None, sources[max(0, i - 3):i + 1]
                assert target_tokens[-2:] == [LEXICON[cue[1]].target, TOO_TARGET]
                seen["ellipsis_vp", cue[0]] += 1
            assert found_phenomena <= 1, sources[i]
        assert all(len(s) == 1 for s in senses.values()), sources  # one sense per document
    # Every distance 1-3 occurs often for every phenomenon.
    for phenomenon in PHENOMENA:
        for distance in (1, 2, 3):
            assert seen[phenomenon, distance] >= 300, (phenomenon, distance, seen)


# ---------------------------------------------------------------------------------------
# The current sentence alone does not decide
# ---------------------------------------------------------------------------------------

def labelled_phenomenon_sentences(documents):
    """{phenomenon: [(source tokens, context tokens, target form)]} read from the words."""
    sense_words = {LEXICON[w].target[s]: s for w in AMBIGUOUS_NOUNS for s in (0, 1)}
    examples = collections.defaultdict(list)
    for sources, targets in documents:
        for i, (source, target) in enumerate(zip(sources, targets)):
            tokens, target_tokens = source.split(" "), target.split(" ")
            context = [w for s in sources[max(0, i - 3):i] for w in s.split(" ")]
            if YOU in tokens:
                label = next(w for w in target_tokens if w in YOU_TARGET.values())
                examples["deixis"].append((tokens, context, label))
            if PRONOUN in tokens:
                label = next(w for w in target_tokens if w in PRONOUN_TARGET.values())
                examples["anaphora"].append((tokens, context, label))
            if any(kind(w) == "ambiguous_noun" and not is_cued_mention(tokens, j) for j, w in enumerate(tokens)):
                label = next(sense_words[w] for w in target_tokens if w in sense_words)
                examples["lex_cohesion"].append((tokens, context, label))
            if DOES in tokens:
                examples["ellipsis_vp"].append((tokens, context, target_tokens[-2]))
    return examples


class NaiveBayes:
    """Multinomial naive Bayes over bags of words, add-one smoothed."""

    def __init__(self, examples):
        self.label_counts = collections.Counter(label for _, label in examples)
        self.word_counts = collections.defaultdict(collections.Counter)
        for features, label in examples:
            self.word_counts[label].update(features)
        self.vocabulary = {w for counts in self.word_counts.values() for w in counts}

    def predict(self, features):
        def score(label):
            counts = self.word_counts[label]
            total = sum(counts.values()) + len(self.vocabulary)
            return math.log(self.label_counts[label]) + sum(
                math.log((counts[w] + 1) / total) for w in features if w in self.vocabulary)
        return max(sorted(self.label_counts), key=score)

    def accuracy(self, examples):
        return sum(self.predict(f) == label for f, label in examples) / len(examples)


def test_current_sentence_does_not_decide_the_target_form(corpus):
    out_dir, _ = corpus
    train_documents = read_documents(out_dir, "train")
    train = labelled_phenomenon_sentences(train_documents)
    train_by_document = collections.defaultdict(list)
    for document in train_documents:
        for phenomenon, examples in labelled_phenomenon_sentences([document]).items():
            train_by_document[phenomenon].append(examples)
    held_out = labelled_phenomenon_sentences(
        [(d, [t.target for t in translate_document(d)]) for d in synthetic.generate_documents(11, "held-out", 1000)])
    for phenomenon in PHENOMENA:
        labels = collections.Counter(label for _, _, label in train[phenomenon])
        majority = max(labels.values()) / sum(labels.values())
        if phenomenon != "ellipsis_vp":
            assert len(labels) == 2 and majority <= 0.55, (phenomenon, labels)
            # Per source word of the current sentence, both forms stay about equally likely:
            # counted once per document (a document repeats its form), a binomial z-score
            # far beyond what ~150 words' worth of chance deviations would reach.
            by_word = collections.defaultdict(collections.Counter)
            for document_examples in train_by_document[phenomenon]:
                for word, label in {(w, label) for tokens, _, label in document_examples for w in tokens}:
                    by_word[word][label] += 1
            for word, counts in by_word.items():
                total = sum(counts.values())
                if total >= 50:
                    z_score = (max(counts.values()) / total - 0.5) * 2 * math.sqrt(total)
                    assert z_score <= 4.5, (phenomenon, word, counts)
        else:
            assert len(labels) == len(synthetic.VERBS) and majority <= 2 / len(labels), labels
        sentence_only = NaiveBayes([(tokens, label) for tokens, _, label in train[phenomenon]])
        accuracy = sentence_only.accuracy([(tokens, label) for tokens, _, label in held_out[phenomenon]])
        chance = 1 / len(labels)
        assert accuracy <= chance + 0.06, (phenomenon, accuracy)
    # The same classifier does use the context when it has it, so the check above has power.
    for phenomenon in ("deixis", "lex_cohesion"):
        with_context = NaiveBayes([(tokens + ["ctx:" + w for w in context], label)
                                   for tokens, context, label in train[phenomenon]])
        accuracy = with_context.accuracy([(tokens + ["ctx:" + w for w in context], label)
                                          for tokens, context, label in held_out[phenomenon]])
        assert accuracy >= 0.9, (phenomenon, accuracy)


# ---------------------------------------------------------------------------------------
# Contrastive sets
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("phenomenon", PHENOMENA)
def test_contrastive_examples_are_well_formed(corpus, phenomenon):
    out_dir, summary = corpus
    examples = read_contrastive(out_dir, phenomenon)
    assert len(examples) == 2 * NUM_PAIRS == summary["contrastive_examples"][phenomenon]
    train_sentences = set(read_lines(os.path.join(out_dir, "train.src")))
    for example in examples:
        assert set(example) == {"src", "dst", "true_ind", "ctx_dist", "group"}
        source = example["src"].split(SEPARATOR)
        candidates = [d.split(SEPARATOR) for d in example["dst"]]
        assert len(source) == 4 and all(len(c) == 4 for c in candidates)
        assert len(candidates) == 2 and example["true_ind"] in (0, 1) and example["ctx_dist"] in (1, 2, 3)
        assert all(c[:3] == candidates[0][:3] for c in candidates)  # differ only in the last sentence
        assert len({c[3] for c in candidates}) == len(candidates)
        translation = translate_sentence(source[:3], source[3])
        assert translation.target == candidates[example["true_ind"]][3]
        decision, = translation.decisions
        assert (decision.phenomenon, decision.ctx_dist) == (phenomenon, example["ctx_dist"])
        # Context sentences decidable inside the window carry their own translation.
        for i in range(3):
            try:
                assert translate_sentence(source[:i], source[i]).target == candidates[0][i]
            except UnresolvedContext:
                pass
    # Sanity: the windows are not all lifted from the training text.
    assert sum(e["src"].split(SEPARATOR)[3] in train_sentences for e in examples) < len(examples)


@pytest.mark.parametrize("phenomenon", PHENOMENA)
def test_contrastive_pairs_are_mirrored(corpus, phenomenon):
    out_dir, _ = corpus
    examples = read_contrastive(out_dir, phenomenon)
    assert len(examples) % 2 == 0
    for first, second in zip(examples[0::2], examples[1::2]):
        first_source, second_source = first["src"].split(SEPARATOR), second["src"].split(SEPARATOR)
        assert first_source[3] == second_source[3]
        assert first_source[:3] != second_source[:3]
        assert [d.split(SEPARATOR)[3] for d in first["dst"]] == [d.split(SEPARATOR)[3] for d in second["dst"]]
        assert first["true_ind"] != second["true_ind"]
        assert first["ctx_dist"] == second["ctx_dist"]
    # Any scorer that reads only the current sentence gets exactly one example per pair right.
    def last_sentence_only_accuracy(score):
        correct = 0
        for example in examples:
            last_source = example["src"].split(SEPARATOR)[3]
            scores = [score(last_source, d.split(SEPARATOR)[3]) for d in example["dst"]]
            correct += scores.index(max(scores)) == example["true_ind"]
        return correct / len(examples)
    assert last_sentence_only_accuracy(lambda s, t: hashlib.sha256((s + "|" + t).encode()).hexdigest()) == 0.5
    assert last_sentence_only_accuracy(lambda s, t: (len(t), t)) == 0.5
    # The context does decide: a rule that reads the window gets every example right.
    assert all(translate_sentence(e["src"].split(SEPARATOR)[:3], e["src"].split(SEPARATOR)[3]).target
               == e["dst"][e["true_ind"]].split(SEPARATOR)[3] for e in examples)
    # ctx_dist and true_ind are balanced.
    distances = collections.Counter(e["ctx_dist"] for e in examples)
    assert set(distances) == {1, 2, 3} and max(distances.values()) - min(distances.values()) <= 2, distances
    positions = collections.Counter(e["true_ind"] for e in examples)
    assert positions[0] == positions[1], positions


# ---------------------------------------------------------------------------------------
# The long-range corpus (max_distance above 3)
# ---------------------------------------------------------------------------------------

LONG = dict(max_distance=14, document_sentences=(18, 24))


def test_distance_buckets_double_up_to_the_largest_distance():
    assert synthetic.distance_buckets(14) == [(1, 1), (2, 3), (4, 7), (8, 14)]
    assert synthetic.distance_buckets(3) == [(1, 1), (2, 3)]
    assert synthetic.distance_buckets(16) == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 16)]
    with pytest.raises(ValueError):
        synthetic.distance_buckets(0)


def test_the_rules_read_as_far_back_as_the_largest_distance():
    formal, adjective = words("title", "formal")[0], words("adjective")[0]
    filler = f"ka {words('inanimate_noun')[0]} su {adjective}"
    context = [f"{formal} , {filler}"] + [filler] * 9  # the title 10 sentences back
    you_sentence = f"{YOU} su nimi {adjective}"
    with pytest.raises(UnresolvedContext):
        translate_sentence(context, you_sentence)  # the default corpus's rules: 3 back
    decision, = translate_sentence(context, you_sentence, max_distance=14).decisions
    assert (decision.ctx_dist, decision.choice) == (10, YOU_TARGET["formal"])
    with pytest.raises(UnresolvedContext):
        translate_sentence(context, you_sentence, max_distance=9)


def test_long_range_documents_place_cues_in_every_bucket_and_translate_by_their_rules():
    documents = synthetic.generate_documents(5, "train", 60, **LONG)
    assert all(18 <= len(d) <= 24 for d in documents)
    seen = collections.Counter()
    for document in documents:
        for translation in translate_document(document, max_distance=14):
            for decision in translation.decisions:
                bucket, = [b for b in synthetic.distance_buckets(14) if b[0] <= decision.ctx_dist <= b[1]]
                seen[decision.phenomenon, bucket] += 1
    # drawn uniformly over the buckets: each phenomenon has cues in each, the farthest included
    for phenomenon in PHENOMENA:
        counts = [seen[phenomenon, b] for b in synthetic.distance_buckets(14)]
        assert min(counts) >= 0.3 * max(counts) > 0, (phenomenon, counts)
    # with the default rules (3 back) these documents cannot be translated: their cues lie farther
    with pytest.raises(UnresolvedContext):
        for document in documents:
            translate_document(document)


def test_long_range_contrastive_sets_balance_the_buckets_and_carry_the_whole_context():
    sets = synthetic.generate_contrastive_sets(3, 8, **LONG)
    for phenomenon, examples in sets.items():
        assert len(examples) == 16
        buckets = collections.Counter(next(b for b in synthetic.distance_buckets(14) if b[0] <= e["ctx_dist"] <= b[1])
                                      for e in examples)
        assert set(buckets.values()) == {4}, (phenomenon, buckets)  # 2 pairs (4 examples) per bucket
        for first, second in zip(examples[0::2], examples[1::2]):
            sources = first["src"].split(SEPARATOR)
            assert len(sources) == 15 and len(first["dst"][0].split(SEPARATOR)) == 15
            assert sources[-1] == second["src"].split(SEPARATOR)[-1] and first["true_ind"] != second["true_ind"]
            # the rules over the 14 context sentences choose the true candidate
            assert translate_sentence(sources[:-1], sources[-1], max_distance=14).target == \
                first["dst"][first["true_ind"]].split(SEPARATOR)[-1]


def test_long_range_corpus_is_written_with_its_settings(tmp_path):
    summary = write_corpus(str(tmp_path / "long"), num_train_documents=5, num_valid_documents=2,
                           num_test_documents=2, num_contrastive_pairs=4, **LONG)
    assert summary["max_distance"] == 14 and summary["document_sentences"] == [18, 24]
    assert summary["contrastive_examples_by_distance"]["deixis"] == {"1": 2, "2-3": 2, "4-7": 2, "8-14": 2}
    for split in ("train", "test"):
        for sources, targets in read_documents(str(tmp_path / "long"), split):
            assert [t.target for t in translate_document(sources, max_distance=14)] == targets
    with pytest.raises(ValueError, match="context sentences"):
        write_corpus(str(tmp_path / "short"), num_train_documents=2, num_contrastive_pairs=2, max_distance=14)
    assert synthetic.main([str(tmp_path / "cli"), "--train-documents", "2", "--valid-documents", "1",
                           "--test-documents", "1", "--contrastive-pairs", "4", "--max-distance", "14",
                           "--document-sentences", "18-24"])["max_distance"] == 14
    for bad in (["--max-distance", "0"], ["--document-sentences", "9-3"], ["--document-sentences", "ten"]):
        with pytest.raises(SystemExit):
            synthetic.main([str(tmp_path / "bad"), *bad])
