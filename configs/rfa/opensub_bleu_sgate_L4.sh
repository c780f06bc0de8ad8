# Wu et al. 2022: RFA-sgate, opensub-bleu, L = 4.
CORPUS=opensub-bleu
GATE=sgate
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
