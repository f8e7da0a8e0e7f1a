#!/bin/sh
# Attack: credentials in its own environment (ward.yml's agent.pass_env may
# name them). Loot: its whole environment.
. "$(dirname "$0")/common.sh"
loot "agent $$, parent $PARENT" "$(env)"
finish
