#!/bin/sh
# Not an attack: holds the stage open until the test has looked at ward from
# outside (it creates LOOT's `.go` sibling), then behaves.
. "$(dirname "$0")/common.sh"
loot "holding, parent $PARENT"
go="${LOOT%.txt}.go"
i=0
while [ ! -e "$go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
finish
