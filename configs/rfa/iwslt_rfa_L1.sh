# Wu et al. 2022: RFA, iwslt, L = 1.
CORPUS=iwslt
GATE=none
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
