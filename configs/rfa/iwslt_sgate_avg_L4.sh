# Wu et al. 2022: RFA-sgate-avg, iwslt, L = 4.
CORPUS=iwslt
GATE=sgate-avg
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
