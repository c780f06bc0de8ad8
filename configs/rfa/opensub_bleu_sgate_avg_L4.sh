# Wu et al. 2022: RFA-sgate-avg, opensub-bleu, L = 4.
CORPUS=opensub-bleu
GATE=sgate-avg
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
