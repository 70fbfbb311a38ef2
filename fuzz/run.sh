#!/usr/bin/env bash
# The fuzz harness's driver (`make fuzz`, and the fuzz part of `make test`).
#
#   fuzz/run.sh build              build the libFuzzer binaries (stable Rust, coverage by
#                                  -C passes=sancov-module) into fuzz/target
#   fuzz/run.sh fuzz  [KIND...]    fuzz each kind for FUZZ_SECONDS (default 60) seconds, one
#                                  after another; new corpus inputs go to fuzz/corpus/KIND,
#                                  crashes to fuzz/artifacts/KIND
#   fuzz/run.sh check [KIND...]    replay every saved crash (testdata/fuzz/KIND/crashes/*),
#                                  then fuzz each kind for FUZZ_CHECK_SECONDS (default 3)
#                                  seconds from its seeds, with a fixed seed; fails on any crash
#                                  (an unoptimised build, fuzz/target/HOST/debug: quick to make)
#
# No KIND means every kind. Limits per input: FUZZ_TIMEOUT seconds (default 2), and 2 GiB of
# memory (libFuzzer's -rss_limit_mb, and the harness's allocator, which aborts past 2 GiB).
# FUZZ_RUNS (`fuzz` only) stops each kind after that many executions; FUZZ_BUILD=0 skips
# the build and runs the binaries already there.
set -euo pipefail
cd "$(dirname "$0")/.."

KINDS=(onnx onnx_structured text_ir target_toml calibration_toml placement_json npy)
HOST=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=fuzz/target
# `fuzz` runs optimised binaries (fuzz/target/HOST/release); `check`, which runs only seconds,
# builds unoptimised ones (fuzz/target/HOST/debug), several times faster to build.
PROFILE=release
BIN=fuzz/target/$HOST/release
TIMEOUT=${FUZZ_TIMEOUT:-2}
LIMITS=(-timeout="$TIMEOUT" -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=65536)
# libFuzzer's timeout handler runs in a signal handler and allocates: when the alarm arrives
# while the input's code is inside malloc, the process deadlocks (seen once in 10^7 runs).
# Each run is therefore killed a minute after its time is up: `fuzz` and `check` cannot hang.
bounded() {
	local secs=$1
	shift
	timeout --signal=KILL "$((secs + 60))" "$@"
}

build() {
	# FUZZ_BUILD=0 runs the binaries already built (while other builds keep the cores busy).
	[ "${FUZZ_BUILD:-1}" != 0 ] || return 0
	# The flags cargo-fuzz gives with `--sanitizer none`; --target keeps them off build
	# scripts and proc macros. libFuzzer itself is C++: use c++, else Debian's clang++-22.
	if [ -z "${CXX:-}" ] && ! command -v c++ >/dev/null; then export CXX=clang++-22; fi
	RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares" \
		cargo build --quiet --profile "$([ "$PROFILE" = debug ] && echo dev || echo release)" \
		--manifest-path fuzz/Cargo.toml --target "$HOST" --bins
}

kinds() {
	if [ $# -eq 0 ]; then echo "${KINDS[@]}"; return; fi
	for k in "$@"; do
		[[ " ${KINDS[*]} " == *" $k "* ]] || { echo "fuzz: unknown kind \`$k\` (kinds: ${KINDS[*]})" >&2; exit 2; }
	done
	echo "$@"
}

# The executions of one libFuzzer run, from its log: the final statistics, else the last
# status line.
runs_in() {
	local n
	n=$(grep -oE '^stat::number_of_executed_units: [0-9]+' "$1" | tail -n 1 | grep -oE '[0-9]+$' || true)
	[ -n "$n" ] || n=$(grep -oE '^#[0-9]+' "$1" | tail -n 1 | tr -d '#' || true)
	echo "${n:-0}"
}

# Fuzzes each kind for FUZZ_SECONDS, or until FUZZ_RUNS executions when that is set. A crash
# is saved in fuzz/artifacts/KIND/ and fuzzing goes on from the corpus so far.
fuzz() {
	local secs=${FUZZ_SECONDS:-60} max=${FUZZ_RUNS:-0}
	for k in $(kinds "$@"); do
		mkdir -p "fuzz/corpus/$k" "fuzz/artifacts/$k" fuzz/logs
		local log=fuzz/logs/$k.log part=fuzz/logs/$k.part.log start=$SECONDS total=0 crashes=0
		: >"$log"
		echo "fuzz: $k for ${secs}s$([ "$max" -gt 0 ] && echo " or $max runs") (log: $log)"
		while :; do
			local left=$((start + secs - SECONDS)) budget=()
			[ "$left" -gt 0 ] || break
			if [ "$max" -gt 0 ]; then
				[ "$total" -lt "$max" ] || break
				budget=(-runs=$((max - total)))
			fi
			local rc=0
			bounded "$left" "$BIN/$k" "${LIMITS[@]}" -max_total_time="$left" "${budget[@]}" -print_final_stats=1 \
				-artifact_prefix="fuzz/artifacts/$k/" "fuzz/corpus/$k" "testdata/fuzz/$k/seeds" \
				>"$part" 2>&1 || rc=$?
			cat "$part" >>"$log"
			total=$((total + $(runs_in "$part")))
			[ "$rc" -ne 0 ] || break
			crashes=$((crashes + 1))
			echo "fuzz: $k: crash $crashes: $(grep -E '^(thread .* panicked|==[0-9]+== ERROR|SUMMARY)' "$part" | head -n 1)"
		done
		local took=$((SECONDS - start))
		echo "fuzz: $k: $total runs in ${took}s ($((total / (took > 0 ? took : 1))) exec/s), $crashes crash(es)"
	done
}

check() {
	local secs=${FUZZ_CHECK_SECONDS:-3} failed=0
	for k in $(kinds "$@"); do
		local crashes=()
		for f in "testdata/fuzz/$k/crashes/"*; do [ -f "$f" ] && crashes+=("$f"); done
		if [ ${#crashes[@]} -gt 0 ]; then
			# Given files, libFuzzer runs each once and stops at the first crash.
			if ! bounded "$((TIMEOUT * 5 * ${#crashes[@]}))" "$BIN/$k" "${LIMITS[@]}" -timeout=$((TIMEOUT * 5)) \
				"${crashes[@]}" >"fuzz/target/replay-$k.log" 2>&1; then
				echo "fuzz: $k: a saved crash input crashes again:" >&2
				tail -n 30 "fuzz/target/replay-$k.log" >&2
				failed=1
				continue
			fi
		fi
		local corpus log=fuzz/target/check-$k.log
		corpus=$(mktemp -d)
		mkdir -p "fuzz/target/artifacts/$k"
		if ! bounded "$secs" "$BIN/$k" "${LIMITS[@]}" -seed=1 -max_total_time="$secs" \
			-artifact_prefix="fuzz/target/artifacts/$k/" "$corpus" "testdata/fuzz/$k/seeds" >"$log" 2>&1; then
			echo "fuzz: $k: a crash in ${secs}s of fuzzing (input saved in fuzz/target/artifacts/$k/):" >&2
			tail -n 30 "$log" >&2
			failed=1
		else
			echo "fuzz: $k: ${#crashes[@]} saved crash(es) replayed, $(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#') runs in ${secs}s, no crash"
		fi
		rm -rf "$corpus"
	done
	return $failed
}

cmd=${1:-}
shift || true
case $cmd in
	build) build ;;
	fuzz) build; fuzz "$@" ;;
	check) PROFILE=debug BIN=fuzz/target/$HOST/debug; build; check "$@" ;;
	*) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
