# Wu et al. 2022: RFA-sgate, opensub-consistency, L = 4.
CORPUS=opensub-consistency
GATE=sgate
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
