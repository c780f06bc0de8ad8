# Wu et al. 2022, Figure 3: the transformer on OpenSubtitles en-ru (consistency models), L = 4.
CORPUS=opensub-consistency
GATE=softmax
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
