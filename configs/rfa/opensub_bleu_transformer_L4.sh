# Wu et al. 2022, Table 1: the transformer baseline on OpenSubtitles en-ru (BLEU models), L = 4.
CORPUS=opensub-bleu
GATE=softmax
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
