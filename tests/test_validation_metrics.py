"""Checkpoint selection in fairseq-train on validation BLEU of the windowed decoding (``--eval-bleu``)
and on contrastive consistency accuracy (``--valid-subset valid_consistency``), tasks/validation.py.

The single-worker trainings run ``fairseq-train``'s main in this process (as tests/test_distributed.py
does), which spares a Python start per training; the two-worker one is the real command line.
The figures each training logs are compared with what the project's own tools print for the
same checkpoint: fairseq-generate + generation/collect.py + sacrebleu for BLEU,
``python -m rfa_doc_mt.scoring.consistency`` for consistency.
"""

import json
import logging
import os
import re
import struct
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(ROOT, "rfa_doc_mt")
FAIRSEQ_TRAIN = os.path.join(os.path.dirname(sys.executable), "fairseq-train")

COMMON = ["--task", "doc_translation", "--user-dir", USER_DIR, "--source-lang", "src", "--target-lang", "tgt",
          "--arch", "doc_transformer_tiny", "--share-all-embeddings", "--optimizer", "adam", "--lr", "5e-3",
          "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "512",
          "--num-workers", "0", "--seed", "1", "--no-epoch-checkpoints", "--log-format", "simple",
          "--save-interval-updates", "1", "--validate-interval-updates", "1"]
# decode.sh's length bound; beam 2 keeps it quick
BLEU_ARGS = ["--eval-bleu", "--eval-bleu-args", '{"beam": 2, "max_len_a": 1.2, "max_len_b": 10}']
GENERATE_ARGS = ["--beam", "2", "--max-len-a", "1.2", "--max-len-b", "10"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: more threads only spin-wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from rfa_doc_mt.data import prepare
    from rfa_doc_mt.data.voita import read_contrastive

    out = tmp_path_factory.mktemp("validation") / "synthetic"
    assert prepare.main(["synthetic", "--out", str(out), "--train-documents", "20", "--valid-documents", "3",
                         "--test-documents", "2", "--contrastive-pairs", "4", "--workers", "1"]) == 0
    # A real corpus's references (untokenized, cased) are not its binarized targets, which the
    # synthetic corpus's are: capitalised, they tell a BLEU against the reference file that
    # scoring reads from one against the binarized targets (fairseq's --eval-bleu).
    references = out / "valid.ref.tgt"
    references.write_text("".join(line[:1].upper() + line[1:] + "\n" for line in references.read_text().splitlines()))
    # The synthetic sets come in mirrored pairs, on which a model that reads no context scores
    # exactly 50 whatever it computes: one example of each pair makes a set whose accuracy
    # depends on every loss, for the comparisons below.
    unpaired = tmp_path_factory.mktemp("unpaired")
    manifest = json.load(open(out / "valid_consistency" / "consistency.json"))
    files = []
    for name in manifest["sets"]:
        examples = read_contrastive(str(out / "valid_consistency" / name))
        (unpaired / name).write_text(json.dumps(examples[::2]))
        files.append(str(unpaired / name))
    assert prepare.main(["consistency", "--json", *files, "--prep", str(out), "--out",
                         str(out / "valid_unpaired")]) == 0
    return str(out)


def test_synthetic_validation_sets_are_not_the_test_sets(corpus):
    """prepare synthetic writes valid_consistency/ from its own random stream: no example of it
    is one of the test sets' (consistency/)."""
    from rfa_doc_mt.data.voita import read_contrastive

    for name in ("anaphora", "deixis", "ellipsis_vp", "lex_cohesion"):
        valid = read_contrastive(os.path.join(corpus, "valid_consistency", f"{name}.json"))
        test = read_contrastive(os.path.join(corpus, "consistency", f"{name}.json"))
        assert len(valid) == len(test) == 8
        assert not {example["src"] for example in valid} & {example["src"] for example in test}


class Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def train(argv):
    """``fairseq-train argv`` in this process; returns what it logged."""
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train as fairseq_train

    import rfa_doc_mt  # noqa: F401  (compat)

    # fairseq keeps the best figure so far and the early-stopping count in function attributes,
    # which a fresh process starts without
    for function, names in ((checkpoint_utils.save_checkpoint, ("best",)),
                            (fairseq_train.should_stop_early, ("best", "num_runs"))):
        for name in names:
            if hasattr(function, name):
                delattr(function, name)
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    messages = Messages()
    root = logging.getLogger()
    root.addHandler(messages)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_train.main)
    finally:
        root.removeHandler(messages)
        root.setLevel(level)
    return messages.lines


VALID_LINE = re.compile(r"valid on '([^']+)' subset \| (.*)$")


def validations(lines, subset):
    """{num_updates: {figure: value}} of every validation of ``subset`` in a training log."""
    figures = {}
    for line in lines:
        match = VALID_LINE.search(line)
        if match and match.group(1) == subset:
            values = dict(part.rsplit(" ", 1) for part in match.group(2).split(" | "))
            figures[int(values["num_updates"])] = {key: float(value) for key, value in values.items()}
    return figures


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def updates_of(state):
    return state["optimizer_history"][-1]["num_updates"]


def check_best_follows(save_dir, figures, metric):
    """checkpoint_best.pt holds the validation with the highest ``metric`` and its weights (the
    latest of equal ones: fairseq replaces the best checkpoint on a tie)."""
    values = {update: figure[metric] for update, figure in figures.items()}
    best_update = max(update for update, value in values.items() if value == max(values.values()))
    best = load(os.path.join(save_dir, "checkpoint_best.pt"))
    assert best["extra_state"]["best"] == pytest.approx(max(values.values()), abs=1e-9)
    assert updates_of(best) == best_update, values
    same_update = load(os.path.join(save_dir, f"checkpoint_1_{best_update}.pt"))
    for name, value in same_update["model"].items():
        assert torch.equal(best["model"][name], value), name
    return best_update


# ---- BLEU ---------------------------------------------------------------------------------------


def generate_and_score(checkpoint, data, out_dir, *extra):
    """s-BLEU of ``checkpoint`` on the valid split through fairseq-generate (task options in
    ``extra``, as decode.sh passes a config's), collect.py and sacrebleu's BLEU (with its statistics)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate
    from sacrebleu.metrics import BLEU

    from rfa_doc_mt.data.io import read_lines
    from rfa_doc_mt.generation.collect import collect

    args = options.parse_args_and_arch(options.get_generation_parser(), [
        data, "--user-dir", USER_DIR, "--task", "doc_translation", "--source-lang", "src", "--target-lang", "tgt",
        "--path", checkpoint, "--gen-subset", "valid", "--max-tokens", "512", "--num-workers", "0",
        "--results-path", out_dir, *GENERATE_ARGS, *extra])
    generate.main(convert_namespace_to_omegaconf(args))
    prefix = os.path.join(out_dir, "valid")
    collect(os.path.join(out_dir, "generate-valid.txt"), data, "valid", "tgt", prefix)
    hypotheses, references = read_lines(prefix + ".hyp"), read_lines(prefix + ".ref")
    return BLEU(tokenize="13a").corpus_score(hypotheses, [references])


def validation_statistics(checkpoint, data, subset, **overrides):
    """The task's validation logging outputs over ``subset``, summed (one worker)."""
    from fairseq import checkpoint_utils, utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint],
                                                                      arg_overrides={"data": data, **overrides})
    model = models[0].eval()
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset(subset)
    # the batches of fairseq-train's validation and of fairseq-generate (--max-tokens 512, batch
    # sizes a multiple of 8): a hypothesis that never ends stops at the length bound, which
    # depends on the longest source of its batch
    iterator = task.get_batch_iterator(task.dataset(subset), max_tokens=512, required_batch_size_multiple=8,
                                       max_positions=utils.resolve_max_positions(task.max_positions(),
                                                                                 model.max_positions()))
    task.begin_valid_epoch(1, model)
    totals = {}
    with torch.no_grad():
        for sample in iterator.next_epoch_itr(shuffle=False):
            _, _, logging_output = task.valid_step(sample, model, criterion)
            for key, value in logging_output.items():
                totals[key] = totals.get(key, 0) + value
    return totals


@pytest.fixture(scope="module")
def bleu_run(corpus, tmp_path_factory):
    save_dir = str(tmp_path_factory.mktemp("bleu_run"))
    lines = train([corpus, *COMMON, "--context-size", "1", "--max-update", "4", "--save-dir", save_dir, *BLEU_ARGS,
                   "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric", "--patience", "10"])
    return save_dir, lines


def test_bleu_is_logged_and_selects_the_best_checkpoint(bleu_run):
    save_dir, lines = bleu_run
    figures = validations(lines, "valid")
    assert sorted(figures) == [1, 2, 3, 4], lines[-20:]
    assert all("bleu" in figure for figure in figures.values())
    check_best_follows(save_dir, figures, "bleu")
    assert any("sacrebleu nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in line for line in lines)


@pytest.mark.parametrize("decode_mode", ["free", "forced-prefix"])
def test_validation_bleu_is_what_generate_collect_and_sacrebleu_give(corpus, bleu_run, tmp_path, decode_mode):
    """Same checkpoint, same decoding: the statistics validation sums equal sacrebleu's on the
    hypotheses fairseq-generate printed, post-processed by collect.py, against {split}.ref.tgt;
    and the bleu the training logged for that checkpoint is the s-BLEU scoring prints."""
    from rfa_doc_mt.tasks.validation import BLEU_KEYS

    save_dir, lines = bleu_run
    checkpoint = os.path.join(save_dir, "checkpoint_best.pt")
    score = generate_and_score(checkpoint, corpus, str(tmp_path), "--context-size", "1", "--decode-mode", decode_mode)
    totals = validation_statistics(checkpoint, corpus, "valid", decode_mode=decode_mode)
    expected = dict(zip(BLEU_KEYS, [score.sys_len, score.ref_len, *score.counts, *score.totals]))
    print(f"[validation] {decode_mode}: sacrebleu on generate + collect: {score}; validation sums "
          f"{ {key: int(totals[key]) for key in BLEU_KEYS} }")
    assert {key: int(totals[key]) for key in BLEU_KEYS} == expected
    assert score.ref_len > 0 and score.sys_len > 0
    if decode_mode == "free":  # what the training decoded
        logged = validations(lines, "valid")[updates_of(load(checkpoint))]["bleu"]
        print(f"[validation] bleu logged by fairseq-train for {checkpoint}: {logged}")
        assert logged == round(score.score, 2)


def test_bleu_counts_the_references_of_batches_whose_hypotheses_are_all_empty(bleu_run):
    """fairseq's TranslationTask.reduce_metrics drops the statistics of a batch with no
    hypothesis word, reference length included (BLEU's brevity penalty then comes out too mild),
    and logs no bleu at all when no batch has one; the task sums every batch, as sacrebleu would."""
    from fairseq import checkpoint_utils, metrics
    from sacrebleu.metrics import BLEU

    from rfa_doc_mt.tasks.validation import BLEU_KEYS

    save_dir, _ = bleu_run
    _, cfg, task = checkpoint_utils.load_model_ensemble_and_task([os.path.join(save_dir, "checkpoint_last.pt")])
    criterion = task.build_criterion(cfg.criterion)
    batches = [(["le hon dak ok", "le wote"], ["le hon ir bal", "le wote liw"]), (["", ""], ["le jata ok", "hun"])]

    def logging_output(hypotheses, references):
        score = BLEU().corpus_score(hypotheses, [references])
        statistics = [score.sys_len, score.ref_len, *score.counts, *score.totals]
        return {"loss": 1.0, "nll_loss": 1.0, "ntokens": 4, "nsentences": 2, "sample_size": 4,
                **dict(zip(BLEU_KEYS, statistics))}

    with metrics.aggregate(new_root=True) as aggregate:
        for hypotheses, references in batches:
            task.reduce_metrics([logging_output(hypotheses, references)], criterion)  # one call per batch
        logged = aggregate.get_smoothed_values()["bleu"]
    expected = BLEU().corpus_score([h for hs, _ in batches for h in hs], [[r for _, rs in batches for r in rs]])
    assert logged == round(expected.score, 2)
    with metrics.aggregate(new_root=True) as aggregate:
        task.reduce_metrics([logging_output(*batches[1])], criterion)
        assert aggregate.get_smoothed_values()["bleu"] == 0


def test_fairseq_options_for_whole_window_bleu_are_refused(corpus, tmp_path):
    with pytest.raises(ValueError, match="--eval-bleu-remove-bpe"):
        train([corpus, *COMMON, "--context-size", "1", "--max-update", "1", "--save-dir", str(tmp_path),
               *BLEU_ARGS, "--eval-bleu-remove-bpe"])


# ---- TensorBoard ---------------------------------------------------------------------------------


def event_scalars(directory):
    """{tag: {step: value}} of the scalars in the TensorBoard event files of ``directory``. An event
    file is a sequence of records (TFRecord): the length (8 bytes, little-endian), its CRC (4), an
    ``Event`` protocol buffer (tensorboardX's own definition), its CRC (4)."""
    from tensorboardX.proto import event_pb2

    scalars = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            data = handle.read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


TRAIN_INNER = re.compile(r"\| train_inner \| epoch \d+: +\d+ / \d+ (.*)$")
TRAIN_EPOCH = re.compile(r"\| train \| epoch \d+ \| (.*)$")
# a Python warning as the warnings module prints it (file:line: SomeWarning: message), a logged
# WARNING, fairseq's note on tensorboardX
WARNING_LINE = re.compile(r"^\S+:\d+: \w*Warning: |\| WARNING \||Please install")


def test_tensorboard_curves_are_written_and_training_prints_no_warning(corpus, tmp_path):
    """``fairseq-train --tensorboard-logdir DIR`` as a user starts it (a fresh process, the plugin
    imported first, as scripts/train.sh runs it): event files hold the training loss of every update,
    the epoch's, and the validation loss and s-BLEU of every validation, as fairseq logged them; and
    nothing in the run's output is a warning (fairseq's deprecated calls into torch and hydra,
    silenced by compat.py), nor fairseq's request to install tensorboardX."""
    logdir = tmp_path / "tensorboard"
    done = subprocess.run(
        [sys.executable, "-m", "rfa_doc_mt.fairseq_command", "fairseq-train", corpus, *COMMON, "--context-size", "1",
         "--max-update", "2", "--save-dir", str(tmp_path / "run"), "--log-interval", "1",
         "--tensorboard-logdir", str(logdir), *BLEU_ARGS],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        # started cold (not by the test session's warm-start server): what its imports print counts too
        env=dict(os.environ, OMP_NUM_THREADS="1", RFA_DOC_MT_WARM_START=""))
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join(lines[-30:])
    warned = [line for line in lines if WARNING_LINE.search(line)]
    assert warned == [], "\n".join(warned)
    assert sorted(os.listdir(logdir)) == ["train", "train_inner", "valid"]
    # train_inner: "loss=9.56, nll_loss=9.561, ...", the epoch's: "loss 10.054 | ppl 1062.88 | ..."
    steps = [dict(part.split("=") for part in match.group(1).split(", "))
             for match in map(TRAIN_INNER.search, lines) if match]
    (epoch,) = [dict(part.rsplit(" ", 1) for part in match.group(1).split(" | "))
                for match in map(TRAIN_EPOCH.search, lines) if match]
    assert [int(step["num_updates"]) for step in steps] == [1, 2]
    curves = {kind: event_scalars(logdir / kind) for kind in ("train_inner", "train", "valid")}
    assert curves["train_inner"]["loss"] == {int(step["num_updates"]): pytest.approx(float(step["loss"]), rel=1e-6)
                                             for step in steps}
    assert curves["train"]["loss"] == {2: pytest.approx(float(epoch["loss"]), rel=1e-6)}
    valid = validations(lines, "valid")
    assert sorted(valid) == [1, 2]
    for name in ("loss", "bleu"):
        assert curves["valid"][name] == {update: pytest.approx(figure[name], rel=1e-6)
                                         for update, figure in valid.items()}, name


# ---- consistency ---------------------------------------------------------------------------------


def scorer_report(checkpoint, data, sets):
    from rfa_doc_mt.scoring import consistency

    return consistency.main(["--path", checkpoint, "--data", data, "--sets", sets, "--cpu"])


def test_consistency_is_logged_selects_the_best_checkpoint_and_matches_the_scorer(corpus, tmp_path):
    save_dir = str(tmp_path)
    lines = train([corpus, *COMMON, "--context-size", "1", "--max-update", "4", "--save-dir", save_dir,
                   "--valid-subset", "valid_unpaired", "--best-checkpoint-metric", "consistency",
                   "--maximize-best-checkpoint-metric", "--patience", "10"])
    figures = validations(lines, "valid_unpaired")
    assert sorted(figures) == [1, 2, 3, 4], lines[-20:]
    check_best_follows(save_dir, figures, "consistency")
    sets = os.path.join(corpus, "valid_unpaired")
    for update, figure in figures.items():
        report = scorer_report(os.path.join(save_dir, f"checkpoint_1_{update}.pt"), corpus, sets)
        print(f"[validation] update {update}: consistency logged {figure['consistency']}, "
              f"scorer {report['pooled']['accuracy']}")
        # the log prints 6 significant digits: below 100, within 5e-5
        assert figure["consistency"] == pytest.approx(report["pooled"]["accuracy"], abs=5e-5)
        for phenomenon in ("anaphora", "deixis", "ellipsis_vp", "lex_cohesion"):
            assert figure[f"consistency_{phenomenon}"] == pytest.approx(report[phenomenon]["accuracy"], abs=5e-5)
    best = load(os.path.join(save_dir, "checkpoint_best.pt"))
    report = scorer_report(os.path.join(save_dir, "checkpoint_best.pt"), corpus, sets)
    # the same ratio of counts, computed in another order: float64 rounding only
    assert best["extra_state"]["best"] == pytest.approx(report["pooled"]["accuracy"], abs=1e-9)


def test_an_example_is_right_only_when_its_true_candidate_alone_has_the_lowest_loss():
    """The scorer's rule (accuracy_report), on the rows of a batch: a tie for the lowest loss is wrong."""
    from rfa_doc_mt.scoring.consistency import accuracy_report
    from rfa_doc_mt.tasks.validation import example_counts

    losses = [[1.0, 1.0, 2.0], [0.5, 0.7], [0.9, 0.3], [0.2, 0.4]]
    true_index = [0, 0, 0, 1]
    rows = [k for k, example in enumerate(losses) for _ in example]
    first_row = [rows.index(k) for k in range(len(losses))]
    counts = example_counts(torch.tensor([loss for example in losses for loss in example]), torch.tensor(rows),
                            torch.tensor([first + true for first, true in zip(first_row, true_index)]),
                            torch.tensor([0, 0, 1, 1]), ["a", "b"])
    assert counts == {"_consistency_examples:a": 2, "_consistency_correct:a": 1,
                      "_consistency_examples:b": 2, "_consistency_correct:b": 0}
    examples = [{"dst": [f"{k} {c}" for c in range(len(example))], "true_ind": true, "ctx_dist": 1}
                for k, (example, true) in enumerate(zip(losses, true_index))]
    assert accuracy_report(examples, losses)["accuracy"] == 100.0 * 1 / 4


def test_repeated_candidates_are_one_candidate_as_the_scorer_counts_them(corpus, bleu_run, tmp_path):
    """Voita et al.'s released sets repeat a candidate in some examples: the copies are one row (the
    true one when ``true_ind`` names either copy), an example left with one distinct candidate
    is skipped, as the scorer does."""
    from rfa_doc_mt.data import prepare
    from rfa_doc_mt.data.voita import read_contrastive

    examples = read_contrastive(os.path.join(corpus, "valid_consistency", "deixis.json"))
    for k in range(3):  # each candidate list becomes [b, a, b], ``true_ind`` naming the last copy when b is true
        first, second = examples[k]["dst"]
        true = examples[k]["dst"][examples[k]["true_ind"]]
        examples[k] = dict(examples[k], dst=[second, first, second], true_ind=2 if true == second else 1)
    examples[3] = dict(examples[3], dst=[examples[3]["dst"][0]] * 2, true_ind=1)  # one distinct candidate
    path = tmp_path / "deixis_dev.json"
    path.write_text(json.dumps(examples))
    assert prepare.main(["consistency", "--json", str(path), "--prep", corpus,
                         "--out", os.path.join(corpus, "valid_repeats")]) == 0
    checkpoint = os.path.join(bleu_run[0], "checkpoint_last.pt")
    totals = validation_statistics(checkpoint, corpus, "valid_repeats")
    report = scorer_report(checkpoint, corpus, os.path.join(corpus, "valid_repeats"))["deixis"]
    assert report["skipped"] == 1 and report["repeated_candidates"] == 4
    assert totals["_consistency_examples:deixis"] == report["examples"] == len(examples) - 1
    assert 100.0 * totals["_consistency_correct:deixis"] / report["examples"] == pytest.approx(report["accuracy"],
                                                                                              abs=1e-9)


def test_patience_stops_on_consistency(corpus, tmp_path):
    """A sentence-level model scores exactly 50 on the mirrored synthetic sets, at every update:
    no validation after the first improves on it, so --patience 2 stops after the third (whose
    checkpoint is the best one: fairseq replaces the best checkpoint on a tie)."""
    save_dir = str(tmp_path)
    lines = train([corpus, *COMMON, "--context-size", "0", "--max-update", "10", "--save-dir", save_dir,
                   "--valid-subset", "valid_consistency", "--best-checkpoint-metric", "consistency",
                   "--maximize-best-checkpoint-metric", "--patience", "2"])
    figures = validations(lines, "valid_consistency")
    assert {update: figure["consistency"] for update, figure in figures.items()} == {1: 50.0, 2: 50.0, 3: 50.0}
    assert any("early stop since valid performance hasn't improved for last 2 runs" in line for line in lines)
    assert updates_of(load(os.path.join(save_dir, "checkpoint_best.pt"))) == 3


def test_missing_contrastive_sets_name_how_to_prepare_them(corpus, tmp_path):
    from rfa_doc_mt.data.io import DataError

    with pytest.raises(DataError, match="valid_dev_consistency: no contrastive sets .*prepare_consistency.sh"):
        train([corpus, *COMMON, "--max-update", "1", "--save-dir", str(tmp_path),
               "--valid-subset", "valid_dev_consistency"])


def test_recurrent_memory_model_validates_bleu_and_consistency_as_its_tools_score_it(corpus, tmp_path):
    """The memory model decodes with memories made from its own translations (apart from those of
    the validation loss) and scores candidates reading their context sentence by sentence
    (``score_candidates``), as fairseq-generate and the consistency scorer do."""
    from rfa_doc_mt.tasks.validation import BLEU_KEYS

    save_dir = str(tmp_path / "run")
    memory = ["--arch", "memory_doc_transformer_tiny", "--recurrent-memory", "--context-size", "0"]
    lines = train([corpus, *COMMON, *memory, "--max-update", "2", "--save-dir", save_dir,
                   "--valid-subset", "valid_unpaired,valid", *BLEU_ARGS])
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    consistency = validations(lines, "valid_unpaired")[2]["consistency"]
    report = scorer_report(checkpoint, corpus, os.path.join(corpus, "valid_unpaired"))
    assert consistency == pytest.approx(report["pooled"]["accuracy"], abs=5e-5)
    score = generate_and_score(checkpoint, corpus, str(tmp_path), "--context-size", "0", "--recurrent-memory")
    assert validations(lines, "valid")[2]["bleu"] == round(score.score, 2)
    totals = validation_statistics(checkpoint, corpus, "valid")
    assert ({key: int(totals[key]) for key in BLEU_KEYS}
            == dict(zip(BLEU_KEYS, [score.sys_len, score.ref_len, *score.counts, *score.totals])))


# ---- two workers ---------------------------------------------------------------------------------


def test_two_workers_log_the_figures_of_the_whole_validation_sets(corpus, tmp_path):
    """fairseq-train --distributed-world-size 2 (two gloo workers on this CPU): each worker
    validates part of the batches (forced-prefix decoding: whole documents each; a worker
    without a batch runs a dummy one); the logged figures are those of the whole sets, as the
    single-process tools give them for the checkpoint of each update."""
    save_dir = tmp_path / "run"
    completed = subprocess.run(
        [FAIRSEQ_TRAIN, corpus, *COMMON, "--context-size", "1", "--max-update", "2", "--save-dir", str(save_dir),
         "--distributed-world-size", "2", "--max-tokens", "256", "--decode-mode", "forced-prefix",
         "--valid-subset", "valid,valid_unpaired", *BLEU_ARGS],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = (completed.stdout + completed.stderr).splitlines()
    assert completed.returncode == 0, "\n".join(lines[-30:])
    assert any("distributed init (rank 1)" in line for line in lines)
    bleu, consistency = validations(lines, "valid"), validations(lines, "valid_unpaired")
    assert sorted(bleu) == sorted(consistency) == [1, 2]
    for update in (1, 2):
        checkpoint = str(save_dir / f"checkpoint_1_{update}.pt")
        print(f"[validation] two workers, update {update}: bleu {bleu[update]['bleu']}, "
              f"consistency {consistency[update]['consistency']}")
        score = generate_and_score(checkpoint, corpus, str(tmp_path / str(update)), "--context-size", "1",
                                   "--decode-mode", "forced-prefix")
        assert bleu[update]["bleu"] == round(score.score, 2)
        report = scorer_report(checkpoint, corpus, os.path.join(corpus, "valid_unpaired"))
        assert consistency[update]["consistency"] == pytest.approx(report["pooled"]["accuracy"], abs=5e-5)


def test_train_sh_validates_on_contrastive_sets_and_names_a_missing_subset(corpus, tmp_path):
    """scripts/train.sh checks each --valid-subset before training: a prepared contrastive folder
    (DATA/valid_consistency/consistency.json) is one, a name that is neither split nor folder is not."""
    config = os.path.join(ROOT, "configs", "demo", "transformer_L1.sh")
    train_sh = os.path.join(ROOT, "scripts", "train.sh")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([train_sh, config, corpus, str(tmp_path / "ok"), "--max-update", "1",
                          "--valid-subset", "valid_consistency", "--best-checkpoint-metric", "consistency",
                          "--maximize-best-checkpoint-metric"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "valid on 'valid_consistency' subset" in run.stdout + run.stderr
    assert (tmp_path / "ok" / "checkpoint_best.pt").exists()
    missing = subprocess.run([train_sh, config, corpus, str(tmp_path / "no"), "--max-update", "1",
                              "--valid-subset", "valid_dev_consistency"], capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert f"no contrastive sets {corpus}/valid_dev_consistency/consistency.json" in missing.stderr
    assert not (tmp_path / "no").exists()


def test_reproduction_runs_validate_at_the_same_updates_whatever_their_epochs(corpus, tmp_path):
    """The embedded reproduction's training arguments validate (and offer a checkpoint) at every
    ``budget / 16`` updates and at the last one, never at an epoch's end: epochs of windows of L
    sentences differ in length between systems. Here an epoch is a few updates, shorter than
    the interval, so epoch-end validations would show between the interval's."""
    from rfa_doc_mt.reproduce.experiments import embedded_train_args, validation_interval
    from rfa_doc_mt.reproduce.papers import System

    budget = 70
    interval = validation_interval(budget)
    args = embedded_train_args(System("transformer", "configs/demo/transformer_L1.sh"), budget)
    base = COMMON[:-4]  # without its own intervals
    assert "--save-interval-updates" not in base and "--validate-interval-updates" not in base
    lines = train([corpus, *base, "--max-tokens", "1024", "--save-dir", str(tmp_path), *args])
    epochs = {int(match) for line in lines for match in re.findall(r"end of epoch (\d+)", line)}
    assert len(epochs) > budget // interval  # more epoch ends than validations: they would show
    expected = set(range(interval, budget + 1, interval)) | {budget}
    assert set(validations(lines, "valid")) == expected


# ---- early stopping across a resume ---------------------------------------------------------------

# Every validation after the first is one without improvement: the highest validation loss is the
# "best", and a model's validation loss falls from its first updates on (asserted below). With
# patience 4 an uninterrupted run stops at update 5, whatever the machine's rounding.
STOPPING_ARGS = ["--lr", "5e-3", "--warmup-updates", "1", "--max-update", "12", "--patience", "4",
                 "--validate-interval-updates", "1", "--save-interval-updates", "1", "--validate-interval", "1000000",
                 "--save-interval", "1000000", "--best-checkpoint-metric", "loss", "--maximize-best-checkpoint-metric",
                 "--max-tokens", "512", "--log-interval", "1"]
SAVED = re.compile(r"Saved checkpoint .* \(epoch \d+ @ (\d+) updates")
EARLY_STOP = "early stop since valid performance hasn't improved for last 4 runs"


def log_since(path, offset=0):
    with open(path, encoding="utf-8") as handle:
        handle.seek(offset)
        return handle.read().splitlines()


def interrupt_after(command, logs, update, env):
    """Start ``command`` and kill it (SIGKILL to its whole process group, as a power cut would) as
    soon as a training log matching the glob ``logs`` says the checkpoint of ``update`` (or a later
    one) is saved; returns that log's path."""
    import glob
    import signal
    import time

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                               start_new_session=True)
    try:
        while process.poll() is None:
            for log in glob.glob(logs):
                if any(int(m.group(1)) >= update for m in map(SAVED.search, log_since(log)) if m):
                    os.killpg(process.pid, signal.SIGKILL)
                    return log
            time.sleep(0.01)
    finally:
        process.wait(timeout=60)
    raise AssertionError(f"{command} ended before it saved update {update}")


def test_a_resumed_run_stops_where_an_uninterrupted_one_does(corpus, tmp_path):
    """A real fairseq-train run through scripts/train.sh (what every reproduction runs), killed after
    a validation without improvement and started again with the same command, resumes from its
    checkpoint_last.pt and stops on its patience at the update an uninterrupted run stops at, with
    the same best checkpoint: the task's early-stopping counter went to disk in the checkpoint
    and came back through fairseq's own reload (a run that counted its patience afresh would
    train on for as many validations as it had already spent)."""
    from fairseq.checkpoint_utils import load_checkpoint_to_cpu

    train_sh = os.path.join(ROOT, "scripts", "train.sh")
    config = os.path.join(ROOT, "configs", "demo", "transformer_L1.sh")
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def command(save_dir):
        return [train_sh, config, corpus, str(save_dir), *STOPPING_ARGS]

    whole_dir, resumed_dir = tmp_path / "whole", tmp_path / "resumed"
    whole = subprocess.run(command(whole_dir), capture_output=True, text=True, env=env, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]
    lines = log_since(whole_dir / "train.log")
    losses = validations(lines, "valid")
    assert sorted(losses) == [1, 2, 3, 4, 5]  # stopped on its patience at 5, not at --max-update 12
    assert all(losses[u]["loss"] < losses[u - 1]["loss"] for u in range(2, 6))  # 2-5: no improvement
    assert any(EARLY_STOP in line for line in lines)

    # killed right after it saved update 2 (one validation without improvement), or a little later
    interrupt_after(command(resumed_dir), str(resumed_dir / "train.log"), 2, env)
    interrupted_at = load_checkpoint_to_cpu(str(resumed_dir / "checkpoint_last.pt"))["optimizer_history"][-1][
        "num_updates"]
    before = os.path.getsize(resumed_dir / "train.log")
    assert 2 <= interrupted_at < 5 and not any(EARLY_STOP in line for line in log_since(resumed_dir / "train.log"))
    again = subprocess.run(command(resumed_dir), capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    again_lines = log_since(resumed_dir / "train.log", before)
    assert any(f"Loaded checkpoint {resumed_dir}/checkpoint_last.pt" in line for line in again_lines)
    assert sorted(validations(again_lines, "valid")) == list(range(interrupted_at + 1, 6))
    assert any(EARLY_STOP in line for line in again_lines)
    best = [load_checkpoint_to_cpu(str(d / "checkpoint_best.pt")) for d in (whole_dir, resumed_dir)]
    assert [b["optimizer_history"][-1]["num_updates"] for b in best] == [1, 1]
    assert best[0]["extra_state"]["best"] == best[1]["extra_state"]["best"]
    for name, weight in best[0]["model"].items():
        assert torch.equal(weight, best[1]["model"][name]), name


def test_a_raised_cap_trains_on_a_run_stopped_at_its_cap_and_not_one_out_of_patience(corpus, tmp_path):
    """scripts/train.sh started again with a higher --max-update: a real run that stopped at its cap
    (3 updates, two validations without improvement) resumes and stops on its patience at update
    5, where an uncapped run stops; started again with a higher cap still, that run (out of
    patience now) is left untouched."""
    train_sh = os.path.join(ROOT, "scripts", "train.sh")
    config = os.path.join(ROOT, "configs", "demo", "transformer_L1.sh")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    save_dir = tmp_path / "run"

    def train(cap):
        args = [*STOPPING_ARGS, "--max-update", str(cap)]  # the last --max-update is the one read
        done = subprocess.run([train_sh, config, corpus, str(save_dir), *args], capture_output=True, text=True,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    train(3)
    lines = log_since(save_dir / "train.log")
    assert sorted(validations(lines, "valid")) == [1, 2, 3] and not any(EARLY_STOP in line for line in lines)
    before = os.path.getsize(save_dir / "train.log")
    train(12)
    resumed = log_since(save_dir / "train.log", before)
    assert sorted(validations(resumed, "valid")) == [4, 5] and any(EARLY_STOP in line for line in resumed)
    before = os.path.getsize(save_dir / "train.log")
    said = train(20)
    assert os.path.getsize(save_dir / "train.log") == before and "stopped on its patience" in said


def test_a_minimum_gain_stops_a_run_whose_validations_still_improve(corpus, tmp_path):
    """--patience-min-gain: a real fairseq-train run whose validation loss falls at every validation
    (fairseq's rule, any gain, would train it to --max-update 12) stops on its patience of 4 at
    update 5 when no fall counts as a gain, and keeps its lowest-loss checkpoint (the last), not
    the reference the patience counts from (the first)."""
    from fairseq.checkpoint_utils import load_checkpoint_to_cpu

    arguments = [a for a in STOPPING_ARGS if a != "--maximize-best-checkpoint-metric"]  # the lowest loss is best
    save_dir = tmp_path / "run"
    done = subprocess.run([os.path.join(ROOT, "scripts", "train.sh"), os.path.join(ROOT, "configs", "demo",
                          "transformer_L1.sh"), corpus, str(save_dir), *arguments, "--patience-min-gain", "100"],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = log_since(save_dir / "train.log")
    losses = validations(lines, "valid")
    assert sorted(losses) == [1, 2, 3, 4, 5]
    assert all(losses[u]["loss"] < losses[u - 1]["loss"] for u in range(2, 6))  # every one an improvement
    assert any("early stop since valid performance hasn't improved by more than 100 for last 4 runs" in line
               for line in lines)
    best = load_checkpoint_to_cpu(str(save_dir / "checkpoint_best.pt"))
    assert best["optimizer_history"][-1]["num_updates"] == 5
    assert abs(best["extra_state"]["best"] - losses[5]["loss"]) <= 5e-4  # the log rounds to 3 decimals


def test_a_converging_reproduction_resumes_where_it_was_interrupted(tmp_path):
    """The reproduction's own command under the convergence budget (``--converge``; a smoke run's
    corpus, validated every update, patience 3), killed after its first run saved a validation
    without improvement, then run again: the interrupted run resumes from its checkpoint and stops
    where its own recorded curve says an uninterrupted run stops (the stopping rule replayed on
    it), keeping the checkpoint of its best validation; a run that counted its patience afresh
    would train to the cap. A smoke model's validation s-BLEU stays at 0: no validation after the
    first improves on it, and each run stops at update 4."""
    from fairseq.checkpoint_utils import load_checkpoint_to_cpu

    from rfa_doc_mt.reproduce.convergence import replay, run_convergence
    from rfa_doc_mt.reproduce.papers import Convergence, System

    out = tmp_path / "reproduce"
    # in the suite a warm-start fork runs it: killing the client's process group ends the fork's
    # too, with the runs it started (tests/warm_start/warm_start_server.py)
    command = [sys.executable, "-m", "rfa_doc_mt.reproduce", "lstm", "--smoke", "--converge", "--validate-every", "1",
               "--patience", "3", "--cap", "8", "--jobs", "1", "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log = interrupt_after(command, str(out / "runs" / "*" / "train.log"), 2, env)
    run_dir = os.path.dirname(log)
    interrupted_at = load_checkpoint_to_cpu(os.path.join(run_dir, "checkpoint_last.pt"))["optimizer_history"][-1][
        "num_updates"]
    assert interrupted_at in (2, 3), interrupted_at  # after a validation without improvement, before the stop
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert any(f"Loaded checkpoint {run_dir}/checkpoint_last.pt" in line for line in log_since(log))
    budget = Convergence(interval=1, patience=3, cap=8)
    runs = sorted(name for name in os.listdir(out / "runs") if os.path.isdir(out / "runs" / name))
    assert len(runs) == 3  # the 1-to-1 and 3-to-3 transformers, long-short masking
    for name in runs:
        summary = run_convergence(str(out / "runs" / name), System(name, "configs/demo/transformer_L1.sh"), budget)
        stop, selected, _ = replay(summary["curve"], 1, 3)
        assert (summary["last_update"], summary["best_update"], summary["stopped_early"]) == (stop, selected, True)
        assert stop == 4, (name, summary["curve"])
        best = load_checkpoint_to_cpu(str(out / "runs" / name / "checkpoint_best.pt"))
        assert best["optimizer_history"][-1]["num_updates"] == selected
