#!/usr/bin/env bash
# Runs the ward command the action's `command` input names, with the extra
# arguments of `args`. action.yml passes the inputs as environment variables
# (never into the script's text):
#   WARD_BIN           the installed ward
#   WARD_COMMAND       the `command` input
#   WARD_ARGS          the `args` input: arguments separated by spaces or
#                      newlines, never evaluated (no quotes, no globs, no $)
#   WARD_AGENT_PRESET  the `agent-preset` input (unset when empty)
#   WARD_ARTIFACTS     where runs keep their artifacts (also the `artifacts` output)
set -euo pipefail

# One line per command: the input's value and ward's arguments for it.
args_for() {
  case "$1" in
    install) args=() ;;
    stage) args=(--forge github stage --event "${GITHUB_EVENT_PATH:?}") ;;
    visit) args=(--forge github visit --event "${GITHUB_EVENT_PATH:?}") ;;
    record) args=(--forge github record --event "${GITHUB_EVENT_PATH:?}") ;;
    slot) args=(--forge github slot --event "${GITHUB_EVENT_PATH:?}") ;;
    release) args=(--forge github slot) ;;
    queue-check) args=(--forge github queue check) ;;
    queue-record) args=(--forge github queue record) ;;
    event) args=(event --event "${GITHUB_EVENT_PATH:?}") ;;
    sweep) args=(--forge github sweep) ;;
    report) args=(--forge github report) ;;
    precedents-check) args=(precedents check) ;;
    simulate) args=(simulate) ;;
    doctor) args=(--forge github doctor) ;;
    *) return 1 ;;
  esac
}

if ! args_for "${WARD_COMMAND:-}"; then
  # The known commands are the case labels above, read from this file so
  # that adding a command stays one line.
  known="$(sed -n 's/^    \([a-z-]*\)) args=.*/\1/p' "${BASH_SOURCE[0]}" | paste -sd, - | sed 's/,/, /g')"
  message="input command must be one of $known; not '${WARD_COMMAND:-}'"
  message="${message//%/%25}"
  message="${message//$'\r'/%0D}"
  printf '::error title=ward::%s\n' "${message//$'\n'/%0A}"
  exit 2
fi

# `install`: ward on PATH for the job's later steps (`run: ward ...`), as
# `ward init` writes the workflows; nothing runs here.
if [ "$WARD_COMMAND" = install ]; then
  bin_dir="$(dirname "${WARD_BIN:?the install step names the ward binary}")"
  printf '%s\n' "$bin_dir" >>"${GITHUB_PATH:?GITHUB_PATH is set by the runner}"
  printf '%s is on PATH for the next steps (%s)\n' "$("$WARD_BIN" --version)" "$bin_dir"
  exit 0
fi

extra=()
if [ -n "${WARD_ARGS:-}" ]; then
  # Splits on spaces, tabs and newlines only: `read` neither globs nor expands.
  read -r -d '' -a extra <<<"$WARD_ARGS" || true
fi

if [ -z "${WARD_AGENT_PRESET:-}" ]; then unset WARD_AGENT_PRESET; fi
if [ -n "${WARD_ARTIFACTS:-}" ]; then
  mkdir -p "$WARD_ARTIFACTS"
  printf 'artifacts=%s\n' "$WARD_ARTIFACTS" >>"${GITHUB_OUTPUT:-/dev/null}"
fi

exec "${WARD_BIN:?the install step names the ward binary}" "${args[@]}" "${extra[@]}"
