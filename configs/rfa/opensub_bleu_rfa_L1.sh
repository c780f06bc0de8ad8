# Wu et al. 2022: RFA, opensub-bleu, L = 1.
CORPUS=opensub-bleu
GATE=none
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
