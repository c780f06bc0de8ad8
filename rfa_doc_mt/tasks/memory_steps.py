"""The recurrent-memory model's training and validation steps (Feng et al. 2022), which the
``doc_translation`` task runs with ``--recurrent-memory``; decoding is in
generation/memory_decoding.py.

* Training (:func:`train_step`): one batch is an optimisation window of consecutive sentence
  positions (§5.3); the gradients of its sentences are accumulated before the update. The loss
  of sentence t must reach sentence t-1's computation through the memory ``M^t``, and nothing
  earlier (§4.2). So each step first recomputes sentence t-1, without loss, from the memory
  ``M^{t-1}`` it read, *detached*, which gives ``M^t`` with a graph reaching back to sentence
  t-1 only; sentence t reads it, and its loss is back-propagated at once. (Reusing sentence
  t-1's own forward pass instead would let the gradient flow on through every memory sentence
  t-1 read, e.g. source memory -> encoder output -> decoder states -> target memory.) Each
  sentence thus runs twice: about twice the forward cost of a sentence-level step, with the
  graphs of two sentences alive at a time. A window that does not start a document holds the
  sentence before it as a *context step* (data/windows.py).
* Validation (:func:`valid_step`): one sentence position per batch, no gradient.
"""

from typing import Sequence

import torch
from fairseq.optim.amp_optimizer import AMPOptimizer

from ..generation.memory_decoding import (
    DocumentMemories,
    DocumentMemory,
    captured_output,
    documents_and_positions,
    require_memory_model,
    shift_positions,
)


def next_memory_of(outputs) -> DocumentMemory:
    if len(outputs) != 1:
        raise RuntimeError(f"the criterion called the model {len(outputs)} times; the recurrent-memory "
                           "task needs exactly one forward pass per sentence step")
    return outputs[0][1]["document_memory"]


def merge_logging_outputs(logging_outputs: Sequence[dict]) -> dict:
    """One logging output for the whole window: the criterion's per-step figures summed."""
    merged: dict = {}
    for logging_output in logging_outputs:
        for key, value in logging_output.items():
            merged[key] = merged[key] + value if key in merged else value
    return merged


def train_step(memories: DocumentMemories, sample, model, criterion, optimizer, update_num: int,
               ignore_grad: bool = False):
    """One update over an optimisation window (see the module docstring).

    ``memories`` keeps, detached, the memory each document's last sentence read: the next
    window starts by recomputing that sentence (its context step) from it.
    """
    require_memory_model(model)
    model.train()
    model.set_num_updates(update_num)
    steps = sample["steps"] if "steps" in sample else [sample]
    context_steps = sample.get("context_steps", 0)
    total_loss, sample_size, logging_outputs = 0.0, 0, []
    for number in range(context_steps, len(steps)):
        step = steps[number]
        documents, positions = documents_and_positions(step)
        with torch.autograd.profiler.record_function("forward"):
            with torch.autocast("cuda", enabled=isinstance(optimizer, AMPOptimizer)):
                if number == 0:
                    if any(positions):
                        raise RuntimeError("a training window after a document's first sentence must "
                                           "start with a context step (data/windows.py)")
                    memory = memories.gather(model, documents, positions)
                else:
                    memory = memory_from_previous_sentence(memories, steps[number - 1], model, documents,
                                                           positions)
                # the next step recomputes this sentence from what it reads now, detached
                memories.keep(documents, positions, memory)
                with captured_output(model) as outputs:
                    loss, size, logging_output = criterion(
                        model, dict(step, net_input=dict(step["net_input"], document_memory=memory)))
                next_memory_of(outputs)  # one forward pass per step, as the recomputation assumes
        if ignore_grad:
            loss *= 0
        with torch.autograd.profiler.record_function("backward"):
            optimizer.backward(loss)
        total_loss += loss.detach()
        sample_size += size
        logging_outputs.append(logging_output)
    return total_loss, sample_size, merge_logging_outputs(logging_outputs)


def memory_from_previous_sentence(memories: DocumentMemories, previous_step, model, documents, positions):
    """``M^t`` for sentence t of ``documents``: sentence t-1 (``previous_step``) recomputed from
    the detached memory it read, so the graph of ``M^t`` reaches sentence t-1 and no further."""
    previous_documents, previous_positions = documents_and_positions(previous_step)
    net_input = previous_step["net_input"]
    going_on = set(documents)
    rows = [row for row, document in enumerate(previous_documents) if document in going_on]
    if len(rows) < len(previous_documents):  # documents that ended need no memory
        selected = torch.tensor(rows, device=net_input["src_tokens"].device)
        net_input = {name: value.index_select(0, selected) for name, value in net_input.items()}
        previous_documents = [previous_documents[row] for row in rows]
        previous_positions = [previous_positions[row] for row in rows]
    read = memories.gather(model, previous_documents, previous_positions)
    _, extra = model(**dict(net_input, document_memory=read), features_only=True)
    written = DocumentMemories(detach=False)
    written.keep(previous_documents, shift_positions(previous_positions), extra["document_memory"])
    return written.gather(model, documents, positions)


def valid_step(memories: DocumentMemories, sample, model, criterion):
    """The loss of one sentence position, reading and then keeping the documents' memories."""
    if "steps" in sample:
        raise ValueError("validation batches hold one sentence position each (no sentence_steps)")
    require_memory_model(model)
    model.eval()
    documents, positions = documents_and_positions(sample)
    with torch.no_grad():
        memory = memories.gather(model, documents, positions)
        with captured_output(model) as outputs:
            loss, sample_size, logging_output = criterion(
                model, dict(sample, net_input=dict(sample["net_input"], document_memory=memory)))
        memories.keep(documents, shift_positions(positions), next_memory_of(outputs))
    return loss, sample_size, logging_output
