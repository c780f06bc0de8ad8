# RFA with 2 local cross heads (beyond the paper) on the Bible en-es (configs/bible/common.sh), L = 4.
FAMILY=rfa_cross_local
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
