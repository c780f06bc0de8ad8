# Wu et al. 2022: RFA, opensub-consistency, L = 4.
CORPUS=opensub-consistency
GATE=none
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
