#!/usr/bin/env bash
# Wu et al. 2022's Table 1 question on real text: the Bible en-es (scripts/prepare_bible.sh, with its
# contrastive pronoun set). The transformer and RFA at L = 1 and 4, RFA-sgate, RFA with 2 local cross
# heads and RFA with 2 local cross and 2 local causal heads at L = 4 (configs/bible), every run
# trained until its validation s-BLEU stops improving (--converge: validated every 500 updates,
# patience 5, a gain above 0.2, at most 16000), three seeds of every system at L = 4, in the order:
# the transformer and the remedy at L = 4, RFA at L = 4, L = 1, RFA-sgate, the local causal heads.
# Each system is compared with the transformer of its L seed by seed, L = 4 with L = 1, the remedy
# with RFA, the local causal heads with the remedy (docs/reproduction.md, "Real text").
# usage: scripts/reproduce_bible.sh --data DIR [--out DIR] [--jobs N] [--keep DIR] [--rows ...]
#        [--row-seeds ROW=N,...] [--status] (--help for more)
# Prints its table and writes OUT/bible.md, .json, .png and the learning curves; re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce bible --corpus bible --converge "$@"
