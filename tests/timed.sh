#!/usr/bin/env bash
# Runs one phase of `make test` and, when MEMSYNC_PHASE_LOG names a file, appends a line to it:
# NAME<TAB>seconds<TAB>exit code. .ci/run prints those lines as a table at its end.
#
#   tests/timed.sh NAME COMMAND...
#   tests/timed.sh --table FILE      print FILE as the table of phases
set -uo pipefail
if [[ "${1:-}" == "--table" ]]; then
  [[ -s "${2:-}" ]] || exit 0
  awk -F'\t' 'BEGIN {printf "\n%-22s %9s  %s\n", "phase", "time", "exit"}
    {t += $2; printf "%-22s %6d:%02d  %s\n", $1, $2 / 60, $2 % 60, $3}
    END {printf "%-22s %6d:%02d\n", "total", t / 60, t % 60}' "$2"
  exit 0
fi
name="${1:?usage: timed.sh NAME COMMAND...}"; shift
start=$SECONDS
"$@"
status=$?
if [[ -n "${MEMSYNC_PHASE_LOG:-}" ]]; then
  printf '%s\t%d\t%d\n' "$name" "$((SECONDS - start))" "$status" >> "$MEMSYNC_PHASE_LOG"
fi
exit "$status"
