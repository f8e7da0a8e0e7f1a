#!/bin/sh
# In treatment, leaves a file over the per-file limit of a visit's commits
# (10 MiB): the visit job commits and bundles it; the record job refuses
# the bundle with a sentence and pushes nothing.
. "$(dirname "$0")/common.sh"
if [ "$WARD_STAGE" = treat ]; then
  head -c 11000000 /dev/zero > huge.bin
  loot "left huge.bin"
fi
finish
