"""Documents in order for the recurrent-memory model (Feng et al. 2022): ``fairseq-generate`` carries
each document's memory from one batch to the next (training and validation steps, which use
:class:`DocumentMemories` too: tasks/memory_steps.py).

The ``doc_translation`` task calls these with ``--recurrent-memory``. Its batches hold sentence
t of every document of a group (``window["document"]``, ``window["position"]``); a group's
batches come in sentence order, groups one after the other (data/windows.py). A
:class:`DocumentMemories` keeps, per document of the current group, the memory for its next
sentence; a document that has ended simply has no row in later batches, and position 0 starts
from the model's learned initial memory.

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
