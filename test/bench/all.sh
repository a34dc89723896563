#!/bin/bash
#
# test/bench/all.sh: every ratelimit benchmark in one command, a report and
# a plot.
#
#   bash test/bench/all.sh        (as root)
#
# Five phases, each on its own throwaway servers, which it stops:
#   1. sweep: run.sh over clients 1 2 4 8 16 x one hot key, 10,000 and
#      1,000,000 keys x the floor, rl_allow token_bucket and
#      sliding_window_log (local), the table-backed peer, and rl_allow
#      token_bucket through Redis; one round of short runs;
#   2. targets: run.sh at 4 clients on 10,000 keys and one hot key, 3
#      rounds, for issue 2's target ratios (median of per-round ratios);
#   3. redis: redis.sh, for issue 3's targets (rl_allow through Redis,
#      back to back, against redis-benchmark running the same script, and
#      one call per statement for reference; latency with Redis down and
#      the breaker open);
#   4. cost: cost.sh, for issue 9's targets (the cost of one decision:
#      instructions per call under callgrind, cache lines per call by
#      callgrind's cache simulation, wall time of a million calls
#      or rows in one statement against the floors, memory per
#      transaction, latency of one call per statement);
#   5. durable: durable.sh, for issue 10's targets (a durable decision
#      against a non-durable one under pgbench, WAL per decision, a
#      1M-row INSERT through a durable quota trigger, a restart with 1M
#      durable keys).
# Then writes test/bench/report.md (targets met or not, tps tables, every
# run), test/bench/throughput.png (throughput against clients, one panel per
# key count, one line per case), test/bench/redis.md (redis.sh's report),
# appends the cost phase's figures to test/bench/cost_history.tsv (the
# before and after of each change, labelled with RL_BENCH_LABEL), and
# replaces the "Benchmark" section of README.md with the latest figures.
# About 20 minutes on 2 CPUs.
#
# Every phase runs against one private copy of PG_CONFIG's installation
# with this tree's extension and the floor module built into it (lib.sh's
# bench_install, as the test command does): the system's files are never
# changed.  When only some phases run (RL_BENCH_PHASES), the report and the
# README keep the other phases' sections and target rows from the previous
# report; each section says when and on what source it was measured.
#
# Needs: root; what the test command installs (PostgreSQL 15 with pgbench
# and the server headers, redis-server and redis-tools), valgrind, gnuplot
# (installed with apt-get when missing).
#
# Settings (environment):
#   RL_BENCH_SWEEP_SECONDS   seconds per sweep run                     (5)
#   RL_BENCH_SWEEP_CLIENTS   client counts of the sweep       (1 2 4 8 16)
#   RL_BENCH_SWEEP_KEYS      key counts of the sweep   (1 10000 1000000)
#   RL_BENCH_SWEEP_CASES     cases of the sweep
#                   (floor token_bucket sliding_window_log table
#                    redis_token_bucket)
#   RL_BENCH_TARGET_SECONDS  seconds per target run                   (10)
#   RL_BENCH_TARGET_ROUNDS   rounds of the target runs                 (3)
#   RL_BENCH_REDIS_SECONDS   seconds per redis.sh run                 (10)
#   RL_BENCH_COST_ROUNDS     rounds of cost.sh's wall-clock runs       (5)
#   RL_BENCH_COST_SECONDS    seconds of cost.sh's latency runs        (10)
#   RL_BENCH_COST_*          cost.sh's other settings (see cost.sh)
#   RL_BENCH_DURABLE_SECONDS seconds of durable.sh's pgbench runs     (10)
#   RL_BENCH_DURABLE_ROUNDS  rounds of durable.sh's runs               (3)
#   RL_BENCH_DURABLE_*       durable.sh's other settings (see durable.sh)
#   RL_BENCH_LABEL           what the cost phase's line in
#                            cost_history.tsv is called, e.g. "0.2.0
#                            baseline" or the change measured      (none)
#   RL_BENCH_PHASES          phases to run
#                            (sweep targets redis cost durable)
#   RL_BENCH_OUTDIR   where report.md, throughput.png, redis.md go
#                                                          (test/bench)
#   RL_BENCH_README   README to update, empty: none  (README.md at the root)
#   PG_CONFIG     pg_config of the installation to copy
#                                           (Debian's PostgreSQL 15)
#   RL_BENCH_THREADS: passed to run.sh.
# A failed phase is reported as such in the report; the README is then
# left alone and the exit status is 1.

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

sweep_seconds=${RL_BENCH_SWEEP_SECONDS:-5}
sweep_clients=${RL_BENCH_SWEEP_CLIENTS:-1 2 4 8 16}
sweep_keys=${RL_BENCH_SWEEP_KEYS:-1 10000 1000000}
sweep_cases=${RL_BENCH_SWEEP_CASES:-floor token_bucket sliding_window_log table redis_token_bucket}
target_seconds=${RL_BENCH_TARGET_SECONDS:-10}
target_rounds=${RL_BENCH_TARGET_ROUNDS:-3}
redis_seconds=${RL_BENCH_REDIS_SECONDS:-10}
cost_rounds=${RL_BENCH_COST_ROUNDS:-5}
cost_seconds=${RL_BENCH_COST_SECONDS:-10}
durable_seconds=${RL_BENCH_DURABLE_SECONDS:-10}
durable_rounds=${RL_BENCH_DURABLE_ROUNDS:-3}
label=${RL_BENCH_LABEL:-}
phases=${RL_BENCH_PHASES:-sweep targets redis cost durable}
outdir=${RL_BENCH_OUTDIR:-$here}
readme=${RL_BENCH_README-$root/README.md}
history=$outdir/cost_history.tsv

# The key count the target ratios are measured on, besides the hot key,
# and their concurrency (issue 2).
target_keys="10000 1"
target_clients=4
target_cases="floor token_bucket sliding_window_log table"
# sliding_window_log's logs are filled before each run up to this many
# keys: filling 1,000,000 logs of 100 entries (100 million calls) before
# each run would take minutes, so with more keys they start nearly empty.
prefill_max=10000
# ratelimit.max_keys: token_bucket's and sliding_window_log's states on up
# to 1,000,000 keys each (124 bytes a key), with room to spare.
max_keys=3000000
# redis.sh's concurrency and key count.
redis_clients=8
redis_keys=10000

die() { echo "all.sh: $*" >&2; exit 1; }
has_phase() { [[ " $phases " == *" $1 "* ]]; }

for p in $phases; do
	case $p in
	sweep | targets | redis | cost | durable) ;;
	*) die "unknown phase \"$p\" (phases: sweep targets redis cost durable)" ;;
	esac
done

# Prerequisites, checked before minutes of work (the test command's
# packages are installed with the private installation, below).
rl_require_root
term=
if has_phase sweep; then
	if ! command -v gnuplot >/dev/null; then
		if command -v apt-get >/dev/null; then
			# with its recommended fonts, for the PNG's text
			echo "== installing gnuplot-nox"
			if ! { apt-get update -qq &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null; }; then
				die "apt-get install gnuplot-nox failed"
			fi
		else
			die "no gnuplot: install gnuplot-nox"
		fi
	fi
	if gnuplot -e 'set terminal' 2>&1 | grep -q '^ *pngcairo '; then
		term=pngcairo
	elif gnuplot -e 'set terminal' 2>&1 | grep -q '^ *png '; then
		term=png
	else
		die "gnuplot has neither the pngcairo nor the png terminal"
	fi
fi
mkdir -p "$outdir"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rl_bench_all.XXXXXX")
child=
viewer=
# the previous report, whose sections the phases not run keep
if [ -f "$outdir/report.md" ]; then
	cp "$outdir/report.md" "$tmp/old_report.md"
fi

# On any exit: stop the running phase (it stops its own servers and
# removes its own directory) and remove ours.
cleanup() {
	status=$?
	trap - EXIT INT TERM
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	if [ -n "$viewer" ]; then
		kill "$viewer" 2>/dev/null || true
	fi
	rm -rf "$tmp"
	bench_uninstall
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# One private installation for every phase.
if has_phase cost; then
	bench_install valgrind
else
	bench_install
fi
[ -x "$bindir/pgbench" ] || die "no pgbench in $bindir"
for cmd in redis-server redis-cli redis-benchmark; do
	command -v "$cmd" >/dev/null ||
		die "no $cmd: install redis-server and redis-tools"
done
export RL_BENCH_PG PG_CONFIG

# Run a phase: its output to $tmp/NAME.log, shown as it grows, its exit
# status in $tmp/NAME.status.  Run in the background and waited for, so
# that a signal to this script stops it at once.
run_phase() {
	local name=$1 status=0
	shift
	echo
	echo "==== $name: $*"
	: >"$tmp/$name.log"
	"$@" >>"$tmp/$name.log" 2>&1 &
	child=$!
	tail -n +1 -f --pid="$child" "$tmp/$name.log" &
	viewer=$!
	wait "$child" || status=$?
	child=
	wait "$viewer" || true	# it prints the rest and ends with the phase
	viewer=
	echo "$status" >"$tmp/$name.status"
	if [ "$status" != 0 ]; then
		echo "all.sh: phase $name failed (exit $status)" >&2
	fi
}
phase_ok() { [ "$(cat "$tmp/$1.status" 2>/dev/null)" = 0 ]; }

started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -c safe.directory="$root" -C "$root" describe --always --dirty 2>/dev/null ||
	echo "no commit")
t0=$SECONDS
busy_share=$(bench_busy_share)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

if has_phase sweep; then
	run_phase sweep env \
		RL_BENCH_CLIENTS="$sweep_clients" RL_BENCH_KEYS="$sweep_keys" \
		RL_BENCH_SECONDS="$sweep_seconds" RL_BENCH_ROUNDS=1 \
		RL_BENCH_CASES="$sweep_cases" RL_BENCH_PREFILL_MAX="$prefill_max" \
		RL_BENCH_WARM=1 RL_BENCH_MAX_KEYS="$max_keys" RL_BENCH_POOL_KB= \
		RL_BENCH_CONF="shared_buffers = 512MB" \
		RL_BENCH_REPORT="$tmp/sweep.md" RL_BENCH_DATA="$tmp/sweep" \
		bash "$here/run.sh"
fi
if has_phase targets; then
	run_phase targets env \
		RL_BENCH_CLIENTS="$target_clients" RL_BENCH_KEYS="$target_keys" \
		RL_BENCH_SECONDS="$target_seconds" RL_BENCH_ROUNDS="$target_rounds" \
		RL_BENCH_CASES="$target_cases" RL_BENCH_PREFILL_MAX= \
		RL_BENCH_WARM=1 RL_BENCH_MAX_KEYS= RL_BENCH_POOL_KB= \
		RL_BENCH_CONF= \
		RL_BENCH_REPORT="$tmp/targets.md" RL_BENCH_DATA="$tmp/targets" \
		bash "$here/run.sh"
fi
if has_phase redis; then
	run_phase redis env \
		RL_BENCH_CLIENTS="$redis_clients" RL_BENCH_KEYS="$redis_keys" \
		RL_BENCH_SECONDS="$redis_seconds" RL_BENCH_DOWN_CLIENTS=2 \
		RL_BENCH_REPORT="$tmp/redis.md" \
		bash "$here/redis.sh"
fi
if has_phase cost; then
	run_phase cost env \
		RL_BENCH_ROUNDS="$cost_rounds" RL_BENCH_SECONDS="$cost_seconds" \
		RL_BENCH_REPORT="$tmp/cost.md" RL_BENCH_DATA="$tmp/cost" \
		bash "$here/cost.sh"
fi
if has_phase durable; then
	run_phase durable env \
		RL_BENCH_SECONDS="$durable_seconds" RL_BENCH_ROUNDS="$durable_rounds" \
		RL_BENCH_REPORT="$tmp/durable.md" RL_BENCH_TARGETS="$tmp/durable.targets" \
		bash "$here/durable.sh"
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
minutes=$(((SECONDS - t0 + 30) / 60))
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
machine="$(nproc) CPUs (${cpu:-unknown}), $mem, Linux $(uname -r)"
busy=$(bench_is_busy "$busy_share")

# ---- the figures ----

# What a case is called in the tables and the plot.
case_label() {
	case $1 in
	floor) echo "floor (no-op C function)" ;;
	token_bucket) echo "rl_allow token_bucket" ;;
	fixed_window) echo "rl_allow fixed_window" ;;
	sliding_window_log) echo "rl_allow sliding_window_log, limit 100" ;;
	table) echo "table (plpgsql, UNLOGGED)" ;;
	redis_token_bucket) echo "rl_allow token_bucket, Redis" ;;
	*) echo "$1" ;;
	esac
}

# Issue 2's targets: "label|measured|target|verdict" lines from the target
# runs' ratios ("clients keys name value target verdict").
targets_rows() {
	local c n name value target verdict what
	phase_ok targets || return 0
	while read -r c n name value target verdict; do
		case $name in
		token_bucket/floor) what="rl_allow / floor" ;;
		token_bucket/table) what="rl_allow / table" ;;
		sliding_window_log/floor) what="sliding_window_log (limit 100) / floor" ;;
		*) what=$name ;;
		esac
		echo "2|$what, $(keys_label "$n"), $c clients|$value|>= $target|${verdict/_/ }"
	done <"$tmp/targets/ratios"
}

# Issue 3's targets, from redis.sh's last lines:
# "ratio rl_allow / redis-benchmark: R (target >= 0.8); breaker-open p99: P us"
# and "ratio one call per statement / redis-benchmark: S".
redis_ratio=
redis_stmt=
redis_p99=
if phase_ok redis; then
	redis_ratio=$(sed -n 's/.*ratio rl_allow \/ redis-benchmark: \([0-9.]*\).*/\1/p' \
		"$tmp/redis.log" | tail -n 1)
	redis_stmt=$(sed -n 's/.*ratio one call per statement \/ redis-benchmark: \([0-9.]*\).*/\1/p' \
		"$tmp/redis.log" | tail -n 1)
	redis_p99=$(sed -n 's/.*breaker-open p99: \([0-9.]*\) us.*/\1/p' \
		"$tmp/redis.log" | tail -n 1)
fi
redis_rows() {
	local v
	phase_ok redis || return 0
	if [ -n "$redis_ratio" ]; then
		v=$(awk -v r="$redis_ratio" 'BEGIN { print (r >= 0.8 ? "met" : "NOT MET") }')
	else
		v="see redis.md"
	fi
	echo "3|rl_allow through Redis, back to back / redis-benchmark running the same script, $(keys_label "$redis_keys"), $redis_clients sessions|${redis_ratio:-?}|>= 0.8|$v"
	echo "3|the same, one rl_allow per statement (PostgreSQL's client round trip included; for reference)|${redis_stmt:-?}|-|reported"
	if [ -n "$redis_p99" ]; then
		v=$(awk -v p="$redis_p99" 'BEGIN { print (p < 1000 ? "met" : "NOT MET") }')
	else
		v="see redis.md"
	fi
	echo "3|p99 latency of rl_allow with Redis down and the breaker open, 2 clients|${redis_p99:-?} us|< 1000 us|$v"
}

# Issue 9's targets, from cost.sh's "what|value|target|verdict" lines.
cost_rows() {
	phase_ok cost || return 0
	sed 's/^/9|/' "$tmp/cost/targets"
}

# Issue 10's targets, from durable.sh's "what|value|target|verdict" lines.
durable_rows() {
	phase_ok durable || return 0
	sed 's/^/10|/' "$tmp/durable.targets"
}

# ---- phases not run: their sections and rows from the previous report ----

# The heading of a phase's section, and the issue whose targets it measures.
phase_heading() {
	case $1 in
	sweep) echo "Throughput against clients" ;;
	targets) echo "The target runs" ;;
	redis) echo "The Redis benchmark (redis.sh)" ;;
	cost) echo "The cost of one decision (issue 9)" ;;
	durable) echo "Durable policies (issue 10)" ;;
	esac
}
phase_issue() {
	case $1 in
	targets) echo 2 ;;
	redis) echo 3 ;;
	cost) echo 9 ;;
	durable) echo 10 ;;
	esac
}

# A phase's section in the previous report, without its heading.
old_section() {
	[ -f "$tmp/old_report.md" ] || return 0
	awk -v h="## $(phase_heading "$1")" '
		$0 == h { on = 1; next }
		on && /^## / { exit }
		on' "$tmp/old_report.md"
}

# A phase's rows in the previous report's targets table, as
# "issue|what|value|target|verdict".
old_rows() {
	local issue
	issue=$(phase_issue "$1")
	[ -n "$issue" ] && [ -f "$tmp/old_report.md" ] || return 0
	awk -v i="| $issue |" '
		/^## Targets$/ { on = 1; next }
		on && /^## / { exit }
		on && index($0, i) == 1' "$tmp/old_report.md" |
		sed -e 's/^| //' -e 's/ | *$//' -e 's/ |$//' -e 's/ | /|/g'
}

# A section of the previous report that no phase writes (another script's:
# usage.sh, refund_memory.sh), heading included, kept as it is.
kept_section() {
	[ -f "$tmp/old_report.md" ] || return 0
	awk -v h="## $1" '
		$0 == h { on = 1; print; next }
		on && /^## / { exit }
		on' "$tmp/old_report.md"
}

# The phases not run whose sections the previous report has.
kept=
for p in sweep targets redis cost durable; do
	if ! has_phase "$p" && [ -n "$(old_section "$p" | tr -d '[:space:]')" ]; then
		kept="${kept:+$kept }$p"
	fi
done
is_kept() { [[ " $kept " == *" $1 "* ]]; }

# The targets as a markdown table: this run's phases' rows, and the kept
# phases' rows from the previous report.
targets_table() {
	local p
	echo "| issue | ratio or figure | measured | target | |"
	echo "|---|---|---:|---:|---|"
	for p in targets redis cost durable; do
		if has_phase "$p"; then
			case $p in
			targets) targets_rows ;;
			redis) redis_rows ;;
			cost) cost_rows ;;
			durable) durable_rows ;;
			esac
		elif is_kept "$p"; then
			old_rows "$p"
		fi
	done | while IFS='|' read -r issue what value target verdict; do
		echo "| $issue | $what | $value | $target | $verdict |"
	done
}

# The cost phase's before-and-after table, from cost_history.tsv: one line
# per recorded run.  A run on a busy machine has its wall-clock and latency
# figures marked (noisy).
history_table() {
	if [ ! -s "$history" ]; then
		echo "No run recorded yet."
		return
	fi
	echo "| run | source | label | rl_allow instructions above the floor | rl_enforce instructions above a no-op C trigger | with cost= | 1M calls / floor, wall | 1M-row INSERT / no-op C trigger, wall | memory, 1M rows, 1 key | 1M rows, 10,000 keys | p99 local | p99 Redis |"
	echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	echo "| target | | | <= 600 | <= 900 | | <= 1.5 | <= 1.3 | grows with keys, not rows | | < 1-2 ms | < 1-2 ms |"
	awk -F '\t' '
		# a figure, scaled and formatted, or "-" when not measured
		function f(v, scale, fmt) { return v == "" ? "-" : sprintf(fmt, v / scale) }
		NR > 1 {
			n = ($13 == "busy") ? " (noisy)" : ""
			printf "| %s | %s | %s | %s | %s | %s | %s%s | %s%s | %s | %s | %s%s | %s%s |\n",
				$1, $2, $3, f($4, 1, "%d"), f($5, 1, "%d"), f($6, 1, "%d"),
				f($7, 1, "%.2f"), n, f($8, 1, "%.2f"), n,
				f($9, 1048576, "%.0f MB"), f($10, 1048576, "%.0f MB"),
				f($11, 1000, "%.2f ms"), n, f($12, 1000, "%.2f ms"), n
		}' "$history"
}

# The sweep's median tps: "clients keys case tps" lines.
sweep_tps() {
	awk -v c="$1" -v n="$2" -v k="$3" '$1 == c && $2 == n && $3 == k { printf "%.0f", $4 }' \
		"$tmp/sweep/medians"
}

# tps by case and clients for one key count, as a markdown table.
sweep_table() {
	local n=$1 c case
	printf "| %s |" "$(keys_label "$n")"
	for c in $sweep_clients; do printf " %s |" "$c"; done
	printf "\n|---|"
	for c in $sweep_clients; do printf -- "---:|"; done
	echo
	for case in $sweep_cases; do
		printf "| %s |" "$(case_label "$case")"
		for c in $sweep_clients; do printf " %s |" "$(sweep_tps "$c" "$n" "$case")"; done
		echo
	done
}

largest=1
for n in $sweep_keys; do
	if [ "$n" -gt "$largest" ]; then largest=$n; fi
done
# The key count of the README's table: 10,000 when swept.
readme_keys=${sweep_keys%% *}
if [[ " $sweep_keys " == *" 10000 "* ]]; then readme_keys=10000; fi

# The plot: one block per key count (see plot.gp).
plot_ok=
if phase_ok sweep; then
	for n in $sweep_keys; do
		printf "clients"
		for case in $sweep_cases; do printf ' "%s"' "$(case_label "$case")"; done
		echo
		for c in $sweep_clients; do
			printf "%s" "$c"
			for case in $sweep_cases; do
				v=$(sweep_tps "$c" "$n" "$case")
				printf " %s" "${v:--}"
			done
			echo
		done
		printf "\n\n"
	done >"$tmp/plot.dat"
	ymax=$(awk '{ if ($4 > m) m = $4 } END { printf "%d", m * 1.1 + 1 }' "$tmp/sweep/medians")
	titles="array titles[$(wc -w <<<"$sweep_keys")]"
	i=0
	for n in $sweep_keys; do
		i=$((i + 1))
		titles="$titles; titles[$i] = '$(keys_label "$n")'"
	done
	subtitle="$started_at, $(nproc) CPUs, $commit, ${sweep_seconds} s per run"
	if gnuplot -e "data = '$tmp/plot.dat'; out = '$tmp/throughput.png'; \
		term = '$term'; ncases = $(wc -w <<<"$sweep_cases"); ymax = $ymax; $titles; \
		subtitle = '$subtitle'" "$here/plot.gp"; then
		plot_ok=1
		cp "$tmp/throughput.png" "$outdir/throughput.png"
	else
		echo "all.sh: gnuplot failed" >&2
	fi
fi

# A report of run.sh or redis.sh as a section of ours: its title dropped,
# its headings one level down, without the sections whose headings start
# with the words given.
embed() {
	local file=$1
	shift
	awk -v skip="$*" '
		BEGIN { n = split(skip, s, " ") }
		/^# / { next }
		/^## / {
			drop = 0
			for (i = 1; i <= n; i++)
				if (index($0, s[i]) == 4) drop = 1
		}
		drop { next }
		{ sub(/^##/, "###"); print }' "$file"
}

# Why a phase has no figures: it failed, or it was not run and the
# previous report has no section for it.
phase_failed() {
	if [ -f "$tmp/$1.status" ]; then
		echo "**This phase failed (exit $(cat "$tmp/$1.status")); the end of its output:**"
		echo
		echo '```'
		tail -n 15 "$tmp/$1.log"
		echo '```'
	else
		echo "Not run (RL_BENCH_PHASES=\"$phases\")."
	fi
}

# A phase's section: its heading, then what $2 writes if the phase ran and
# succeeded, the previous report's section if it was not run, or why there
# are no figures.
section() {
	echo
	echo "## $(phase_heading "$1")"
	echo
	if phase_ok "$1"; then
		"$2"
	elif is_kept "$1"; then
		old_section "$1"
	else
		phase_failed "$1"
	fi
}

sweep_section() {
	[ -n "$plot_ok" ] && echo "![throughput against clients](throughput.png)" && echo
	echo "Median calls per second (pgbench \`-M prepared\`, one call per"
	echo "transaction, ${sweep_seconds} s per run, one round: single runs, noisy)."
	for n in $sweep_keys; do
		echo
		sweep_table "$n"
	done
	echo
	echo "Notes:"
	echo
	echo "- Warm: before the runs each of the $(keys_label "$largest") got one call of"
	echo "  the cases that keep state in PostgreSQL (token_bucket, table), so the"
	echo "  figures are for existing keys, not their creation. Redis state cannot be"
	echo "  warmed: a token_bucket key of 1000 per second expires about 1 s after its"
	echo "  last call, so a key called less than once a second or so is created anew"
	echo "  by most of its calls (on 1,000,000 keys, by nearly every call)."
	echo "- sliding_window_log: before each run on up to $(keys_label "$prefill_max") every log"
	echo "  is filled with 100 entries, in a window such that about half the calls"
	echo "  are admitted (steady state)."
	if [ "$largest" -gt "$prefill_max" ]; then
		echo "  On $(keys_label "$largest") that prefill ($((largest / 10000)) million calls before"
		echo "  each run) is skipped: the logs hold the few entries earlier runs left"
		echo "  and every call is admitted, so that line measures sparse logs."
	fi
	echo "- Undecided calls (store full, Redis failed or skipped, decided by"
	echo "  \`ratelimit.fail_mode\`) are counted per run below: they must be 0."
	echo
	echo "### Sweep settings and every run"
	echo
	echo "As \`run.sh\` reported it. Its ratios are single runs at every"
	echo "concurrency; the targets above come from the target runs."
	echo
	embed "$tmp/sweep.md" "Throughput"
}
targets_section() { embed "$tmp/targets.md"; }
durable_section() { embed "$tmp/durable.md"; }
redis_section() { embed "$tmp/redis.md"; }
cost_section() {
	echo "### Before and after"
	echo
	echo "Every recorded run of this phase, oldest first (\`$(basename "$history")\`,"
	echo "one line per run of \`all.sh\` with this phase, named by \`RL_BENCH_LABEL\`; delete"
	echo "the lines of runs that should not count). Instruction counts are exact"
	echo "for a given build; wall-clock ratios and latencies measured on a busy"
	echo "machine are marked noisy. Memory: what the transaction holds after"
	echo "1,000,000 rows through rl_enforce. Runs of other sizes"
	echo "(\`RL_BENCH_COST_ROWS\`) are not recorded."
	echo
	history_table
	echo
	embed "$tmp/cost.md"
}

# The cost phase's line in the before-and-after table, when it measured
# what the table's columns say (a million calls and rows).
if phase_ok cost && [ "${RL_BENCH_COST_ROWS:-1000000}" = 1000000 ]; then
	if [ ! -s "$history" ]; then
		printf 'run\tsource\tlabel\tallow_above_floor\tenforce_above_floor\tenforce_cost_above_floor\tcalls_ratio\tinsert_ratio\tmem_1m_one_key\tmem_1m_many_keys\tp99_local_us\tp99_redis_us\tbusy\n' >"$history"
	fi
	# cost.sh's line with the label after the source and "busy" at the end
	awk -F '\t' -v OFS='\t' -v label="$label" -v busy="$(cat "$tmp/cost/busy")" \
		'{ $2 = $2 OFS label; print $0, busy }' "$tmp/cost/history" >>"$history"
fi

{
	echo "# ratelimit benchmark report"
	echo
	echo "Written by \`test/bench/all.sh\`, started $started_at, $minutes minutes,"
	echo "phases run: $phases."
	if [ -n "$kept" ]; then
		echo "The sections of ${kept// /, } are kept from an earlier run (each says"
		echo "when it was measured, and on what source), and so are their rows in the"
		echo "targets."
	fi
	echo
	echo "| | |"
	echo "|---|---|"
	echo "| machine | $machine |"
	bench_busy_row "$busy_share"
	echo "| load average | $load_before before, $load_after after |"
	echo "| source | $commit |"
	echo "| software | $("$bindir/postgres" --version), redis-server $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p'), pgbench on the same machine |"
	echo
	if [ -n "$busy" ]; then
		echo "**The machine was busy with other work when this run started (its"
		echo "CPUs' time above): the figures are noisy.**"
		echo
	fi
	echo "## Targets"
	echo
	echo "Issue 2's ratios: $target_rounds rounds of ${target_seconds} s runs at $target_clients clients, cases"
	echo "interleaved, median of the per-round ratios (details below). Issue 3's:"
	echo "\`test/bench/redis.sh\`, ${redis_seconds} s runs ([redis.md](redis.md)). Issue 9's:"
	echo "\`test/bench/cost.sh\`, instructions and cache lines under callgrind, wall"
	echo "clock, memory and latency. Issue 10's: \`test/bench/durable.sh\`, durable"
	echo "against non-durable policies side by side (its section)."
	echo
	targets_table
	for p in targets redis cost durable; do
		if ! phase_ok "$p" && ! is_kept "$p"; then
			echo
			echo "No figures from the $p phase:"
			echo
			phase_failed "$p"
		fi
	done
	section sweep sweep_section
	section targets targets_section
	section redis redis_section
	section cost cost_section
	section durable durable_section
	echo
	kept_section "Where a decision's instructions go (issue 9)"
	echo
	kept_section "Usage over a million keys (issue 11)"
	echo
	kept_section "Concurrency limits (#12)"
	echo
	kept_section "Refund tracking memory (issues 6 and 9)"
} | cat -s >"$tmp/report.md"
cp "$tmp/report.md" "$outdir/report.md"
if phase_ok redis; then
	cp "$tmp/redis.md" "$outdir/redis.md"
fi

failed=
for p in $phases; do phase_ok "$p" || failed="$failed $p"; done

# The README's "Benchmark" section, up to the next "## " heading: the
# targets, the 10,000-key table (this run's, or the report's when the
# sweep is kept), the plot, how to run.
if [ -n "$readme" ] && [ -z "$failed" ] && grep -q '^## Benchmark$' "$readme"; then
	rel=$(realpath --relative-to="$(dirname "$readme")" "$outdir")
	{
		echo "## Benchmark"
		echo
		echo "\`bash test/bench/all.sh\` (as root; about 20 minutes on 2 CPUs) runs every"
		echo "benchmark in one go, against a private installation it builds: pgbench in"
		echo "prepared mode against rl_allow (local and Redis backends), a no-op C"
		echo "function with the same signature (the floor) and a token bucket written in"
		echo "plpgsql on an UNLOGGED table (the peer), 1 to 16 clients, one hot key,"
		echo "10,000 and 1,000,000 keys; and the cost of one decision where many happen"
		echo "in one statement (instructions and cache lines under callgrind, a million"
		echo "calls or rows against the floors, memory per transaction, latency). It"
		echo "writes [the report]($rel/report.md) and the plot, and updates this section."
		echo
		echo "Latest run: $started_at, $commit, on $machine, phases ${phases// /, }."
		if [ -n "$busy" ]; then
			echo "The machine was busy with other work during this run: its figures are noisy."
		fi
		if [ -n "$kept" ]; then
			echo "The figures of ${kept// /, } are from an earlier run (see the report)."
		fi
		echo "(On a shared virtual machine the wall-clock ratios of one build move"
		echo "between runs minutes apart: by up to 0.3 on the one these figures were"
		echo "first taken on. Instructions and cache lines do not move. The report's"
		echo "rounds of issue 9 list such runs.)"
		echo
		targets_table
		echo
		echo "Calls per second, one call per statement:"
		echo
		if phase_ok sweep; then
			sweep_table "$readme_keys"
		else
			awk -v h="| $(keys_label "$readme_keys") |" '
				index($0, h) == 1 { on = 1 }
				on && !/^\|/ { exit }
				on' "$tmp/report.md"
		fi
		echo
		echo "![throughput]($rel/throughput.png)"
		echo
		echo "\`test/bench/run.sh\` runs any subset (\`RL_BENCH_CLIENTS\`, \`RL_BENCH_KEYS\`,"
		echo "\`RL_BENCH_CASES\`, \`RL_BENCH_SECONDS\`, \`RL_BENCH_ROUNDS\`: see its header);"
		echo "\`test/bench/redis.sh\` the Redis comparison alone; \`test/bench/cost.sh\` the"
		echo "cost of one decision alone, or \`RL_BENCH_PHASES=cost bash test/bench/all.sh\`"
		echo "to update its section of the report and its rows here."
	} >"$tmp/section.md"
	awk -v section="$tmp/section.md" '
		/^## Benchmark$/ {
			while ((getline line < section) > 0) print line
			skip = 1
			next
		}
		skip && /^## / { skip = 0; print "" }
		!skip' "$readme" >"$tmp/README.md"
	cat "$tmp/README.md" >"$readme"
	echo "== README: $readme, section \"Benchmark\" updated"
fi

echo
echo "== targets"
targets_table
echo
echo "== report: $outdir/report.md"
[ -n "$plot_ok" ] && echo "== plot:   $outdir/throughput.png"
if [ -n "$failed" ]; then
	die "failed:$failed (see the report)"
fi
