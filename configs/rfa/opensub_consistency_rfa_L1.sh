# Wu et al. 2022: RFA, opensub-consistency, L = 1.
CORPUS=opensub-consistency
GATE=none
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
