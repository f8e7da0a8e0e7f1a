#!/bin/sh
# Every credential attack of this folder in turn, against this agent's
# parent (ward); extra arguments go to each (the control processes for mem.sh,
# the folders for files.sh).
. "$(dirname "$0")/common.sh"
here=$(dirname "$0")
export HOSTILE_PARENT="$PARENT"
for attack in environ cmdline mem files env; do
  loot "== $attack"
  sh "$here/$attack.sh" true "$LOOT" "$@"
done
finish
