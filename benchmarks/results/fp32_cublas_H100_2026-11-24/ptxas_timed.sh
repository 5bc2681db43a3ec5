#!/bin/bash
# ptxas wrapper: logs each call's wall time to $PTXAS_LOG
start=$(date +%s.%N)
"$REAL_PTXAS" "$@"
rc=$?
end=$(date +%s.%N)
echo "$start $end $rc" >> "$PTXAS_LOG"
exit $rc
