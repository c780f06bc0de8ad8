"""Table 1's hyper-parameter search on the embedded corpus, as Wu et al. 2022 tuned its systems
(appendix A.2), and the seeds of the settings it chooses.

The paper searched the peak learning rate of every system in {5e-4, 1e-3}, RFA's cross +
causal random projections in {128 + 64, 256 + 32} and RFA-sgate's initial gate bias b_f in
{1, 2}, each on the development set. The tiny models' counterparts (``FULL_SPACE``):

* learning rate {1e-3, 2e-3}: the paper's two rates, a factor of two apart, scaled so that
  the upper one is the rate the demo configs train the tiny models with (2e-3, warmed up over
  200 updates; the paper's final choice, 1e-3 over 8000, was its upper one too);
* projections {128 + 16, 64 + 32}: the paper's sizes scaled by the head dimension (32 in
  the tiny models, 64 in the paper's), so that each attention keeps its random features per
  head dimension: cross 4 x and causal 1/2 x the head dimension (256 + 32), or cross 2 x and
  causal 1 x (128 + 64). (The tiny architecture's default, 64 + 16, which the other tables
  train, is neither.)
* b_f {1, 2}: not a size, kept; searched for RFA-sgate and RFA-sgate-avg.

Each setting trains with seed 1 and is scored by the s-BLEU of its windowed decoding of the
validation split (beam 4, as the test split is decoded): the highest wins (a tie: the first
in the order listed). What each row searches (``ROW_SEARCHES``), in stages where a row has
two dimensions (the paper tuned by hand: one dimension at a time):

* RFA at L = 4, where the paper's claim is: the projections at the configs' learning rate,
  then the learning rate at the chosen projections (3 runs; the grid would be 4);
* the transformers at L = 1 and 4: the learning rate;
* RFA at L = 1: the learning rate at RFA L = 4's chosen projections (the paper chose one
  projection size per corpus for all its RFA models);
* RFA-sgate and RFA-sgate-avg: b_f at RFA L = 4's chosen learning rate and projections (the
  gate adds one parameter to the same model);
* RFA-token and RFA-feature (the gates at every token, not in the paper): RFA L = 4's chosen
  learning rate and projections, as RFA-sgate, their configs' gates, no search (one run each).

13 search runs, and one each for RFA-token and RFA-feature; the chosen setting of each row then
trains seeds 2..N (seed 1 is its search run): 25 runs with three seeds before those two rows, 31
with them. The full grid of the paper's rows would be 28 search runs, which with
three seeds does not fit the 150 minutes Table 1's embedded reproduction is given on a 2-core
machine (docs/significance.md has the arithmetic).
"""

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .papers import System

# what the demo configs train with (configs/demo/train_args.sh, rfa_doc_transformer_tiny, and
# the gates' configs): a setting equal to a config's own is that config's run, shared with the
# other tables (tests/test_reproduce.py checks these against the configs)
DEMO_LEARNING_RATE = "2e-3"
DEMO_PROJECTIONS = (64, 16)
DEMO_GATE_BIAS = {"rfa_sgate": 2, "rfa_sgate_avg": 0}
DIMENSIONS = ("lr", "projections", "gate_bias")
DIMENSION_NAMES = {"lr": "learning rate", "projections": "projections (cross+causal)", "gate_bias": "b_f"}


@dataclass(frozen=True)
class SearchSpace:
    """The values each dimension takes."""

    lr: Tuple[str, ...]
    projections: Tuple[Tuple[int, int], ...]
    gate_bias: Tuple[int, ...]


FULL_SPACE = SearchSpace(lr=("1e-3", "2e-3"), projections=((128, 16), (64, 32)), gate_bias=(1, 2))


@dataclass(frozen=True)
class Setting:
    """A system's hyper-parameters: None where its family has no such one."""

    lr: str
    projections: Optional[Tuple[int, int]] = None  # RFA's cross + causal random projections
    gate_bias: Optional[int] = None  # the sentential gate's b_f at initialisation

    @property
    def label(self) -> str:
        parts = [f"lr {self.lr}"]
        if self.projections:
            parts.append(f"{self.projections[0]}+{self.projections[1]}")
        if self.gate_bias is not None:
            parts.append(f"b_f {self.gate_bias}")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {"lr": self.lr, "projections": list(self.projections) if self.projections else None,
                "gate_bias": self.gate_bias, "label": self.label}


@dataclass(frozen=True)
class RowSearch:
    """What one Table 1 row searches: ``stages`` of dimensions, searched one stage after the
    other (a stage's dimensions together, from the setting the stage before chose); the other
    dimensions from the chosen setting of ``inherits`` (a row: its learning rate and
    projections), else the config's own."""

    family: str
    stages: Tuple[Tuple[str, ...], ...]
    inherits: Optional[str] = None
    # a setting given, not searched (the convergence runs train the settings chosen before)
    setting: Optional[Setting] = None

    @property
    def searched(self) -> Tuple[str, ...]:
        return tuple(dimension for stage in self.stages for dimension in stage)


ROW_SEARCHES: Dict[str, RowSearch] = {
    "transformer_L1": RowSearch("transformer", (("lr",),)),
    "rfa_L1": RowSearch("rfa", (("lr",),), inherits="rfa_L4"),
    "transformer_L4": RowSearch("transformer", (("lr",),)),
    "rfa_L4": RowSearch("rfa", (("projections",), ("lr",))),
    "rfa_sgate_avg_L4": RowSearch("rfa_sgate_avg", (("gate_bias",),), inherits="rfa_L4"),
    "rfa_sgate_L4": RowSearch("rfa_sgate", (("gate_bias",),), inherits="rfa_L4"),
    # the gates at every token: RFA-sgate's learning rate and projections (RFA L = 4's), no search
    "rfa_token_L4": RowSearch("rfa_token", (), inherits="rfa_L4"),
    "rfa_feature_L4": RowSearch("rfa_feature", (), inherits="rfa_L4"),
    # beyond the paper: RFA with 2 local cross heads at RFA L = 4's setting, no search
    "rfa_cross_local_L4": RowSearch("rfa_cross_local", (), inherits="rfa_L4"),
}


@dataclass(frozen=True)
class SearchPlan:
    """The values of each dimension and what each row searches."""

    space: SearchSpace
    rows: Dict[str, RowSearch]


FULL_PLAN = SearchPlan(FULL_SPACE, ROW_SEARCHES)
# --smoke: every step at the least cost. One row chooses between two settings (the transformer
# at L = 1: its config's learning rate, whose run the other tables share, and the other); the
# others have one setting each, the configs' own where there is one (a setting of its own is
# chosen without decoding the validation split: nothing to choose between), RFA-sgate-avg's b_f
# 2 (its config has 0), so that a setting other than the config's trains too. The second seed
# for the L = 1 rows only (SMOKE_SEEDED_ROWS): enough for a spread and a comparison of two seeds.
SMOKE_PLAN = SearchPlan(
    SearchSpace(lr=(DEMO_LEARNING_RATE, "1e-3"), projections=(DEMO_PROJECTIONS,), gate_bias=(2,)),
    {"transformer_L1": RowSearch("transformer", (("lr",),)), "rfa_L1": RowSearch("rfa", (), inherits="rfa_L4"),
     "transformer_L4": RowSearch("transformer", ()), "rfa_L4": RowSearch("rfa", ()),
     "rfa_sgate_avg_L4": RowSearch("rfa_sgate_avg", (("gate_bias",),), inherits="rfa_L4"),
     "rfa_sgate_L4": RowSearch("rfa_sgate", (("gate_bias",),), inherits="rfa_L4"),
     "rfa_token_L4": RowSearch("rfa_token", (), inherits="rfa_L4"),
     "rfa_feature_L4": RowSearch("rfa_feature", (), inherits="rfa_L4"),
     "rfa_cross_local_L4": RowSearch("rfa_cross_local", (), inherits="rfa_L4")})
SMOKE_SEEDED_ROWS = ("transformer_L1", "rfa_L1")
# --converge: no search; every row trains the setting the search chose at 600 updates (its run at
# commit f412236, docs/reproduction.md) with every seed, each run until it stops improving
# (convergence.py)
CHOSEN_SETTINGS = {
    "transformer_L1": Setting("1e-3"), "rfa_L1": Setting("2e-3", (64, 32)), "transformer_L4": Setting("2e-3"),
    "rfa_L4": Setting("2e-3", (64, 32)), "rfa_sgate_avg_L4": Setting("2e-3", (64, 32), 1),
    "rfa_sgate_L4": Setting("2e-3", (64, 32), 1),
    # the gates at every token: RFA-sgate's learning rate and projections (RFA L = 4's choice)
    "rfa_token_L4": Setting("2e-3", (64, 32)), "rfa_feature_L4": Setting("2e-3", (64, 32)),
    # RFA with 2 local cross heads: RFA L = 4's
    "rfa_cross_local_L4": Setting("2e-3", (64, 32))}
CHOSEN_PLAN = SearchPlan(FULL_SPACE, {row: RowSearch(search.family, (), setting=CHOSEN_SETTINGS[row])
                                      for row, search in ROW_SEARCHES.items()})


def config_setting(family: str) -> Setting:
    """The setting a family's demo config trains with."""
    return Setting(DEMO_LEARNING_RATE, None if family == "transformer" else DEMO_PROJECTIONS,
                   DEMO_GATE_BIAS.get(family))


def start_setting(row: str, plan: SearchPlan, chosen: Dict[str, Setting]) -> Optional[Setting]:
    """Where a row's search starts: its config's setting, with the learning rate and projections
    of the row it inherits from; None while that row is undecided."""
    search = plan.rows[row]
    if search.setting is not None:
        return search.setting
    start = config_setting(search.family)
    if not search.inherits:
        return start
    if search.inherits not in chosen:
        return None
    parent = chosen[search.inherits]
    return Setting(parent.lr, parent.projections, start.gate_bias)


def expand(start: Setting, dimensions: Sequence[str], space: SearchSpace) -> List[Setting]:
    """``start`` with ``dimensions`` taking every value of ``space``, in order."""
    settings = [start]
    for dimension in DIMENSIONS:
        if dimension in dimensions:
            settings = [Setting(**{**s.__dict__, dimension: value}) for s in settings
                        for value in getattr(space, dimension)]
    return settings


def candidates(row: str, plan: SearchPlan, chosen: Dict[str, Setting]) -> Optional[List[Setting]]:
    """The settings of ``row``'s first stage, in order (a one-stage search: all it tries); None
    while the row it inherits from is undecided."""
    start = start_setting(row, plan, chosen)
    if start is None:
        return None
    stages = plan.rows[row].stages
    return expand(start, stages[0] if stages else (), plan.space)


def reachable(row: str, plan: SearchPlan, chosen: Dict[str, Setting]) -> List[Setting]:
    """Every setting ``row`` may try, whichever each stage chooses (for an estimate of its cost)."""
    frontier = [start_setting(row, plan, chosen)]
    settings: List[Setting] = []
    for stage in plan.rows[row].stages or ((),):
        frontier = [s for winner in frontier for s in expand(winner, stage, plan.space)]
        settings += [s for s in frontier if s not in settings]
    return settings


def runs_per_row(row: str, plan: SearchPlan) -> int:
    """Search runs of a row: each stage's settings, less the one every later stage starts from."""
    count = 1
    for stage in plan.rows[row].stages:
        values = 1
        for dimension in stage:
            values *= len(getattr(plan.space, dimension))
        count += values - 1
    return count


def select(scores: Sequence[Tuple[Setting, float]]) -> Setting:
    """The setting of the highest validation BLEU; of equal ones, the first."""
    if not scores:
        raise ValueError("no setting to choose from")
    best = max(score for _, score in scores)
    return next(setting for setting, score in scores if score == best)


def overrides(setting: Setting, family: str, seed: int) -> Tuple[str, ...]:
    """fairseq-train arguments that turn the family's demo config into ``setting`` and ``seed``
    (appended after the config's own: the last value of an option wins)."""
    own = config_setting(family)
    args: List[str] = []
    if setting.lr != own.lr:
        args += ["--lr", setting.lr]
    if setting.projections != own.projections:
        args += ["--rfa-cross-proj-dim", str(setting.projections[0]),
                 "--rfa-causal-proj-dim", str(setting.projections[1])]
    if setting.gate_bias != own.gate_bias:
        args += ["--rfa-gate-bias-init", str(setting.gate_bias)]
    if seed != 1:
        args += ["--seed", str(seed)]
    return tuple(args)


def variant(base: System, family: str, setting: Setting, seed: int) -> System:
    """``base`` (a demo config's system) trained with ``setting`` and ``seed``: the base itself
    when both are its config's own (its run is shared with the other tables)."""
    args = overrides(setting, family, seed)
    if not args:
        return base
    own = config_setting(family)
    parts = [base.key]
    if setting.lr != own.lr:
        parts.append(f"lr{setting.lr}")
    if setting.projections != own.projections:
        parts.append(f"p{setting.projections[0]}x{setting.projections[1]}")
    if setting.gate_bias != own.gate_bias:
        parts.append(f"bf{setting.gate_bias}")
    if seed != 1:
        parts.append(f"seed{seed}")
    return System(base.label, base.config, base.starts_from, base.share, "-".join(parts), args)


def validation_bleu(run_dir: str) -> Optional[float]:
    """s-BLEU of a run's decoded validation split (valid.bleu.json), None before it is scored."""
    path = os.path.join(run_dir, "valid.bleu.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)["s_bleu"]["score"]


@dataclass
class RowPlan:
    row: str
    base: System
    tried: List[Tuple[Setting, System, int]] = field(default_factory=list)  # (setting, run, stage)
    stage: int = 0
    current: List[Setting] = field(default_factory=list)  # the settings of the stage being searched
    chosen: Optional[Setting] = None
    seeds: List[Tuple[int, System]] = field(default_factory=list)


class Table1Search:
    """The search and the seeds of Table 1's rows, issued as their inputs become known.

    ``requests()`` gives every (system, evaluation) that can run now: the search runs of each
    row's current stage (seed 1, scored on the validation split; a stage of one setting has
    nothing to choose and is not), then, once a row has chosen, its seed-1 run's test split
    and consistency and its other seeds (the same). It reads the finished runs' validation
    scores from ``runs``."""

    def __init__(self, rows: Sequence[Tuple[str, System]], plan: SearchPlan, seeds: int, runs: str,
                 seeded_rows: Optional[Sequence[str]] = None):
        """``seeded_rows``: the rows that train ``seeds`` seeds (the others one); None: all."""
        if seeds < 1:
            raise ValueError("seeds must be at least 1")
        self.plan, self.seeds, self.runs = plan, seeds, runs
        self.plans = {row: RowPlan(row, system) for row, system in rows}
        self.seeded_rows = set(self.plans) if seeded_rows is None else set(seeded_rows)

    def chosen(self) -> Dict[str, Setting]:
        return {row: plan.chosen for row, plan in self.plans.items() if plan.chosen is not None}

    def _system(self, plan: RowPlan, setting: Setting, seed: int = 1) -> System:
        return variant(plan.base, self.plan.rows[plan.row].family, setting, seed)

    def _open(self, plan: RowPlan, settings: List[Setting]) -> None:
        plan.current = settings
        known = {setting for setting, _, _ in plan.tried}
        plan.tried += [(s, self._system(plan, s), plan.stage) for s in settings if s not in known]

    def _advance(self, plan: RowPlan) -> bool:
        """Move a row on where it can: open its search, choose within a stage once every setting
        of the stage is scored, go to the next stage or to the seeds. Whether anything moved."""
        stages = self.plan.rows[plan.row].stages or ((),)
        if not plan.tried:
            start = start_setting(plan.row, self.plan, self.chosen())
            if start is None:
                return False
            self._open(plan, expand(start, stages[0], self.plan.space))
        scores = [(s, validation_bleu(os.path.join(self.runs, self._system(plan, s).key))) for s in plan.current]
        if len(scores) > 1 and any(score is None for _, score in scores):
            return False
        winner = select(scores) if len(scores) > 1 else scores[0][0]
        if plan.stage + 1 < len(stages):
            plan.stage += 1
            self._open(plan, expand(winner, stages[plan.stage], self.plan.space))
            return True
        plan.chosen = winner
        seeds = self.seeds if plan.row in self.seeded_rows else 1
        plan.seeds = [(seed, self._system(plan, winner, seed)) for seed in range(1, seeds + 1)]
        return True

    def requests(self) -> List[Tuple[System, Tuple[str, ...]]]:
        progress = True
        while progress:  # a row's choice can open the search of rows that inherit from it
            progress = False
            for plan in self.plans.values():
                while plan.chosen is None and self._advance(plan):
                    progress = True
        wanted: List[Tuple[System, Tuple[str, ...]]] = []
        for plan in self.plans.values():
            if plan.chosen is None and len(plan.current) > 1:
                wanted += [(self._system(plan, s), ("valid",)) for s in plan.current]
            elif plan.chosen is not None:
                wanted += [(system, ("test", "consistency")) for _, system in plan.seeds]
        return wanted

    def unlocks(self, system: System) -> bool:
        """Whether ``system`` is a setting of a row whose choice others wait for (run it first)."""
        waited_for = {search.inherits for search in self.plan.rows.values() if search.inherits}
        return any(plan.chosen is None and system.key in {s.key for _, s, _ in plan.tried}
                   for row, plan in self.plans.items() if row in waited_for)

    def done(self) -> bool:
        return all(plan.chosen is not None for plan in self.plans.values())

    @property
    def searches(self) -> bool:
        """Whether any row searches (else every row trains a given or its config's setting)."""
        return any(search.stages and search.setting is None for search in self.plan.rows.values())

    def note(self) -> str:
        """What the table says of the search and the seeds."""
        if not self.searches:
            return ("No search: each row trained the setting the search chose at 600 updates (docs/reproduction.md, "
                    f"Table 1), with seeds 1..{self.seeds}; the table gives the mean ± sample standard deviation over "
                    "seeds.")
        rows = "; ".join(f"{row}: {describe_row(row, self.plan)}" for row in self.plan.rows)
        seeded = "each row" if self.seeded_rows >= set(self.plans) else \
            f"{', '.join(sorted(self.seeded_rows))} (the others: seed 1 only)"
        seeds = (f"The chosen setting of {seeded} then trained seeds 1..{self.seeds} (seed 1: its search run); the "
                 "table gives the mean ± sample standard deviation over seeds.") if self.seeds > 1 else \
            "One seed (--seeds 1): no spread over seeds."
        return ("Search (Wu et al. 2022, appendix A.2, at the tiny models' scale: the paper's learning rates "
                "{5e-4, 1e-3} doubled, as the demo configs' 2e-3 stands for its 1e-3; its projections "
                f"{{256+32, 128+64}} per head dimension, 32 here and 64 there; b_f as the paper's): {rows}. Every "
                "setting trained with seed 1; where a stage had several settings, the highest s-BLEU of the decoded "
                f"validation split won. {seeds}")

    def search_rows(self) -> List[dict]:
        """Every setting tried, its validation s-BLEU and whether it won (JSON)."""
        rows = []
        for row, plan in self.plans.items():
            for setting, system, stage in plan.tried:
                rows.append({"row": row, "stage": stage + 1, "setting": setting.as_dict(), "run": system.key,
                             "valid_s_bleu": validation_bleu(os.path.join(self.runs, system.key)),
                             "chosen": setting == plan.chosen})
        return rows


def describe_row(row: str, plan: SearchPlan) -> str:
    """A row's search in words: its stages, and what it takes from another row."""
    search = plan.rows[row]
    if search.setting is not None:
        return f"{search.setting.label}, given"
    stages = ", then ".join(" x ".join(f"{DIMENSION_NAMES[d]} {_values(plan.space, d)}" for d in stage)
                            for stage in search.stages) or "its config's setting"
    if not search.inherits:
        return stages
    inherited = [DIMENSION_NAMES[d] for d in ("lr", "projections") if d not in search.searched]
    return f"{stages}, at {search.inherits}'s chosen {' and '.join(inherited)}"


def describe_search(rows: Sequence[Tuple[str, System]], plan: SearchPlan, seeds: int, budget: int) -> List[str]:
    """What ``--list`` prints of Table 1's search: each row's settings with their runs, then the
    seeds. A later stage's settings, and those of a row that takes another row's choice, are
    named once that choice is made."""
    lines = [f"search: each setting trains {budget} updates with seed 1; a stage of several settings chooses on "
             "validation s-BLEU" + (f"; the chosen setting of each row then trains seeds 2..{seeds}" if seeds > 1 else
                                    " (--seeds 1: no other seed)")]
    runs = 0
    for row, base in rows:
        search = plan.rows[row]
        count = runs_per_row(row, plan)
        lines.append(f"{row}: {describe_row(row, plan)} ({count} run{'s' if count > 1 else ''})")
        if not search.inherits:
            for setting in candidates(row, plan, {}):
                lines.append(f"  {variant(base, search.family, setting, 1).key:44s} {base.config:36s} {setting.label}")
            for number, stage in enumerate(search.stages[1:], start=1):
                earlier = " and ".join(DIMENSION_NAMES[d] for previous in search.stages[:number] for d in previous)
                named = " x ".join(f"{DIMENSION_NAMES[d]} {_values(plan.space, d)}" for d in stage)
                lines.append(f"  {base.key + '-...':44s} {base.config:36s} then {named} at the chosen {earlier}")
        else:
            lines.append(f"  {base.key + '-...':44s} {base.config:36s} once {search.inherits} has chosen")
        runs += count
    lines.append("(a run's name: the config's run name, then each setting that differs from the config's)")
    lines.append(f"seeds: {seeds} per row (seed 1: its chosen search run; seeds 2..{seeds}: its run name + "
                 f"-seed2 ...): {len(rows) * (seeds - 1)} more runs; {runs + len(rows) * (seeds - 1)} runs in all"
                 if seeds > 1 else f"seeds: 1 per row (its chosen search run); {runs} runs in all")
    return lines


def _value(value) -> str:
    return f"{value[0]}+{value[1]}" if isinstance(value, tuple) else str(value)


def _values(space: SearchSpace, dimension: str) -> str:
    return "{" + ", ".join(_value(value) for value in getattr(space, dimension)) + "}"
