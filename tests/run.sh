#!/usr/bin/env bash
# Run every tests/<suite>/t_*.sh (or those named in $TESTS), print one
# tally line: "N passed, N failed". Each test file is one process with its
# own temp dir and ports, and a time limit.
set -u
suite=${1:?usage: tests/run.sh integration|e2e|chaos}
cd "$(dirname "$0")/.." || exit 1
pass=0; failn=0; failed=()
files=${TESTS:-$(ls tests/"$suite"/t_*.sh tests/"$suite"/t_*.py 2>/dev/null)}
for f in $files; do
	echo "== $f"
	case $f in
	*.py) runner=python3 ;;
	*) runner=bash ;;
	esac
	out=$(timeout "${TEST_TIMEOUT:-300}" $runner "$f" 2>&1); rc=$?
	echo "$out" | sed 's/^/  /'
	p=$(echo "$out" | grep -c '^ok - ')
	n=$(echo "$out" | grep -c '^not ok - ')
	pass=$((pass + p)); failn=$((failn + n))
	if [ $rc -ne 0 ] || [ "$n" -gt 0 ]; then
		failed+=("$f")
		[ "$n" -eq 0 ] && failn=$((failn + 1)) && echo "  not ok - $f exited $rc"
	fi
done
echo "$suite: $pass passed, $failn failed"
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
