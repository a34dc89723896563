# test/bench/plot.gp: throughput against clients, one panel per key count,
# one line per case.  Called by all.sh:
#
#   gnuplot -e "data='...'; out='...'; term='pngcairo'; ncases=5; \
#               ymax=...; array titles[3]; titles[1]='hot key'; ...; \
#               subtitle='...'" plot.gp
#
# data holds one block per key count, in the order of titles, separated by
# two blank lines; each block starts with a header line of quoted case
# names, then one line per client count: clients, then the ncases cases'
# tps ("-" where a case did not run).  ymax is in calls per second;
# subtitle, optional, goes under the title (date, machine, run length).

if (term eq 'pngcairo') {
	set terminal pngcairo size 1600,600 font 'sans,11' noenhanced
} else {
	set terminal png size 1600,600 noenhanced
}
set output out
set datafile missing '-'

panels = |titles|
# The panels side by side above a strip for the one legend they share.
heading = 'ratelimit: throughput against clients (pgbench, prepared, one call per transaction)'
if (exists('subtitle')) { heading = heading . "\n" . subtitle }
set multiplot title heading
# floor dashed grey, then the contenders in colours that stay apart in print
set linetype 1 lc rgb '#777777' dt 2
set linetype 2 lc rgb '#1f77b4' dt 1
set linetype 3 lc rgb '#2ca02c' dt 1
set linetype 4 lc rgb '#d62728' dt 1
set linetype 5 lc rgb '#9467bd' dt 1
set linetype 6 lc rgb '#ff7f0e' dt 1

set logscale x 2
set xrange [0.8:20]
set xtics (1, 2, 4, 8, 16)
set xlabel 'clients'
set yrange [0:ymax / 1000.0]
set format y '%gk'
set ytics add ('0' 0)
set grid
unset key
width = 1.0 / panels
do for [p = 1:panels] {
	set origin (p - 1) * width, 0.1
	set size width, 0.82
	set title titles[p]
	if (p == 1) { set ylabel 'calls per second' } else { unset ylabel }
	plot for [i = 2:ncases + 1] data index (p - 1) using 1:(column(i) / 1000) \
		with linespoints lt (i - 1) lw 2 pt 7 ps 0.8
}

# The legend: the same lines, no data, no axes.
set origin 0, 0
set size 1, 0.1
unset title
unset xlabel
unset ylabel
unset logscale
unset grid
unset border
unset tics
set xrange [0:1]
set yrange [0:1]
set key center center horizontal samplen 3 width 1
plot for [i = 2:ncases + 1] data index 0 using (NaN):(NaN) \
	with linespoints lt (i - 1) lw 2 pt 7 ps 0.8 title columnheader(i)
unset multiplot
