#!/bin/sh
# Attack: notes that behave, with something inside the first note: `big N`
# adds N bytes (a note past the limit, a chart that can't be read back);
# `controls` adds an ANSI screen clear, a terminal title, a bell and a
# right-to-left override (the chart shown to a person lies).
. "$(dirname "$0")/common.sh"
"$WARD_BIN" stand-in || exit 1
case $1 in
    big) insert() { head -c "$2" /dev/zero | tr '\0' x | fold -w 100; echo; } ;;
    controls) insert() { printf 'esc\033[2J title\033]0;pwned\007 rlo\342\200\256gnp.exe csi\302\233x\n'; } ;;
esac
{ head -n 1 "$WARD_NOTES"; insert "$@"; tail -n +2 "$WARD_NOTES"; } > "$WARD_NOTES.new"
mv "$WARD_NOTES.new" "$WARD_NOTES"
loot "notes: $(wc -c < "$WARD_NOTES") bytes, first line $(head -n 1 "$WARD_NOTES")"
