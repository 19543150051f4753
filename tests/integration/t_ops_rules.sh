#!/usr/bin/env bash
# The alerting rules file: promtool accepts it (check rules) and its unit
# tests pass (test rules); every alert has a test; docs/operations.md keeps
# no copy of the rules, and its alert table names exactly the file's alerts.
# Needs promtool (Debian package prometheus, in `make deps`): without it
# this test fails, it never skips.
. "$(dirname "$0")/../lib.sh"
t_setup
RULES=$ROOT/etc/prometheus/ratelimit-spoa.rules.yml
TESTS_FILE=$ROOT/tests/rules/ratelimit-spoa.rules.test.yml
DOC=$ROOT/docs/operations.md

if ! command -v promtool >/dev/null; then
	fail "promtool is installed (apt-get install prometheus, or make deps)"
	t_done
	exit 1
fi
ok "promtool is installed ($(promtool --version 2>&1 | head -1 | awk '{print $3}'))"

out=$(promtool check rules "$RULES" 2>&1); rc=$?
nrules=$(echo "$out" | sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p')
check "promtool check rules: valid (${nrules:-0} rules)" test "$rc" -eq 0 -a "${nrules:-0}" -gt 0
[ "$rc" -eq 0 ] || echo "$out" | sed 's/^/# /'

out=$(cd "$(dirname "$TESTS_FILE")" && promtool test rules "$(basename "$TESTS_FILE")" 2>&1); rc=$?
check "promtool test rules: every unit test passes" test "$rc" -eq 0
[ "$rc" -eq 0 ] || echo "$out" | sed 's/^/# /'

alerts=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$RULES" | sort)
check "the file has alerts" test -n "$alerts"
check "alert names are unique" test "$(echo "$alerts" | uniq -d)" = ""
untested=$(for a in $alerts; do grep -q "alertname: $a\$" "$TESTS_FILE" || echo "$a"; done)
check "every alert has a unit test" test -z "$untested"
[ -z "$untested" ] || echo "# untested: $untested"
firing=$(for a in $alerts; do
	awk -v a="$a" '$0 ~ "alertname: "a"$" { s = 1; next } s && /exp_alerts: *\[\]/ { s = 0; next }
	               s && /exp_labels/ { found = 1; exit } s && /alertname:/ { s = 0 }
	               END { exit !found }' "$TESTS_FILE" || echo "$a"; done)
check "every alert has a test where it fires" test -z "$firing"
[ -z "$firing" ] || echo "# never seen firing: $firing"

# The doc includes the file by reference: no rule text in it, and its table
# lists the same alerts.
check "operations.md points at the rules file" grep -q "etc/prometheus/ratelimit-spoa.rules.yml" "$DOC"
copied=$(grep -nE '^\s*(- alert:|expr:|groups:|for: [0-9]+[smh]$)' "$DOC")
check "operations.md holds no copy of the rules" test -z "$copied"
[ -z "$copied" ] || echo "$copied" | sed 's/^/# /'
documented=$(sed -n 's/^| `\(Ratelimit[A-Za-z0-9]*\)` |.*/\1/p' "$DOC" | sort)
check "operations.md documents exactly the file's alerts" test "$documented" = "$alerts"
[ "$documented" = "$alerts" ] || diff <(echo "$documented") <(echo "$alerts") | sed 's/^/# /'
# Same severities in the table and the file.
sev_doc=$(sed -n 's/^| `\(Ratelimit[A-Za-z0-9]*\)` | \([a-z]*\) |.*/\1 \2/p' "$DOC" | sort)
sev_file=$(awk '/- alert:/ { a = $3 } /severity:/ { s = $0; sub(/.*severity: */, "", s); sub(/[} ].*/, "", s); print a, s }' "$RULES" | sort)
check "operations.md gives each alert the file's severity" test "$sev_doc" = "$sev_file"
[ "$sev_doc" = "$sev_file" ] || diff <(echo "$sev_doc") <(echo "$sev_file") | sed 's/^/# /'
t_done
