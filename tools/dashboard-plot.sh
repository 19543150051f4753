#!/usr/bin/env bash
# Render the main graphs of the Grafana dashboard (etc/grafana/ratelimit-spoa.json)
# from a Prometheus that scraped an agent, with gnuplot: no Grafana needed.
#
#   tools/dashboard-plot.sh PROMETHEUS_URL START END OUT.svg|OUT.png
#
# START/END are Unix times. Each graph is the dashboard panel of the same
# title, its queries run through /api/v1/query_range with the template
# variables expanded ($instance, $policy: all; $__rate_interval: $RATE_INTERVAL,
# default 1m: use a few scrape intervals for a short run, e.g. 10s).
# Series that stay 0 all along are left out of the legend. docs/dashboard.svg
# is made by the dashboard test, which starts the whole stack:
#   DASHBOARD_PLOT=docs/dashboard.svg python3 tests/integration/t_ops_dashboard.py
set -euo pipefail
[ $# -eq 4 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
url=$1 start=$2 end=$3 out=$4
root=$(cd "$(dirname "$0")/.." && pwd)
dash=$root/etc/grafana/ratelimit-spoa.json
for t in curl jq gnuplot; do
	command -v "$t" >/dev/null || { echo "dashboard-plot: $t is needed" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step=$(( (end - start) / 300 > 1 ? (end - start) / 300 : 1 ))

# title|unit scale|y label
panels=(
	"Decisions per second by policy and status|1|decisions/s"
	"Deny ratio by policy|100|% denied"
	"Errors by reason|1|decisions/s with a reason"
	"Decision latency (NOTIFY read to ACK written)|1000|ms"
	"Redis call latency|1000|ms"
	"Redis link state|1|workers / reconnects per s"
)

# One data file per panel (a gnuplot "index" per series) and its legends.
n=0
for p in "${panels[@]}"; do
	IFS='|' read -r title scale ylabel <<<"$p"
	data=$tmp/p$n.dat; : >"$data"; : >"$tmp/p$n.titles"
	while IFS=$'\t' read -r expr legend; do
		expr=${expr//'$__rate_interval'/${RATE_INTERVAL:-1m}}
		expr=${expr//'$instance'/.*}
		expr=${expr//'$policy'/.*}
		curl -fsS -G "$url/api/v1/query_range" --data-urlencode "query=$expr" \
			--data-urlencode "start=$start" --data-urlencode "end=$end" \
			--data-urlencode "step=$step" >"$tmp/resp.json"
		jq -r --arg fmt "$legend" --argjson t0 "$start" --argjson k "$scale" '
			.data.result[]
			| select([.values[][1] | tonumber | select(. == . and . != 0)] | length > 0)
			| (reduce (.metric | to_entries[]) as $e ($fmt;
				gsub("\\{\\{ *" + $e.key + " *\\}\\}"; $e.value))) as $name
			| "# " + $name,
			  (.values[] | select(.[1] != "NaN")
			   | "\(.[0] - $t0) \((.[1] | tonumber) * $k)"),
			  "", ""' "$tmp/resp.json" >>"$data"
	done < <(jq -r --arg t "$title" '.panels[] | select(.title == $t) | .targets[]
		| [.expr, (.legendFormat // .refId)] | @tsv' "$dash")
	grep '^# ' "$data" | sed 's/^# //' >"$tmp/p$n.titles" || true
	[ -s "$tmp/p$n.titles" ] || echo "dashboard-plot: no data for '$title'" >&2
	n=$((n + 1))
done

{
	case $out in
	*.png) echo "set terminal pngcairo size 1200,1050 font 'Helvetica,10' background '#ffffff'" ;;
	*) echo "set terminal svg size 1200,1050 dynamic font 'Helvetica,11' background '#ffffff'" ;;
	esac
	echo "set output '$out'"
	echo "set multiplot layout 3,2 title 'ratelimit-spoa: the dashboard main graphs, from Prometheus'"
	echo "set grid; set key top left opaque font ',9' maxrows 7; set xlabel 'seconds'"
	n=0
	for p in "${panels[@]}"; do
		IFS='|' read -r title scale ylabel <<<"$p"
		echo "set title \"$title\"; set ylabel \"$ylabel\""
		case $ylabel in ms) echo "set logscale y" ;; *) echo "unset logscale y" ;; esac
		cmd=""; i=0
		while IFS= read -r name; do
			cmd+="${cmd:+, }'$tmp/p$n.dat' index $i using 1:2 with lines lw 1.5 title \"${name//\"/}\""
			i=$((i + 1))
		done <"$tmp/p$n.titles"
		if [ -n "$cmd" ]; then echo "plot $cmd"; else echo "plot 0 title 'no data'"; fi
		n=$((n + 1))
	done
	echo "unset multiplot"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "dashboard-plot: wrote $out"
