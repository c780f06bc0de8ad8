# Wu et al. 2022, Table 1: the transformer baseline on OpenSubtitles en-ru (BLEU models), L = 1.
CORPUS=opensub-bleu
GATE=softmax
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
