# bench-plot.gp - the plot of `make bench` (called by tools/bench.sh):
#   gnuplot -e "spop='A.dat'; http='B.dat'; outfile='docs/bench.svg'; plottitle='...'" tools/bench-plot.gp
# Each data file: one line per run, "label" req_per_s p50_us p99_us.
# Left: the SPOP level (Redis ceiling vs agent path); right: HTTP (HAProxy
# alone vs end to end). Top: throughput; bottom: latency p50 and p99.
set terminal svg size 1100,760 dynamic font "sans,11" background rgb "white"
set output outfile
set multiplot layout 2,2 title plottitle font "sans,13"

set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics lc rgb "#dddddd"
set xtics nomirror font "sans,10"
set bmargin 4
set ytics nomirror
set key top left
set format y "%.0s%c"
set yrange [0:*]

# The deny cache answers an order of magnitude faster than Redis: log scale.
set logscale y
set yrange [1000:*]
set title "(a)/(b) decisions per second (log scale)"
plot spop using 2:xtic(1) notitle lc rgb "#4477aa"

unset logscale y
set yrange [0:*]
set title "(c) HTTP requests per second (wrk)"
plot http using 2:xtic(1) notitle lc rgb "#228833"

set logscale y
set yrange [10:*]
set format y "%g"
set title "(a)/(b) latency, microseconds (log scale)"
plot spop using 3:xtic(1) title "p50" lc rgb "#66ccee", \
     ''   using 4 title "p99" lc rgb "#aa3377"

set yrange [100:*]
set title "(c) HTTP latency, microseconds (log scale)"
plot http using 3:xtic(1) title "p50" lc rgb "#66ccee", \
     ''   using 4 title "p99" lc rgb "#aa3377"

unset multiplot
