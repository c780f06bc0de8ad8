# The concatenation transformer on the Bible en-es (configs/bible/common.sh), L = 4.
FAMILY=transformer
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
