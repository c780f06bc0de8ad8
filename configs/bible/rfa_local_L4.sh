# RFA with 2 local cross heads and 2 local causal heads (beyond the paper) on the Bible en-es
# (configs/bible/common.sh), L = 4: the remedy with its causal attention half softmax over the current
# target sentence, which tests where the remedy loses to the transformer on this corpus.
FAMILY=rfa_local
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
