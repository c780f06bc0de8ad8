"""s-BLEU and d-BLEU through sacrebleu (Wu et al. 2022, §4 reports d-BLEU; both are printed).

* s-BLEU: corpus BLEU over sentences (the current sentence of every window).
* d-BLEU: corpus BLEU over documents, each document's sentences joined by a space.

Both come with sacrebleu's signature so that a score is never separated from its settings, and
with the length of the translations against the references' (sacrebleu's token counts, the
ratio its brevity penalty reads): a model that runs on past the end of its sentences scores low
on BLEU however well it predicts the reference, and the ratio says so.
"""

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import List, Sequence

from sacrebleu.metrics import BLEU

from ..data.io import (
    DataError,
    Document,
    atomic_write,
    document_offsets,
    read_docs,
    read_lines,
)


@dataclass
class BleuScore:
    score: float
    signature: str
    length_ratio: float  # the translations' tokens over the references' (sacrebleu's tokenization)

    def __str__(self) -> str:
        return f"{self.score:.2f} ({self.signature}), length ratio {self.length_ratio:.3f}"


def join_documents(sentences: Sequence[str], documents: Sequence[Document]) -> List[str]:
    offsets = document_offsets(documents)
    if offsets[-1] != len(sentences):
        raise DataError(f"documents cover {offsets[-1]} sentences but there are {len(sentences)}")
    return [" ".join(sentences[offsets[d]:offsets[d + 1]]) for d in range(len(documents))]


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> BleuScore:
    if len(hypotheses) != len(references):
        raise DataError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = BLEU(tokenize=tokenize)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    ratio = result.sys_len / result.ref_len if result.ref_len else float("nan")
    return BleuScore(result.score, str(metric.get_signature()), ratio)


def sentence_and_document_bleu(hypotheses: Sequence[str], references: Sequence[str],
                               documents: Sequence[Document], tokenize: str = "13a") -> dict:
    """{"s_bleu": BleuScore, "d_bleu": BleuScore} for aligned hypothesis/reference sentences."""
    return {
        "s_bleu": corpus_bleu(hypotheses, references, tokenize),
        "d_bleu": corpus_bleu(join_documents(hypotheses, documents),
                              join_documents(references, documents), tokenize),
    }


def read_document_files(hypothesis_path: str, reference_path: str):
    """Translations and references in a document form (``<d>`` lines, empty lines between
    documents: what scripts/translate.sh writes and Maruf et al. release), checked against each
    other: (hypotheses, references, documents)."""
    from ..data.plain_text import check_parallel_text, read_documents

    # a model may give an empty translation: an empty line inside a <d> document is one
    hypotheses = read_documents(hypothesis_path, empty_sentences=True)
    references = read_documents(reference_path)
    check_parallel_text(hypotheses, references)
    documents = [Document(document.name, len(document.sentences)) for document in hypotheses.documents]
    return hypotheses.sentences, references.sentences, documents


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description="s-BLEU and d-BLEU of document translations (sacrebleu)")
    parser.add_argument("--decoded", metavar="PREFIX",
                        help="score PREFIX.hyp/.ref/.docs written by scripts/decode.sh, after checking that they "
                             "are the finished result of PREFIX.generate.log and its checkpoint (PREFIX.decode.json)")
    parser.add_argument("--checkpoint", help="with --decoded: require PREFIX.hyp to be decoded with this checkpoint")
    parser.add_argument("--hyp", help="translations, one sentence per line, in document order")
    parser.add_argument("--ref", help="references, aligned with --hyp")
    parser.add_argument("--docs", help="document boundaries of --hyp (.docs file); without it, --hyp and --ref "
                                       "mark their documents themselves (<d> lines or empty lines between them)")
    parser.add_argument("--tokenize", default="13a", help="sacrebleu tokenizer (zh for Chinese targets)")
    parser.add_argument("--json", help="also write the scores here")
    args = parser.parse_args(argv)
    if args.decoded:
        from ..generation.collect import verify_decoded

        verify_decoded(args.decoded, args.checkpoint)
        for name in ("hyp", "ref", "docs"):
            setattr(args, name, getattr(args, name) or f"{args.decoded}.{name}")
    elif args.checkpoint:
        parser.error("--checkpoint goes with --decoded")
    missing = [f"--{name}" for name in ("hyp", "ref") if not getattr(args, name)]
    if missing:
        parser.error(f"give --decoded PREFIX, or {', '.join(missing)} (and --docs unless they mark their documents)")
    if args.docs:
        hypotheses, references = read_lines(args.hyp), read_lines(args.ref)
        if len(hypotheses) != len(references):
            raise DataError(f"{args.hyp} has {len(hypotheses)} lines but {args.ref} has {len(references)}")
        documents = read_docs(args.docs, num_sentences=len(hypotheses))
    else:
        hypotheses, references, documents = read_document_files(args.hyp, args.ref)
    scores = sentence_and_document_bleu(hypotheses, references, documents, args.tokenize)
    for name, score in scores.items():
        print(f"{name[0]}-BLEU = {score}")
    if args.json:
        with atomic_write(args.json) as handle:
            json.dump({name: asdict(score) for name, score in scores.items()}, handle, indent=2)
    return scores


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
