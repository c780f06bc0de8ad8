"""Recurrent-memory transformer (Feng et al. 2022): the model against the baseline, what the memory
carries (forward only, stop-gradient after one sentence), incremental decoding against full
forward passes, document decoding against explicit sentence-by-sentence decoding (beam 1 and
4), document-ordered training batches, two-stage training (checkpoint loading, two learning
rates) and consistency scoring."""

import argparse
import json
import os

import numpy as np
import pytest
import torch
from conftest import (
    assert_fp32_close,
    build_model,
    low_precision_tolerance,
    max_difference,
    transformer_terms,
)
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
)
from fairseq.data import Dictionary
from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
    InverseSquareRootLRScheduleConfig,
    InverseSquareRootSchedule,
)
from fairseq.sequence_generator import SequenceGenerator

import rfa_doc_mt  # noqa: F401  (registers the task and the baseline)
from rfa_doc_mt.data.io import Document
from rfa_doc_mt.data.windows import (
    DocumentWindowDataset,
    collate_sentences,
    document_groups,
    document_ordered_batches,
    group_members,
    memory_training_batches,
    parse_optimization_window,
)
from rfa_doc_mt.generation import memory_decoding
from rfa_doc_mt.generation.memory_decoding import DocumentMemories
from rfa_doc_mt.models.memory_transformer import (
    MemoryDocTransformerModel,
    memory_doc_transformer_tiny,
)
from rfa_doc_mt.modules.recurrent_memory import MemorySelfAttention, RecurrentMemory
from rfa_doc_mt.optim.finetune_adam import FinetuneAdam, FinetuneAdamConfig
from rfa_doc_mt.tasks import memory_steps

DICTIONARY = Dictionary()
WORDS = [DICTIONARY.add_symbol(f"w{k}") for k in range(48)]
SEP = DICTIONARY.add_symbol("<sep>")
PAD, EOS = DICTIONARY.pad(), DICTIONARY.eos()


class Task:
    """The parts of the doc_translation task that build_model and the criterion read."""
    source_dictionary = target_dictionary = DICTIONARY
    source_separator = target_separator = SEP


def build(architecture, *model_args, seed=1):
    return build_model(architecture, Task(), *model_args, seed=seed)


def build_memory(*model_args, seed=1):
    return build("memory_doc_transformer_tiny", *model_args, seed=seed)


def sentence(*words):
    return torch.tensor([WORDS[w] for w in words] + [EOS])


def model_terms(source, target, vocabulary=0):
    """conftest.transformer_terms for the tiny sizes (128 wide, FFN 256, 2 + 2 layers); the
    memory read adds an attention over 16 slots to the top layer of each side."""
    memory_read = 2 * 128 + 16
    return transformer_terms(128, 256, 2, 2, source, target, vocabulary=vocabulary) + 2 * memory_read


# a document of four sentence pairs, each sentence with its own words (lengths differ)
SOURCES = [sentence(0, 1, 2), sentence(3, 4), sentence(5, 6, 7, 8), sentence(9)]
TARGETS = [sentence(10, 11), sentence(12, 13, 14), sentence(15), sentence(16, 17)]


def read_document(model, sources, targets, memory=None):
    """Teacher-forced, one sentence at a time: log-probabilities per sentence [1, time, vocab]."""
    outputs = []
    for source, target in zip(sources, targets):
        batch = collate_sentences([source], [target], PAD, EOS)
        output = model(**batch["net_input"], document_memory=memory)
        outputs.append(model.get_normalized_probs(output, log_probs=True))
        memory = output[1]["document_memory"]
    return outputs, memory


# ---- the memory module ------------------------------------------------------------------------


def test_update_masks_padding_and_slots_differ():
    torch.manual_seed(0)
    memory = RecurrentMemory(16, 4, slots=6, ffn_embed_dim=32).eval()
    states = torch.randn(5, 2, 16)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    initial = memory.initial(2)
    batched = memory.update(states, padding, initial)
    alone = memory.update(states[:3, 1:], None, initial[1:])
    assert batched.shape == (2, 6, 16)
    # the update: attention (q, k, v and output projections 2 x 16, scores over the head dim 4,
    # softmax and sum over 3-5 states), LayerNorms (2 x 2 x 16), feed-forward (16 + 32)
    assert_fp32_close(alone, batched[1:], 2 * 16 + 4 + 2 * 5 + 4 * 16 + 16 + 32, name="update alone vs batched")
    # padding is never read: changing padded states changes nothing
    changed = states.clone()
    changed[3:, 1] += 10
    assert max_difference(memory.update(changed, padding, initial), batched) == 0
    # slot positions (eq. 4) tell the slots apart even when they hold the same vector
    same = torch.zeros(1, 6, 16)
    updated = memory.update(states[:, :1], None, same)[0]
    assert min((updated[i] - updated[j]).abs().max().item() for i in range(6) for j in range(i)) > 1e-3


def test_the_memory_read_starts_small():
    """The read's output projection starts at N(0, 0.02) (the release), not fairseq's Xavier
    initialisation (std √(2 / (128 + 128)) ≈ 0.088 at these sizes): fine-tuning starts close to
    the sentence-level model it loads."""
    model = build_memory("--encoder-memory-layers", "0,1", "--decoder-memory-layers", "0,1")
    projections = [m.memory.output_attention.out_proj for m in model.modules() if isinstance(m, MemorySelfAttention)]
    assert len(projections) == 4
    for projection in projections:
        # the std of 128 x 128 draws lies within 3 standard errors (0.02 / √(2·128²) ≈ 1.1e-4) of 0.02
        assert abs(projection.weight.std().item() - 0.02) < 3 * 0.02 / (2 * 128 * 128) ** 0.5
        assert torch.equal(projection.bias, torch.zeros_like(projection.bias))
    update = [m.memory.update_attention.out_proj for m in model.modules() if isinstance(m, MemorySelfAttention)]
    assert all(p.weight.std().item() > 0.05 for p in update)  # the rest keeps fairseq's initialisation


# ---- the model against the baseline -----------------------------------------------------------


def zero_output_attention(model):
    for module in model.modules():
        if isinstance(module, MemorySelfAttention):
            torch.nn.init.zeros_(module.memory.output_attention.out_proj.weight)
            torch.nn.init.zeros_(module.memory.output_attention.out_proj.bias)


@pytest.mark.parametrize("layers", [[], ["--encoder-memory-layers", "0,1", "--decoder-memory-layers", "0"]])
def test_zeroed_output_attention_equals_the_baseline(layers):
    baseline = build("doc_transformer_tiny", seed=1)
    model = build_memory(*layers, seed=2)
    # a sentence-level checkpoint loads: the memory parameters it lacks keep their initialisation
    model.load_state_dict(baseline.state_dict())
    batch = collate_sentences(SOURCES[:3], TARGETS[:3], PAD, EOS)
    _, memory = read_document(build_memory(*layers, seed=3), SOURCES[:1] * 3, TARGETS[:1] * 3)
    memory = {side: [m.expand(3, -1, -1) for m in ms] for side, ms in memory.items()}
    expected = baseline(**batch["net_input"])[0]
    assert max_difference(model(**batch["net_input"], document_memory=memory)[0], expected) > 1e-3
    zero_output_attention(model)
    terms = model_terms(batch["net_input"]["src_tokens"].size(1), batch["net_input"]["prev_output_tokens"].size(1))
    assert_fp32_close(model(**batch["net_input"], document_memory=memory)[0], expected, terms,
                      name="zeroed memory read vs baseline")
    assert_fp32_close(model(**batch["net_input"])[0], expected, terms, name="zeroed memory read, no memory")


def test_bfloat16_autocast_stays_close_to_float32():
    model = build_memory()
    _, memory = read_document(model, SOURCES[:2], TARGETS[:2])
    batch = collate_sentences(SOURCES[2:3], TARGETS[2:3], PAD, EOS)
    expected, extra = model(**batch["net_input"], document_memory=memory)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, extra_bf16 = model(**batch["net_input"], document_memory=memory)
    # autocast rounds the input and weight of every matmul on the path to bf16: 6 per encoder
    # layer (q, k, v, output projections, feed-forward), 10 per decoder layer, 4 for each memory
    # read and 6 for each update, the output projection
    matmuls = 2 * 6 + 2 * 10 + 2 * 4 + 2 * 6 + 1
    bound = low_precision_tolerance(2 * matmuls, expected.abs().max().item())
    print(f"[bf16] logits: {max_difference(logits, expected):.3g} (bound {bound:.3g})")
    assert max_difference(logits, expected) <= bound
    for side in ("source", "target"):
        memory_bf16, memory_fp32 = extra_bf16["document_memory"][side][0], extra["document_memory"][side][0]
        # the memory after this sentence: the encoder (decoder) path up to the top layer, then the update
        bound = low_precision_tolerance(2 * (2 * 10 + 4 + 6), memory_fp32.abs().max().item())
        print(f"[bf16] {side} memory: {max_difference(memory_bf16, memory_fp32):.3g} (bound {bound:.3g})")
        assert max_difference(memory_bf16, memory_fp32) <= bound


def test_checkpoint_with_some_memory_parameters_missing_does_not_load():
    model = build_memory()
    state = model.state_dict()
    state.pop(next(key for key in state if ".memory.update_attention." in key))
    with pytest.raises(RuntimeError, match="Missing key"):
        build_memory(seed=2).load_state_dict(state)


# ---- what the memory carries ------------------------------------------------------------------


def test_memory_carries_earlier_sentences_forward_only():
    model = build_memory()
    outputs, _ = read_document(model, SOURCES, TARGETS)
    changed_source = [sentence(20, 21, 22)] + SOURCES[1:]
    changed_target = [sentence(30, 31, 32)] + TARGETS[1:]
    changed_later = SOURCES[:3] + [sentence(40, 41)]
    assert max_difference(read_document(model, changed_source, TARGETS)[0][2], outputs[2]) > 1e-3
    assert max_difference(read_document(model, SOURCES, changed_target)[0][2], outputs[2]) > 1e-3
    later = read_document(model, changed_later, TARGETS)[0]
    assert all(torch.equal(later[t], outputs[t]) for t in range(3))


def test_target_memory_alone_and_source_memory_alone_carry_context():
    for layers in (["--encoder-memory-layers", "none"], ["--decoder-memory-layers", "none"]):
        model = build_memory(*layers)
        outputs, memory = read_document(model, SOURCES, TARGETS)
        assert len(memory["source"]) + len(memory["target"]) == 1
        changed = read_document(model, [sentence(20, 21)] + SOURCES[1:], [sentence(30)] + TARGETS[1:])[0]
        assert max_difference(changed[1], outputs[1]) > 1e-3


# ---- training: document-ordered windows, gradients one sentence back --------------------------


def make_dataset(documents, sentence_steps):
    """Sentence k of document d uses its own words (so token ids say which sentence they are)."""
    sources, targets, owner = [], [], {}
    word = 0
    for d, document in enumerate(documents):
        for k in range(document.num_sentences):
            sources.append(sentence(word, word))
            targets.append(sentence(word + 1, word + 1, word + 1) if k % 2 else sentence(word + 1))
            owner[WORDS[word]] = owner[WORDS[word + 1]] = (d, k)
            word += 2

    class Sentences(list):
        @property
        def sizes(self):
            return np.array([len(s) for s in self])

    dataset = DocumentWindowDataset(Sentences(sources), Sentences(targets), documents, 0, SEP, SEP, PAD, EOS,
                                    document_ordered=True, sentence_steps=sentence_steps)
    return dataset, owner


class RecordingOptimizer:
    """Back-propagates, and records which sentences' token embeddings each loss reached."""

    def __init__(self, model, owner):
        self.reached, self.current = [], set()
        for embedding in {model.encoder.embed_tokens, model.decoder.embed_tokens}:
            embedding.register_forward_hook(self.watch)
        self.owner = owner

    def watch(self, module, inputs, output):
        tokens = inputs[0]

        def record(grad):
            for (row, column) in grad.abs().sum(-1).nonzero().tolist():
                token = tokens[row, column].item()
                if token in self.owner:
                    self.current.add(self.owner[token])

        if output.requires_grad:
            output.register_hook(record)

    def backward(self, loss):
        self.current = set()
        loss.backward()
        self.reached.append(self.current)


def test_loss_of_sentence_t_reaches_sentence_t_minus_1_and_no_further():
    documents = [Document("a", 4), Document("b", 3)]
    dataset, owner = make_dataset(documents, sentence_steps=True)
    groups = group_members(dataset.index, np.arange(len(dataset)), [[0, 1]])
    # windows of two positions: [0, 1] and [2, 3] (after a context step: position 1)
    windows = memory_training_batches(dataset.index, groups, (2, 2), np.random.RandomState(0))
    assert [sorted(dataset.index.position[w].tolist()) for w in windows] == [[0, 0, 1, 1], [2, 2, 3]]
    model = build_memory("--dropout", "0")
    criterion = LabelSmoothedCrossEntropyCriterion(Task(), sentence_avg=False, label_smoothing=0.1)
    optimizer = RecordingOptimizer(model, owner)
    memories = DocumentMemories()
    for window in windows:
        sample = dataset.collater([dataset[i] for i in window])
        memory_steps.train_step(memories, sample, model, criterion, optimizer, update_num=0)
    # one backward per sentence position: 0, 1 | 2 (after recomputing 1), 3 (document b has ended)
    expected = [{(0, 0), (1, 0)}, {(0, 1), (1, 1), (0, 0), (1, 0)},
                {(0, 2), (1, 2), (0, 1), (1, 1)}, {(0, 3), (0, 2)}]
    assert optimizer.reached == expected
    for module in model.modules():
        if isinstance(module, RecurrentMemory):
            assert module.update_attention.q_proj.weight.grad.abs().sum() > 0
            assert module.initial_memory.grad.abs().sum() > 0


def test_training_batches_keep_document_order_and_shuffle_groups():
    documents = [Document(str(d), n) for d, n in enumerate([3, 1, 4, 2, 5, 2])]
    dataset, _ = make_dataset(documents, sentence_steps=True)
    index = dataset.index
    indices = np.arange(len(dataset))
    groups = group_members(index, indices, document_groups(index, indices, np.full(len(index), 4), None, 2))
    orders = set()
    for epoch in range(1, 6):
        batches = memory_training_batches(index, groups, parse_optimization_window("1-3"),
                                          np.random.RandomState((1, epoch)))
        trained, seen, order = [], set(), []
        for batch in batches:
            sample = dataset.collater([dataset[i] for i in batch])
            steps = sample["steps"]
            positions = [step["window"]["position"][0].item() for step in steps]
            assert positions == list(range(positions[0], positions[0] + len(steps)))
            assert sample["context_steps"] == (1 if positions[sample["context_steps"]] > 0 else 0)
            if sample["context_steps"]:  # the sentences before the window, of the same documents
                assert torch.equal(steps[0]["window"]["document"], steps[1]["window"]["document"])
            for number, step in enumerate(steps):
                for window in step["id"].tolist():
                    if index.position[window] > 0:
                        assert window - 1 in seen, "a sentence came before the one before it"
                    if number >= sample["context_steps"]:
                        trained.append(window)
                seen.update(step["id"].tolist())
            if positions[0] == 0 and not sample["context_steps"]:
                order.append(tuple(np.unique(index.document[batch])))
        assert sorted(trained) == list(range(len(dataset)))  # each sentence trained on once
        orders.add(tuple(order))
    assert len(orders) > 1, "the order of document groups never changed between epochs"
    with pytest.raises(ValueError):
        parse_optimization_window("3-1")


# ---- decoding -----------------------------------------------------------------------------------


def test_incremental_decoding_with_memory_matches_full_forward_and_beam_reordering():
    model = build_memory()
    _, memory = read_document(model, SOURCES[:2] * 2, TARGETS[:2] * 2)
    batch = collate_sentences(SOURCES[:3], TARGETS[1:4], PAD, EOS)
    memory = {side: [m.expand(3, -1, -1) for m in ms] for side, ms in memory.items()}
    net_input = batch["net_input"]
    order = torch.tensor([2, 0, 1, 1])
    encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"], document_memory=memory)
    prev = net_input["prev_output_tokens"]
    full = model.decoder(prev.index_select(0, order), model.encoder.reorder_encoder_out(encoder_out, order))[0]
    incremental_state = {}
    steps = []
    for step in range(prev.size(1)):
        if step == 2:  # beam search reorders (and repeats) rows mid-sentence
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
            model.decoder.reorder_incremental_state_scripting(incremental_state, order)
            prev = prev.index_select(0, order)
            steps = [s.index_select(0, order) for s in steps]
        steps.append(model.decoder(prev[:, :step + 1], encoder_out, incremental_state=incremental_state)[0][:, -1:])
    real = prev.ne(PAD).unsqueeze(-1)  # padded positions differ: a full pass masks padding keys
    terms = model_terms(net_input["src_tokens"].size(1), prev.size(1))
    assert_fp32_close(torch.cat(steps, dim=1) * real, full * real, terms, name="incremental with memory vs full")


@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_documents_equals_decoding_sentences_one_by_one(beam):
    documents = [Document("a", 4), Document("b", 2), Document("c", 3)]
    dataset, _ = make_dataset(documents, sentence_steps=False)
    model = build_memory()
    with torch.no_grad():  # sharper distributions: fewer near-ties between batched and single rows
        model.decoder.output_projection.weight.mul_(4)
    generator = SequenceGenerator([model], DICTIONARY, beam_size=beam, max_len_b=8)
    # fairseq-generate's way: document-ordered batches (sentence t of all three documents)
    memories = DocumentMemories()
    decoded = {}
    for batch in document_ordered_batches(dataset.index, np.arange(len(dataset)), np.full(len(dataset), 4), None, 3):
        sample = dataset.collater([dataset[i] for i in batch])
        hypotheses = memory_decoding.inference_step(memories, generator, [model], sample)
        for window, beam_hypotheses in zip(sample["id"].tolist(), hypotheses):
            decoded[window] = beam_hypotheses[0]
    assert sorted(decoded) == list(range(len(dataset)))
    # each document alone, its memory passed along by hand
    for d, document in enumerate(documents):
        memory = None
        for k in range(document.num_sentences):
            window = int(np.nonzero((dataset.index.document == d) & (dataset.index.position == k))[0][0])
            source = dataset[window]["source"]
            net_input = {"src_tokens": source[None], "src_lengths": torch.tensor([len(source)])}
            with torch.no_grad():
                generated = generator.generate([model], {"net_input": dict(
                    net_input, document_memory=memory or model.initial_document_memory(1))})[0][0]
                best = generated["tokens"]
                prev = torch.cat([best.new_tensor([EOS]), best[:-1]])[None]
                memory = model(**net_input, prev_output_tokens=prev, document_memory=memory,
                               features_only=True)[1]["document_memory"]
            assert torch.equal(generated["tokens"], decoded[window]["tokens"]), (d, k)
            # a score: log-probabilities (log-softmax over the vocabulary) summed over <= 9 tokens
            terms = model_terms(len(source), 9, len(DICTIONARY)) + 9
            assert_fp32_close(generated["score"], decoded[window]["score"], terms,
                              generated["positional_scores"].abs().max().item(), f"score of {d}, {k}")


# ---- two-stage training ------------------------------------------------------------------------


def test_finetune_adam_gives_new_and_pretrained_parameters_their_learning_rates():
    model = build_memory()
    config = FinetuneAdamConfig(lr=[3e-4], pretrained_lr_scale=0.2, adam_betas="(0.9, 0.98)", tpu=False)
    optimizer = FinetuneAdam(config, model.parameters())
    groups = {group["lr_scale"]: group for group in optimizer.param_groups}
    assert set(groups) == {1.0, 0.2}
    new = {id(p) for p in groups[1.0]["params"]}
    names = {name for name, p in model.named_parameters() if id(p) in new}
    assert names and all(".self_attn.memory." in name for name in names)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    assert groups[1.0]["lr"] == pytest.approx(3e-4) and groups[0.2]["lr"] == pytest.approx(6e-5)
    scheduler = InverseSquareRootSchedule(InverseSquareRootLRScheduleConfig(
        warmup_updates=4, warmup_init_lr=1e-7, lr=[3e-4]), optimizer)
    for update in (1, 4, 16):
        lr = scheduler.step_update(update)
        assert groups[1.0]["lr"] == pytest.approx(lr) and groups[0.2]["lr"] == pytest.approx(0.2 * lr)
        assert optimizer.get_lr() == pytest.approx(lr)
    untagged = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match="tagged"):
        FinetuneAdam(FinetuneAdamConfig(lr=[3e-4], pretrained_lr_scale=0.2, adam_betas="(0.9, 0.98)", tpu=False),
                     untagged)


# ---- consistency scoring -----------------------------------------------------------------------


def test_score_candidates_reads_the_context_sentence_by_sentence():
    model = build_memory()
    examples = [(SOURCES[:3], TARGETS[:3]), (SOURCES[3:], TARGETS[3:]), (SOURCES[1:3], TARGETS[1:3])]
    scores = model.score_candidates([s for s, _ in examples], [t for _, t in examples])
    for (sources, targets), score in zip(examples, scores):
        log_probs = read_document(model, sources, targets)[0][-1][0]
        target = targets[-1]
        expected = -log_probs.gather(-1, target[:, None]).mean()
        # the mean of token NLLs, each a log-softmax over the vocabulary, behind a context read
        terms = model_terms(len(sources[-1]), len(target), len(DICTIONARY)) + len(target)
        assert_fp32_close(torch.tensor(score), expected, terms, log_probs.abs().max().item(), "candidate score")
    other_context = model.score_candidates([SOURCES[:3]], [[sentence(33)] + TARGETS[1:3]])
    assert abs(other_context[0] - scores[0]) > 1e-4


# ---- the task -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from rfa_doc_mt.data import prepare

    out = tmp_path_factory.mktemp("corpus") / "data"
    prepare.main(["synthetic", "--out", str(out), "--train-documents", "6", "--valid-documents", "2",
                  "--test-documents", "3", "--contrastive-pairs", "2", "--workers", "1"])
    return str(out)


def test_task_trains_validates_and_decodes_documents_in_order(corpus):
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from rfa_doc_mt.tasks.doc_translation import (
        DocTranslationConfig,
        DocTranslationTask,
    )

    with open(os.path.join(corpus, "prep.json")) as f:
        languages = json.load(f)
    cfg = DocTranslationConfig(data=corpus, source_lang=languages["source_lang"],
                               target_lang=languages["target_lang"], recurrent_memory=True,
                               optimization_window="2-3", train_subset="train", dataset_impl="mmap",
                               required_seq_len_multiple=1)
    task = DocTranslationTask.setup_task(cfg)
    for split in ("train", "valid", "test"):
        task.load_dataset(split)
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    MemoryDocTransformerModel.add_args(parser)
    args = parser.parse_args(["--encoder-layers", "1", "--decoder-layers", "1"])
    memory_doc_transformer_tiny(args)
    torch.manual_seed(1)
    model = MemoryDocTransformerModel.build_model(args, task)
    criterion = CrossEntropyCriterion(task, sentence_avg=False)
    optimizer = FinetuneAdam(FinetuneAdamConfig(lr=[1e-3], adam_betas="(0.9, 0.98)", tpu=False), model.parameters())
    train = task.datasets["train"]
    iterator = task.get_batch_iterator(train, max_sentences=4, seed=1, epoch=1)
    trained = []
    for sample in iterator.next_epoch_itr(shuffle=True):
        optimizer.zero_grad()
        loss, sample_size, logging_output = task.train_step(sample, model, criterion, optimizer, update_num=0)
        assert logging_output["ntokens"] == sample["ntokens"] and sample_size == sample["ntokens"]
        optimizer.step()
        trained += [i for step in sample["steps"][sample["context_steps"]:] for i in step["id"].tolist()]
    assert sorted(trained) == list(range(len(train)))
    assert task.train_memories.warnings == 0
    valid = task.datasets["valid"]
    for sample in task.get_batch_iterator(valid, max_sentences=4).next_epoch_itr(shuffle=False):
        task.valid_step(sample, model, criterion)
    test = task.datasets["test"]
    generator = SequenceGenerator([model.eval()], task.target_dictionary, beam_size=2, max_len_b=10)
    decoded = []
    for sample in task.get_batch_iterator(test, max_sentences=2).next_epoch_itr(shuffle=False):
        hypotheses = task.inference_step(generator, [model], sample)
        assert len(hypotheses) == len(sample["id"])
        decoded += sample["id"].tolist()
    assert sorted(decoded) == list(range(len(test)))
    assert task.eval_memories.warnings == 0
