"""Which systems each experiment trains (on the embedded corpus and on the papers' corpora),
the systems to train for a set of rows, and the training arguments that give each its budget."""

import re
from typing import Dict, List, Optional, Tuple

from ..data.io import DataError
from .context_length import table_context_length
from .convergence import NO_EPOCH_END, convergence_train_args
from .diagnosis import table_rfa_diagnosis
from .papers import (
    BIBLE,
    BIBLE_CONVERGENCE,
    CONTEXT_LENGTH_BUDGET,
    CONTEXT_LENGTH_CONVERGENCE,
    CONTEXT_LENGTH_VALIDATIONS,
    DEFAULT_CONVERGENCE,
    DIAGNOSIS_BUDGET,
    DIAGNOSIS_LONG_BUDGET,
    EMBEDDED,
    FULL_BUDGET,
    LSH_ATTENTIONS,
    MEMORY_FINETUNE_SHARE,
    MEMORY_STAGE1,
    PAPER_RFA_TABLE1,
    TABLE1_BUDGET,
    TABLE1_CONVERGENCE,
    VALIDATIONS_PER_RUN,
    Experiment,
    System,
    demo,
    row_seed,
)
from .real_text import BIBLE_FAMILIES, BIBLE_ORDER, table_bible
from .tables import (
    table_lsh_table2,
    table_lstm,
    table_memory_table1,
    table_rfa_figure3,
    table_rfa_figure4,
    table_rfa_table1,
)

# ---------------------------------------------------------------------------------------
# the experiments


def _rfa_family(prefix: str) -> Dict[str, str]:
    return {"transformer": f"{prefix}_transformer", "rfa": f"{prefix}_rfa", "rfa_sgate": f"{prefix}_sgate",
            "rfa_sgate_avg": f"{prefix}_sgate_avg"}


def rfa_table1_systems(prefix: Optional[str]) -> List[Tuple[str, System]]:
    labels = {"transformer": "Transformer", "rfa": "RFA", "rfa_sgate_avg": "RFA-sgate-avg", "rfa_sgate": "RFA-sgate",
              "rfa_token": "RFA-token", "rfa_feature": "RFA-feature",
              "rfa_cross_local": "RFA + 2 local cross heads"}
    rows = []
    for row_id in PAPER_RFA_TABLE1:
        family, window = row_id.rsplit("_L", 1)
        if prefix is not None and family not in _rfa_family(prefix):
            continue  # the gates at every token: the embedded corpus only (no paper configs)
        if prefix is None:
            system = demo(row_id, labels[family])
        else:
            system = System(labels[family], f"configs/rfa/{_rfa_family(prefix)[family]}_L{window}.sh")
        rows.append((row_id, system))
    return rows


def rfa_figure3_systems(prefix: Optional[str]) -> List[Tuple[str, System]]:
    rows = []
    for family, label in (("transformer", "Transformer"), ("rfa", "RFA")):
        for window in (1, 2, 3, 4):
            row_id = f"{family}_L{window}"
            system = demo(row_id, f"{label} L={window}") if prefix is None else \
                System(f"{label} L={window}", f"configs/rfa/{_rfa_family(prefix)[family]}_L{window}.sh")
            rows.append((row_id, system))
    return rows


def lsh_systems(embedded: bool) -> List[Tuple[str, System]]:
    if embedded:  # full attention with k context sentences is the concatenation transformer at L = k + 1
        return [("full_k0", demo("transformer_L1", "full attention, k=0")),
                ("full_k3", demo("transformer_L4", "full attention, k=3")),
                ("self_k0", demo("lsh_self_k0", "LSH self, k=0")), ("self_k3", demo("lsh_self_k3", "LSH self, k=3")),
                ("self-cross_k0", demo("lsh_self_cross_k0", "LSH self+cross, k=0")),
                ("self-cross_k3", demo("lsh_L4", "LSH self+cross, k=3"))]
    return [(f"{attention}_k{k}", System(f"{LSH_ATTENTIONS[attention]}, k={k}",
                                         f"configs/lsh/{attention.replace('-', '_')}_k{k}.sh"))
            for attention in LSH_ATTENTIONS for k in (0, 3, 9, 12)]


def memory_systems(embedded: bool) -> List[Tuple[str, System]]:
    if embedded:
        def fine_tuned(name, label):
            return demo(name, label, MEMORY_STAGE1, MEMORY_FINETUNE_SHARE)
        return [("baseline", demo("transformer_L1", "sentence-level transformer (L=1)")),
                ("memory", fine_tuned("memory_L1", "memory, fine-tuned from it")),
                ("both_lower", fine_tuned("memory_both_0", "memory, lower layer")),
                ("both_all", fine_tuned("memory_both_01", "memory, every layer")),
                ("both_top", fine_tuned("memory_L1", "memory, fine-tuned from it")),
                ("source_top", fine_tuned("memory_source_1", "memory, source side")),
                ("target_top", fine_tuned("memory_target_1", "memory, target side"))]
    base = System("sentence-level transformer", "configs/memory/baseline.sh")
    rows = [("baseline", base),
            ("memory", System("memory, fine-tuned from it", "configs/memory/both_5.sh", base.key))]
    for row_id, name in (("both_lower", "both_0-1"), ("both_middle", "both_2-3"), ("both_upper", "both_4-5"),
                         ("both_top", "both_5"), ("source_top", "source_5"), ("target_top", "target_5")):
        rows.append((row_id, System(name, f"configs/memory/{name}.sh", base.key)))
    return rows


def lstm_systems(embedded: bool) -> List[Tuple[str, System]]:
    if embedded:
        return [("1to1", demo("transformer_L1", "1-to-1 transformer")),
                ("3to3", demo("transformer_L3", "3-to-3 transformer")),
                ("3to3_lstm", demo("lstm_L3", "3-to-3 long-short term masking"))]
    return [("1to1", System("1-to-1 transformer", "configs/lstm/lstm_L1.sh")),
            ("3to3", System("3-to-3 transformer", "configs/lstm/transformer_3to3.sh")),
            ("3to3_lstm", System("3-to-3 long-short term masking", "configs/lstm/lstm_3to3.sh"))]


# The context-length experiment (the question Wu et al. 2022 left open): each method at L = 1, 4, 8
# and 15 on the long-range corpus, and the memory model, which reads the whole document
CONTEXT_FAMILIES = {"transformer": "Transformer", "rfa_sgate": "RFA-sgate", "lsh": "LSH self+cross",
                    "long_short": "long-short masking"}
CONTEXT_LENGTHS = (1, 4, 8, 15)
# RFA's gates at every token at the longest windows only, beside RFA-sgate at L = 15, and RFA-sgate with
# 2 local cross heads (beyond the paper: the remedy of RFA's slow learning, docs/models.md)
CONTEXT_GATE_FAMILIES = {"rfa_token": "RFA-token", "rfa_feature": "RFA-feature",
                         "rfa_sgate_cross_local": "RFA-sgate + 2 local cross heads"}
CONTEXT_MEMORY_STAGE1 = System("sentence-level transformer, stage 1 of the memory model",
                               "configs/context/transformer_L1.sh", share=1 - MEMORY_FINETUNE_SHARE,
                               name="context-transformer_L1-memory_stage1")


def context_length_systems() -> List[Tuple[str, System]]:
    rows = [(f"{family}_L{window}", System(f"{label} L={window}", f"configs/context/{family}_L{window}.sh"))
            for family, label in CONTEXT_FAMILIES.items() for window in CONTEXT_LENGTHS]
    rows += [(f"{family}_L15", System(f"{label} L=15", f"configs/context/{family}_L15.sh"))
             for family, label in CONTEXT_GATE_FAMILIES.items()]
    rows.append(("memory", System("recurrent memory (whole document)", "configs/demo/memory_L1.sh",
                                  CONTEXT_MEMORY_STAGE1.key, MEMORY_FINETUNE_SHARE, "context-memory")))
    return rows


def context_length_panel(row: str) -> str:
    """The panel of a context-length row's learning curve: its window; the memory model beside the
    longest windows."""
    window = re.search(r"_L(\d+)$", row_seed(row)[0])
    longest = max(CONTEXT_LENGTHS)
    if window is None or int(window.group(1)) == longest:
        return f"L = {longest} and the memory model (whole document)"
    return f"L = {int(window.group(1))}"


def bible_systems() -> List[Tuple[str, System]]:
    """Table 1's systems on the Bible (configs/bible), in the order they train (BIBLE_ORDER)."""
    return [(row_id, System(f"{BIBLE_FAMILIES[row_id.rsplit('_L', 1)[0]]}", f"configs/bible/{row_id}.sh"))
            for group in BIBLE_ORDER for row_id in group]


# The diagnosis of RFA's slow learning (docs/models.md): RFA with each of its attentions alone (the
# other softmax), more random features, the other feature map and τ fixed, and the remedies, beside
# the transformer and RFA, at Table 1's L = 4 (RFA without a gate, as Table 1's RFA row) and at L = 15
# on the long-range corpus (RFA-sgate, as the context-length experiment's)
def diagnosis_variants(cross: int, causal: int) -> Tuple[Tuple[str, str, Tuple[str, ...]], ...]:
    """(row, label, options) of the diagnosis's variants of RFA with ``cross`` and ``causal``
    projections."""
    return (
        ("rfa_causal", "RFA in causal attention only", ("--rfa-attention", "causal")),
        ("rfa_cross", "RFA in cross attention only", ("--rfa-attention", "cross")),
        ("rfa_cross_features", "RFA, 4 x the cross projections", ("--rfa-cross-proj-dim", str(4 * cross))),
        ("rfa_causal_features", "RFA, 4 x the causal projections", ("--rfa-causal-proj-dim", str(4 * causal))),
        ("rfa_positive", "RFA, positive features", ("--rfa-feature-map", "positive")),
        ("rfa_fixed_tau", "RFA, τ fixed at 1", ("--rfa-fixed-tau",)),
        # the remedies (docs/models.md): the delta rule in causal attention, softmax heads over the
        # current sentence beside RFA in causal, cross or both attentions (2 of the 4 heads)
        ("rfa_delta", "RFA, the delta rule in causal attention", ("--rfa-update", "delta")),
        ("rfa_causal_local", "RFA, 2 causal heads softmax over the current sentence",
         ("--rfa-causal-local-heads", "2")),
        ("rfa_cross_local", "RFA, 2 cross heads softmax over the current sentence", ("--rfa-cross-local-heads", "2")),
        ("rfa_local", "RFA, 2 causal and 2 cross heads softmax over the current sentence",
         ("--rfa-causal-local-heads", "2", "--rfa-cross-local-heads", "2")),
    )


def diagnosis_systems(transformer: System, rfa: System, prefix: str, cross: int, causal: int
                      ) -> List[Tuple[str, System]]:
    """The diagnosis's rows: runs of their own (``prefix``-row), never a table's run of the same config
    at another budget; RFA's rows with ``cross`` and ``causal`` projections, as ``rfa`` trains."""
    rows = [(row_id, System(system.label, system.config, name=f"{prefix}-{row_id}", overrides=system.overrides))
            for row_id, system in (("transformer", transformer), ("rfa", rfa))]
    for row_id, label, options in diagnosis_variants(cross, causal):
        rows.append((row_id, System(label, rfa.config, name=f"{prefix}-{row_id}", overrides=rfa.overrides + options)))
    return rows


EXPERIMENTS: Dict[str, Experiment] = {e.name: e for e in [
    Experiment("rfa_table1", "Wu et al. 2022, Table 1: BLEU at L = 1 and L = 4", "Wu et al. 2022",
               {EMBEDDED: rfa_table1_systems(None), "iwslt15": rfa_table1_systems("iwslt"),
                "opensub-bleu": rfa_table1_systems("opensub_bleu")}, False, table_rfa_table1, searches=True,
               budget=TABLE1_BUDGET, convergence=TABLE1_CONVERGENCE),
    Experiment("rfa_figure3", "Wu et al. 2022, Figure 3: contrastive consistency per phenomenon, L = 1..4",
               "Wu et al. 2022",
               {EMBEDDED: rfa_figure3_systems(None), "opensub-consistency": rfa_figure3_systems("opensub_consistency")},
               True, table_rfa_figure3, evaluates=("consistency",),
               smoke_rows=("transformer_L1", "transformer_L4", "rfa_L1", "rfa_L4")),
    Experiment("rfa_figure4", "Wu et al. 2022, Figure 4: RFA's decoding speedup over the transformer", "Wu et al. 2022",
               {EMBEDDED: [], "iwslt15": []}, False, table_rfa_figure4, benchmark="decode_speed"),
    Experiment("lsh_table2", "Petrick et al. 2022, Table 2: LSH attention against the context size",
               "Petrick et al. 2022",
               {EMBEDDED: lsh_systems(True), "paper": lsh_systems(False)}, False, table_lsh_table2,
               benchmark="training_memory",
               # LSH self-attention (all pairs at k=0, in chunks at k=3) runs in LSH self+cross too
               smoke_rows=("full_k0", "full_k3", "self-cross_k0", "self-cross_k3")),
    Experiment("memory_table1", "Feng et al. 2022, Tables 1 and 3: recurrent memory fine-tuned from the sentence model",
               "Feng et al. 2022", {EMBEDDED: memory_systems(True), "paper": memory_systems(False)}, False,
               table_memory_table1,
               # the memory's layers are one option (the top layer trains), its sides another (each trains)
               smoke_rows=("baseline", "memory", "both_top", "source_top", "target_top")),
    Experiment("lstm", "Zhang et al. 2020: 1-to-1, 3-to-3 and 3-to-3 long-short term masking", "Zhang et al. 2020",
               {EMBEDDED: lstm_systems(True), "paper": lstm_systems(False)}, False, table_lstm),
    Experiment("context_length", "Context beyond four sentences: quality and cost against L on the long-range "
               "corpus", "Wu et al. 2022", {EMBEDDED: context_length_systems()}, True, table_context_length,
               embedded_data="data-long-range", budget=CONTEXT_LENGTH_BUDGET, decodes_alone=True,
               validations=CONTEXT_LENGTH_VALIDATIONS,
               # RFA at the longest windows, and the memory model with its own stage 1 on this corpus
               smoke_rows=("rfa_sgate_L15", "memory"),
               # at convergence: each family at every L, RFA's gates at every token at L = 15 and the memory
               # model; two seeds for every L = 15 row
               convergence=CONTEXT_LENGTH_CONVERGENCE,
               converged_rows=None,
               converged_seeds={row: 2 for row, _ in context_length_systems() if row.endswith("_L15")},
               curve_panel=context_length_panel),
    Experiment("bible", "Wu et al. 2022, Table 1 on real text: the Bible, English to Spanish", "Wu et al. 2022",
               {BIBLE: bible_systems()}, True, table_bible, in_all=False,
               # every run until it stops improving, three seeds of every system at L = 4
               convergence=BIBLE_CONVERGENCE, converges_on=(BIBLE,), train_order=BIBLE_ORDER,
               converged_seeds={row: 3 for group in BIBLE_ORDER for row in group if row.endswith("_L4")},
               smoke_rows=("transformer_L4", "rfa_cross_local_L4", "transformer_L1")),
    Experiment("rfa_diagnosis", "Why RFA learns slowly, and remedies: its attentions, features and τ at L = 4",
               "Wu et al. 2022",
               # RFA as Table 1's search chose it at L = 4: 64 cross and 32 causal projections (search.py)
               {EMBEDDED: diagnosis_systems(demo("transformer_L4", "Transformer"),
                                            System("RFA", "configs/demo/rfa_L4.sh",
                                                   overrides=("--rfa-causal-proj-dim", "32")),
                                            "diagnosis", cross=64, causal=32)},
               False, table_rfa_diagnosis, evaluates=("test", "attention"), budget=DIAGNOSIS_BUDGET.cap,
               bleu_budget=DIAGNOSIS_BUDGET, in_all=False,
               # softmax cross attention in an RFA model; local softmax heads beside RFA heads
               smoke_rows=("rfa_causal", "rfa_local")),
    Experiment("rfa_diagnosis_long", "Why RFA learns slowly, and remedies: its attentions, features and τ at "
               "L = 15 on the long-range corpus", "Wu et al. 2022",
               {EMBEDDED: diagnosis_systems(System("Transformer", "configs/context/transformer_L15.sh"),
                                            System("RFA-sgate", "configs/context/rfa_sgate_L15.sh"),
                                            "diagnosis-long", cross=64, causal=16)},
               False, table_rfa_diagnosis, evaluates=("test", "attention"), embedded_data="data-long-range",
               budget=DIAGNOSIS_LONG_BUDGET.cap, bleu_budget=DIAGNOSIS_LONG_BUDGET, in_all=False,
               smoke_rows=("rfa_delta",)),  # the delta rule, with RFA-sgate's gate
]}
for _experiment in EXPERIMENTS.values():
    _experiment.script = f"scripts/reproduce_{_experiment.name}.sh"


# systems that no table shows but others start from (looked up by key)
STAGE1_SYSTEMS = {stage1.key: stage1 for stage1 in (MEMORY_STAGE1, CONTEXT_MEMORY_STAGE1)}


def systems_to_train(rows) -> List[System]:
    """The distinct systems behind (row id, system) pairs, with the systems they start from
    (which run first)."""
    systems: List[System] = []
    for _, system in rows:
        if system.key not in [s.key for s in systems]:
            systems.append(system)
    known = {s.key: s for s in systems}
    for system in list(systems):
        if system.starts_from and system.starts_from not in known:
            parent = STAGE1_SYSTEMS.get(system.starts_from)
            if parent is None:
                raise DataError(f"{system.config} starts from {system.starts_from}, which no experiment trains")
            systems.insert(0, parent)
            known[parent.key] = parent
    return systems


def validation_interval(budget: int, validations: int = VALIDATIONS_PER_RUN) -> int:
    return max(1, budget // validations)


def embedded_train_args(system: System, budget: int, validations: int = VALIDATIONS_PER_RUN,
                        convergence=None) -> List[str]:
    """fairseq-train arguments that give a system its share of the budget, validated (and
    offered as checkpoint_best.pt) ``validations`` times at the same updates as every other
    system; with ``convergence`` (a :class:`.papers.Convergence`), those of the convergence
    budget instead (:func:`.convergence.convergence_train_args`)."""
    if convergence is not None:
        return convergence_train_args(system, convergence)
    interval = validation_interval(budget, validations)
    # fairseq also validates and saves at every epoch's end: switched off (convergence.NO_EPOCH_END)
    never = str(NO_EPOCH_END)
    return ["--max-update", str(system.updates(budget)), "--validate-interval-updates", str(interval),
            "--save-interval-updates", str(interval), "--keep-interval-updates", "1",
            "--validate-interval", never, "--save-interval", never]


def budget_note(args, results: dict) -> str:
    convergence = getattr(args, "convergence", None)
    if convergence is not None and convergence.fixed and not args.converge:
        smoke = " (a smoke run: its tiny corpus and budget test the machinery only)" if args.smoke else ""
        return (f"Fixed budget{smoke}: every run {convergence.describe()}; updates of up to 4096 tokens. The "
                "table's 'selected at' is the update of the checkpoint kept. Learning curves (validation s-BLEU): "
                "the PNG beside this table.")
    if convergence is not None and args.corpus == EMBEDDED:
        smoke = " (a smoke run: its tiny corpus and caps test the machinery only)" if args.smoke else ""
        return (f"Convergence budget{smoke}: every run {convergence.describe()} (a fine-tuned memory model: "
                f"{MEMORY_STAGE1.updates(convergence.cap)} sentence-level + "
                f"{int(round(convergence.cap * MEMORY_FINETUNE_SHARE))} fine-tuning at most, each stage stopping on "
                "its own); updates of up to 4096 tokens. The table's updates are those of the checkpoint kept; "
                "'cap' marks a run stopped by the cap, still improving. Learning curves (validation s-BLEU, mean "
                "and range over seeds): the PNG beside this table.")
    if convergence is not None and args.converge:  # a real corpus's (the Bible)
        smoke = " (a smoke run: its tiny corpus and caps test the machinery only)" if args.smoke else ""
        return (f"Convergence budget{smoke}: every run {convergence.describe()}; updates of up to 4096 tokens. "
                "'cap' marks a run stopped by the cap, still improving. Learning curves (validation s-BLEU, mean and "
                "range over seeds): the PNG beside this table.")
    if args.smoke:
        return ("Smoke run: 3 updates per system, a tiny corpus, the rows that exercise distinct code; the numbers "
                "test the machinery only.")
    if args.corpus != EMBEDDED:
        return ("Updates: as the paper configs train (until early stopping), shown per row; the learning "
                "curves are in the PNG beside this table.")
    full = getattr(args, "full_budget", FULL_BUDGET)
    short = "" if args.budget >= full else \
        f" **A short run**: the full reproduction trains {full} updates per system."
    return (f"Every system trained {args.budget} updates of up to 4096 tokens (a fine-tuned memory model: "
            f"{MEMORY_STAGE1.updates(args.budget)} sentence-level + {int(round(args.budget * MEMORY_FINETUNE_SHARE))} "
            f"fine-tuning, of up to 1400 tokens a sentence step, about 4k tokens an update), validated every "
            f"{validation_interval(args.budget, getattr(args, 'validations', VALIDATIONS_PER_RUN))} updates; "
            f"each row's model is its checkpoint with the lowest "
            f"validation loss.{short} Learning curves: the PNG beside this table.")


def print_list(budget: Optional[int], seeds: int, plan=None, converge: bool = False) -> None:
    """Every experiment, corpus and system with its config and its number of updates (``budget``,
    else each experiment's own); for Table 1 on the embedded corpus, the settings its search
    tries and the seeds it trains."""
    from .search import FULL_PLAN, describe_search

    for experiment in EXPERIMENTS.values():
        print(f"{experiment.name}: {experiment.title}  [{experiment.script}]")
        updates_each = budget or experiment.budget
        convergence = experiment.convergence or DEFAULT_CONVERGENCE
        for corpus, rows in experiment.corpora.items():
            if not rows:
                print(f"  --corpus {corpus}: benchmark only")
                continue
            print(f"  --corpus {corpus}:")
            if (corpus == EMBEDDED and converge) or corpus in experiment.converges_on:
                print(f"    --converge: every run {convergence.describe()}")
                rows = experiment.rows(corpus, converged=True)
                if experiment.searches:
                    for line in describe_search(rows, plan, seeds, convergence.cap)[1:]:
                        print(f"    {line}")
                    continue
                for system in systems_to_train(rows):
                    start = f", fine-tuned from {system.starts_from}" if system.starts_from else ""
                    print(f"    {system.key:40s} {system.config:40s} at most {system.updates(convergence.cap)} "
                          f"updates{start}")
                continue
            if corpus == EMBEDDED and experiment.searches:
                for line in describe_search(rows, plan or FULL_PLAN, seeds, updates_each):
                    print(f"    {line}")
                continue
            for system in systems_to_train(rows):
                if corpus == EMBEDDED:
                    updates = f"{system.updates(updates_each)} updates"
                    if system.starts_from:
                        updates += f", fine-tuned from {system.starts_from}"
                else:
                    updates = "updates: the config's (early stopping)" + \
                        (f", fine-tuned from {system.starts_from}" if system.starts_from else "")
                print(f"    {system.key:40s} {system.config:40s} {updates}")
