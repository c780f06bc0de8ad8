"""The papers' tables and figures, re-run: ``python -m rfa_doc_mt.reproduce EXPERIMENT [options]``.

``scripts/reproduce_<experiment>.sh`` call this. Experiments (``--list`` prints them):

* ``rfa_table1``: BLEU of the transformer and RFA at L = 1, and of the transformer, RFA,
  RFA-sgate-avg and RFA-sgate at L = 4 (Wu et al. 2022, Table 1). On the embedded corpus each
  system's learning rate, RFA's projections and the gates' b_f are searched as the paper did
  (seed 1, chosen on validation BLEU; :mod:`.search`), the chosen setting trains ``--seeds``
  seeds, and each system is compared with the transformer of its L seed by seed (paired
  bootstrap: ``python -m rfa_doc_mt.scoring.compare``).
* ``rfa_figure3``: contrastive consistency per phenomenon of the transformer and RFA at
  L = 1..4 with the random baseline (Wu et al. 2022, Figure 3).
* ``rfa_figure4``: RFA's decoding speedup over the transformer for L = 1..15 (Wu et al. 2022,
  Figure 4), from ``rfa_doc_mt.bench.decode_speed``.
* ``lsh_table2``: BLEU and training peak memory against the context size for full attention,
  LSH in self-attention and LSH in self- and cross-attention (Petrick et al. 2022, Table 2).
* ``memory_table1``: the sentence-level baseline and the recurrent-memory model fine-tuned from
  it (Feng et al. 2022, Table 1), and the memory side / layer ablation (Feng et al. 2022, Table 3).
* ``lstm``: the 1-to-1 and 3-to-3 transformers and the 3-to-3 long-short term masking model
  (Zhang et al. 2020's systems).
* ``all``: every experiment above, each system trained once.

By default an experiment runs on the embedded synthetic corpus (generated into OUT/data on
first use) with the tiny configs of ``configs/demo``: CPU, minutes. ``--corpus NAME --data DIR``
runs the paper's configs on a corpus prepared with ``scripts/prepare_*.sh`` (``--list`` shows
which corpora each experiment knows).

Each system is trained, decoded (sliding windows) and scored by ``scripts/run_system.sh`` into
OUT/runs/<system>, ``--jobs`` at a time with one torch thread each; a system that two
experiments share is trained once. Inputs (data, configs, architectures) are checked before any
long work; re-running skips finished systems and resumes unfinished ones. Each experiment
prints its table and writes OUT/<experiment>.md and OUT/<experiment>.json (with the paper's
numbers beside ours, the machine and the command), plus a PNG where the paper has a figure.

The package, by concern: :mod:`.papers` (systems, experiments, the budget and the papers'
numbers), :mod:`.experiments` (which systems each experiment trains, and how long),
:mod:`.search` (Table 1's hyper-parameter search and seeds),
:mod:`.running` (checks, training, benchmarks), :mod:`.tables` (results, tables, plots),
:mod:`.cli` (the command line) and :mod:`.cost` (what the embedded run costs on this machine,
``python -m rfa_doc_mt.reproduce.cost``).
"""

from .experiments import EXPERIMENTS, embedded_train_args, systems_to_train
from .papers import EMBEDDED, FULL_BUDGET, MEMORY_FINETUNE_SHARE, MEMORY_STAGE1, Experiment, System
from .running import config_problems, data_problems, prepare_embedded
from .tables import learning_curve

__all__ = ["EMBEDDED", "EXPERIMENTS", "FULL_BUDGET", "MEMORY_FINETUNE_SHARE", "MEMORY_STAGE1", "Experiment", "System",
           "config_problems", "data_problems", "embedded_train_args", "learning_curve", "prepare_embedded",
           "systems_to_train"]
