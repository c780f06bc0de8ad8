# Wu et al. 2022: RFA, iwslt, L = 4.
CORPUS=iwslt
GATE=none
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
