#!/bin/sh
# Every credential attack of this folder in turn, against this agent's
# parent (ward). Arguments: mem.sh's decoy, then files.sh's folders (each
# attack skips what is not its own).
. "$(dirname "$0")/common.sh"
here=$(dirname "$0")
export HOSTILE_PARENT="$PARENT"
for attack in environ cmdline mem files env; do
  loot "== $attack"
  sh "$here/$attack.sh" true "$LOOT" "$@"
done
finish
