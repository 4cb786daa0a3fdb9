#!/usr/bin/env bash
# The whole fault-injection suite against the local stack (long: kept out of scripts/test.sh).
# Prints the table of `strata faults`; arguments pass through (--only NAME, --quick).
source "$(dirname "$0")/bootstrap.sh"
eval "$(strata dev up)"
strata faults "$@"
