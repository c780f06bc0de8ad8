# RFA-sgate (Wu et al. 2022) on the Bible en-es (configs/bible/common.sh), L = 4.
FAMILY=rfa_sgate
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
