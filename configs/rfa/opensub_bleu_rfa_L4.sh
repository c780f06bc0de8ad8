# Wu et al. 2022: RFA, opensub-bleu, L = 4.
CORPUS=opensub-bleu
GATE=none
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
