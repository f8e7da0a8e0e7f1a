#!/bin/sh
# Attack: credentials from /proc/<pid>/environ of every process this user
# can see, its parent (ward) first. Loot: every environment it could read.
. "$(dirname "$0")/common.sh"
loot "agent $$, parent $PARENT"
# A process of its own behind the wall (with the variable agent.pass_env
# gives it, the control): outside processes are in another user namespace.
sleep 60 &
own=$!
for pid in "$PARENT" /proc/[0-9]*; do
  pid=${pid#/proc/}
  if text=$(tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ"); then
    loot "read /proc/$pid/environ" "$text"
  else
    loot "denied /proc/$pid/environ"
  fi
done
kill "$own"
finish
