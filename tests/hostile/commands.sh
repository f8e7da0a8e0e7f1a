#!/bin/sh
# Attack: GitHub workflow commands on stderr, which ward quotes when a run
# fails: mask ward's words, stop the runner reading commands (so ward's own
# `::error` goes unseen), forge annotations, and the older `##[...]` form,
# with a carriage return that the runner reads as a line break.
. "$(dirname "$0")/common.sh"
loot "commands printed by $$"
printf '%s\n' 'preparing' '::add-mask::ward' '::stop-commands::hostile-token' \
    '::warning title=ward::all checks passed' '::set-output name=stage::discharge' >&2
printf '  ::error::forged error\r::notice::forged notice\n##[error]old form\n' >&2
exit 1
