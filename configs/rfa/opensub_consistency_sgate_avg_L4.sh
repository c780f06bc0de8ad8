# Wu et al. 2022: RFA-sgate-avg, opensub-consistency, L = 4.
CORPUS=opensub-consistency
GATE=sgate-avg
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
