"""Where a training run stands, read from its folder (``scripts/train.sh``'s SAVE_DIR): whether it
has anything left to train under the settings it is started with again.

A run is finished when it ended with the same settings (SAVE_DIR/train.done holds them, one a
line), when its checkpoint_last.pt has reached ``--max-update``, or when it stopped on its
patience and only ``--max-update`` has changed since: a run that ran out of patience stops there
under any cap, while one that stopped at its cap trains on from checkpoint_last.pt when the cap is
raised (its patience counter comes back with the checkpoint).

``python -m rfa_doc_mt.training_state SAVE_DIR SETTINGS...`` prints why the run in SAVE_DIR is
finished, or nothing when ``fairseq-train SETTINGS`` has training left to do there (train.sh).
"""

import os
import sys
from typing import List, Optional, Sequence

from .fairseq_command import option_value, without_option

# what fairseq-train logs when it stops on its patience (also with a minimum gain:
# rfa_doc_mt.tasks.doc_translation.should_stop_early), and the first line of every start of it
# (its configuration)
EARLY_STOP = "early stop since valid performance hasn't improved"
STARTED = "| fairseq_cli.train | {"
MAX_UPDATE = "--max-update"


def ended_on_patience(train_log: str) -> bool:
    """Whether the last fairseq-train start logged in ``train_log`` (a run resumed appends to it)
    stopped on its patience."""
    if not os.path.isfile(train_log):
        return False
    last_start = last_stop = -1
    with open(train_log, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle):
            if STARTED in line:
                last_start = number
            elif EARLY_STOP in line:
                last_stop = number
    return last_stop > last_start


def finished_settings(save_dir: str) -> Optional[List[str]]:
    """The settings a run finished with (SAVE_DIR/train.done), or None: not finished."""
    path = os.path.join(save_dir, "train.done")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read().rstrip("\n").split("\n")


def checkpoint_updates(checkpoint: str) -> int:
    """The updates a fairseq checkpoint has trained (its training state only: the weights are not read)."""
    import torch

    # mmap: the training state is read, not the weights; a fairseq checkpoint pickles its config
    state = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    return state["optimizer_history"][-1]["num_updates"]


def why_finished(save_dir: str, settings: Sequence[str]) -> str:
    """Why the run in ``save_dir`` has nothing left to train under ``settings`` (the fairseq-train
    arguments it would be started with), or "" where it has."""
    done = finished_settings(save_dir)
    if done is not None:
        if done == list(settings):
            return f"it finished with these settings ({save_dir}/train.done)"
        if without_option(done, MAX_UPDATE) == without_option(settings, MAX_UPDATE) and \
                ended_on_patience(os.path.join(save_dir, "train.log")):
            return (f"it stopped on its patience ({save_dir}/train.log), which a higher {MAX_UPDATE} does "
                    "not change")
    last = os.path.join(save_dir, "checkpoint_last.pt")
    max_update = int(option_value(settings, MAX_UPDATE, "0"))
    if os.path.isfile(last) and max_update > 0:
        updates = checkpoint_updates(last)
        if max_update <= updates:
            return f"checkpoint_last.pt has {updates} updates, {MAX_UPDATE} is {max_update}"
    return ""


def trains_further(save_dir: str, train_args: Sequence[str]) -> bool:
    """Whether a finished run (train.done) trains on when started again with ``train_args`` among
    its settings: they raise its ``--max-update``, it stopped at its cap rather than on its
    patience, and its checkpoint_last.pt is there to resume from (a run restored without its
    checkpoints stays as it finished)."""
    done = finished_settings(save_dir)
    wanted = option_value(train_args, MAX_UPDATE)
    if done is None or wanted is None:
        return False
    had = option_value(done, MAX_UPDATE)
    return (had is not None and int(wanted) > int(had) and os.path.isfile(os.path.join(save_dir, "checkpoint_last.pt"))
            and not ended_on_patience(os.path.join(save_dir, "train.log")))


def main(argv: Sequence[str]) -> int:
    if len(argv) < 1:
        print("usage: python -m rfa_doc_mt.training_state SAVE_DIR [fairseq-train settings...]", file=sys.stderr)
        return 2
    reason = why_finished(argv[0], argv[1:])
    if reason:
        print(reason)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
