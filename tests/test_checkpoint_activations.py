"""Activation checkpointing (``--checkpoint-activations``) recomputes each layer's forward during
the backward pass. The recomputation must see what the forward saw: the sentence information
the model hands to its attention modules (sentence starts, sentence ids, the memory) and the
random matrix RFA drew for that forward. For every family, a training step with checkpointing
gives the loss and gradients of the same step without it (dropout off).

Tolerance: both runs execute the same operations on the same inputs; only the order in which
autograd accumulates a parameter's gradient contributions may differ, so the bound is the fp32
bound of a decoder output's accumulation path (conftest.transformer_terms) at the gradient's
magnitude, with the log-softmax over the vocabulary and the sum over the batch's tokens.
"""

import pytest
import torch
from conftest import assert_fp32_close, build_model, transformer_terms

from rfa_doc_mt.models.build import dictionary_task, toy_dictionary
from rfa_doc_mt.models.memory_transformer import MemoryDocTransformerModel

DICTIONARY, SEP = toy_dictionary(40)
WORDS = list(range(DICTIONARY.nspecial, SEP))
PAD, EOS = DICTIONARY.pad(), DICTIONARY.eos()
TASK = dictionary_task(DICTIONARY, SEP)

FAMILIES = {
    "transformer": ("doc_transformer_tiny", []),
    "rfa": ("rfa_doc_transformer_tiny", ["--rfa-gate", "sgate", "--rfa-cross-gate"]),
    "long-short": ("long_short_doc_transformer_tiny", []),
    "lsh": ("lsh_doc_transformer_tiny",
            ["--lsh-attention", "encoder-self,decoder-self,cross", "--lsh-chunk-size", "4"]),
    "memory": ("memory_doc_transformer_tiny", []),
}


def windows(rows, generator):
    """[batch, time] windows of several sentences joined by the separator, right-padded, EOS-ended."""
    length = max(sum(sentence) + len(sentence) for sentence in rows)
    tokens = torch.full((len(rows), length), PAD)
    for b, sentences in enumerate(rows):
        row = []
        for s, words in enumerate(sentences):
            row += torch.randint(WORDS[0], WORDS[-1] + 1, (words,), generator=generator).tolist()
            row.append(SEP if s < len(sentences) - 1 else EOS)
        tokens[b, :len(row)] = torch.tensor(row)
    return tokens


def training_step(model, batches):
    """Sum of the token NLL over ``batches`` read in order (the memory model carries its memory
    from one to the next, as the task's sentence steps do); returns (loss, {name: gradient})."""
    model.train()
    model.zero_grad()
    model.set_num_updates(7)  # fairseq calls it before every micro-batch
    loss, memory = 0.0, None
    for src, target in batches:
        prev = torch.cat([torch.full((target.size(0), 1), EOS), target[:, :-1]], 1)
        prev = prev.masked_fill(prev.eq(EOS) & (torch.arange(prev.size(1)) > 0), PAD)
        extra = {"document_memory": memory} if isinstance(model, MemoryDocTransformerModel) else {}
        output = model(src, src.ne(PAD).sum(1), prev, **extra)
        if extra:
            memory = output[1]["document_memory"]
        lprobs = model.get_normalized_probs(output, log_probs=True)
        loss = loss + torch.nn.functional.nll_loss(lprobs.flatten(0, 1), target.flatten(), ignore_index=PAD,
                                                   reduction="sum")
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpointed_training_step_equals_the_plain_one(family):
    architecture, options = FAMILIES[family]
    options = ["--dropout", "0", "--share-all-embeddings", *options]
    plain = build_model(architecture, TASK, *options)
    checkpointed = build_model(architecture, TASK, *options, "--checkpoint-activations")
    checkpointed.load_state_dict(plain.state_dict())
    generator = torch.Generator().manual_seed(3)
    if family == "memory":  # one sentence per row, two sentence steps
        batches = [(windows([[3], [5], [2]], generator), windows([[4], [2], [3]], generator)) for _ in range(2)]
    else:
        batches = [(windows([[3, 4, 2], [5, 1], [2, 2, 3]], generator),
                    windows([[4, 3, 3], [2, 4], [3, 1, 2]], generator))]
    loss, gradients = training_step(plain, batches)
    loss_checkpointed, gradients_checkpointed = training_step(checkpointed, batches)
    assert gradients and sorted(gradients) == sorted(gradients_checkpointed)
    source, target = (max(b[i].size(1) for b in batches) for i in (0, 1))
    tokens = sum(int(b[1].ne(PAD).sum()) for b in batches)
    # features: RFA's dot products over its random features (tiny: 32 per head)
    terms = transformer_terms(128, 256, 2, 2, source, target, features=32 if family == "rfa" else 0,
                              vocabulary=len(DICTIONARY)) + tokens
    assert_fp32_close(loss_checkpointed, loss, terms, name=f"{family} loss")
    # Some gradients are zero up to cancellation (softmax ignores a key bias): the terms that
    # cancel are of the size of the model's gradients, so the magnitude is the largest of them.
    largest = max(gradient.abs().max().item() for gradient in gradients.values())
    for name, gradient in gradients.items():
        assert_fp32_close(gradients_checkpointed[name], gradient, terms, magnitude=largest,
                          name=f"{family} gradient of {name}")
