#!/bin/sh
# testtimes.sh: reads `go test -v` output on stdin and lists each top-level
# test's result and time, longest first, then their sum: what each part of
# an integration run cost (make test-integration prints it at the end).
set -eu
awk '
/^--- (PASS|FAIL|SKIP): Test[^ ]* \([0-9.]+s\)$/ {
	t = $4; gsub(/[()s]/, "", t)
	printf "%9.1f s  %-4s %s\n", t, $2, $3
	sum += t
}
END { printf "%9.1f s  in all\n", sum }
' | sort -rn | sed -n '1,200p'
