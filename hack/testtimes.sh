#!/bin/sh
# testtimes.sh: reads `go test -v` output on stdin and lists each top-level
# test's result and time, longest first, then their sum: what each part of
# an integration run cost (make test-integration prints it at the end). A
# test whose subtests run in parallel reports 0 s for itself: it is given
# its longest subtest's time instead.
set -eu
awk '
function secs(s) { gsub(/[()s]/, "", s); return s + 0 }
/^--- (PASS|FAIL|SKIP): Test[^ ]* \([0-9.]+s\)$/ {
	name = $3; result[name] = $2; own[name] = secs($4); order[++n] = name
}
/^    --- (PASS|FAIL|SKIP): Test[^ ]* \([0-9.]+s\)$/ {
	parent = $3; sub(/\/.*/, "", parent)
	t = secs($4); if (t > sub_max[parent]) sub_max[parent] = t
}
END {
	for (i = 1; i <= n; i++) {
		name = order[i]; t = own[name]
		if (sub_max[name] > t) t = sub_max[name]
		printf "%9.1f s  %-4s %s\n", t, result[name], name
		sum += t
	}
	printf "%9.1f s  in all\n", sum
}
' | sort -rn
