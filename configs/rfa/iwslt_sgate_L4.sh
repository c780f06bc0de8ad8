# Wu et al. 2022: RFA-sgate, iwslt, L = 4.
CORPUS=iwslt
GATE=sgate
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
