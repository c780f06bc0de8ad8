"""Documents in order for the recurrent-memory model (paper 004): training, validation and
``fairseq-generate`` carry each document's memory from one batch to the next.

The ``doc_translation`` task calls these with ``--recurrent-memory``. Its batches hold sentence
t of every document of a group (``window["document"]``, ``window["position"]``); a group's
batches come in sentence order, groups one after the other (data/windows.py). A
:class:`DocumentMemories` keeps, per document of the current group, the memory for its next
sentence; a document that has ended simply has no row in later batches, and position 0 starts
from the model's learned initial memory.

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
* Decoding (:func:`inference_step`): each sentence is translated with the current memories
  (beam search repeats and reorders them with the encoder output); once it is finished, the
  source memory is updated from the encoder states and the target memory from a
  teacher-forced pass over the model's own best translation (not the reference).
"""

import logging
from contextlib import contextmanager
from typing import Dict, List, Sequence, Tuple

import torch
from fairseq.data import data_utils
from fairseq.optim.amp_optimizer import AMPOptimizer
from torch import Tensor

logger = logging.getLogger(__name__)

DocumentMemory = Dict[str, List[Tensor]]


class DocumentMemories:
    """The memory of each document of the current document group, between batches.

    ``keep(documents, positions, memory)`` stores row i of ``memory`` as the memory document
    ``documents[i]`` reads at sentence ``positions[i]``; ``gather`` builds a batch of memories
    for (document, position) rows: the learned initial memory at position 0, else the stored
    row. A row stored for another position (a sentence filtered out of the batches, training
    resumed in the middle of a group) is used with a warning; a missing one falls back to the
    initial memory with a warning.

    ``detach``: keep detached copies (between batches), or the rows with their graph (the memory
    a recomputed sentence wrote, for the sentence after it).
    """

    def __init__(self, detach: bool = True):
        self.detach = detach
        self.rows: Dict[int, Tuple[int, DocumentMemory]] = {}
        self.warnings = 0

    def clear(self) -> None:
        self.rows = {}

    def keep(self, documents: Sequence[int], positions: Sequence[int], memory: DocumentMemory) -> None:
        for row, (document, position) in enumerate(zip(documents, positions)):
            self.rows[int(document)] = (int(position), {
                side: [(m.detach() if self.detach else m)[row:row + 1] for m in memories]
                for side, memories in memory.items()})

    def gather(self, model, documents: Sequence[int], positions: Sequence[int]) -> DocumentMemory:
        if all(int(position) == 0 for position in positions):
            self.clear()  # a new document group starts: nothing stored is needed any more
        initial = model.initial_document_memory(1)
        rows = []
        for document, position in zip(documents, positions):
            document, position = int(document), int(position)
            stored = self.rows.get(document)
            if position == 0:
                rows.append(initial)
                continue
            if stored is None or stored[0] != position:
                self.warn(f"document {document}, sentence {position + 1}: "
                          + ("no memory kept, reading the initial memory" if stored is None else
                             f"the memory kept is for sentence {stored[0] + 1}; using it"))
            rows.append(initial if stored is None else stored[1])
        return {side: [torch.cat([row[side][layer] for row in rows]) for layer in range(len(initial[side]))]
                for side in initial}

    def warn(self, message: str) -> None:
        if self.warnings < 5:
            logger.warning(f"recurrent memory: {message} (documents out of order? resumed mid-epoch?)")
        self.warnings += 1


def require_memory_model(model) -> None:
    if not hasattr(model, "initial_document_memory"):
        raise TypeError(f"--recurrent-memory needs a model with a document memory (memory_doc_transformer), "
                        f"not {type(model).__name__}")


def documents_and_positions(sample) -> Tuple[List[int], List[int]]:
    window = sample.get("window") or {}
    if "document" not in window or "position" not in window:
        raise RuntimeError("the recurrent-memory model needs document-ordered batches "
                           "(doc_translation --recurrent-memory)")
    return window["document"].tolist(), window["position"].tolist()


def shift_positions(positions: Sequence[int], by: int = 1) -> List[int]:
    return [position + by for position in positions]


@contextmanager
def captured_output(model):
    """Capture what ``model``'s forward returns while a criterion calls it."""
    outputs = []
    handle = model.register_forward_hook(lambda module, inputs, output: outputs.append(output))
    try:
        yield outputs
    finally:
        handle.remove()


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


def collate_sentences(sources: Sequence[Tensor], targets: Sequence[Tensor], pad: int, eos: int,
                      device=None) -> dict:
    """EOS-terminated sentences -> a batch as the task collates it: ``net_input`` (src_tokens,
    src_lengths, prev_output_tokens: EOS + target, right-padded) and ``target``."""
    batch = {
        "net_input": {
            "src_tokens": data_utils.collate_tokens(list(sources), pad, eos),
            "src_lengths": torch.tensor([len(s) for s in sources]),
            "prev_output_tokens": data_utils.collate_tokens(list(targets), pad, eos, move_eos_to_beginning=True),
        },
        "target": data_utils.collate_tokens(list(targets), pad, eos),
    }
    if device is not None:
        batch["net_input"] = {name: value.to(device) for name, value in batch["net_input"].items()}
        batch["target"] = batch["target"].to(device)
    return batch


def memory_after_sentences(model, src_tokens: Tensor, src_lengths: Tensor, translations: Sequence[Tensor],
                           memory: DocumentMemory) -> DocumentMemory:
    """The memories after each row's sentence: the source memory from the encoder states, the
    target memory from a teacher-forced pass over ``translations`` (EOS-terminated token
    tensors, one per row: the model's own best translations)."""
    dictionary = model.decoder.dictionary
    prev_output_tokens = data_utils.collate_tokens(
        [t.to(src_tokens.device) for t in translations], dictionary.pad(), dictionary.eos(),
        move_eos_to_beginning=True)
    _, extra = model(src_tokens, src_lengths, prev_output_tokens, document_memory=memory, features_only=True)
    return extra["document_memory"]


def inference_step(memories: DocumentMemories, generator, models, sample, prefix_tokens=None,
                   constraints=None):
    """Translate one sentence position of a document group with the current memories, then
    update them from the best translations (see the module docstring)."""
    if len(models) != 1:
        raise NotImplementedError("the recurrent-memory model decodes with one model (no ensembles): "
                                  "each model would need its own memories")
    model = models[0]
    require_memory_model(model)
    documents, positions = documents_and_positions(sample)
    memory = memories.gather(model, documents, positions)
    net_input = sample["net_input"]
    with torch.no_grad():
        net_input["document_memory"] = memory
        try:
            hypotheses = generator.generate(models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        finally:
            del net_input["document_memory"]
        best = [beam[0]["tokens"] for beam in hypotheses]
        next_memory = memory_after_sentences(model, net_input["src_tokens"], net_input["src_lengths"], best, memory)
    memories.keep(documents, shift_positions(positions), next_memory)
    return hypotheses
