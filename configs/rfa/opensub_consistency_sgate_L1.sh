# Wu et al. 2022: RFA-sgate, opensub-consistency, L = 1.
# At L = 1 a window has no separator, so the gate never fires: this equals RFA (L = 1).
CORPUS=opensub-consistency
GATE=sgate
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
