#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz_wire, fuzz_rank_file, fuzz_http) with clang (-fsanitize=fuzzer,address,undefined)
# and runs each for a short while from the generated seed corpus. Exit 77 (meson: skipped) when no clang with
# libFuzzer is installed (Debian: clang, which ships libclang_rt.fuzzer).
#   test/fuzz/run.sh [SECONDS_PER_TARGET]     (default 20; FUZZ_WORK=DIR keeps the build and corpora there)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-${FUZZ_SECONDS:-20}}

cxx=""
for c in ${CXX_FUZZ:-} clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$c; break; fi
done
if [[ -z $cxx ]]; then echo "SKIP: no clang++ (install Debian's clang for libFuzzer)"; exit 77; fi

work=${FUZZ_WORK:-$(mktemp -d /tmp/ncw-fuzz-XXXXXX)}
mkdir -p "$work"
[[ -n ${FUZZ_WORK:-} ]] || trap 'rm -rf "$work"' EXIT

echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" 2>/dev/null; then
    echo "SKIP: $cxx has no libFuzzer (-fsanitize=fuzzer does not link)"
    exit 77
fi

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -D_GNU_SOURCE -I"$src/include" -I"$src/lib")
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
# Every source of lib/read (the reader and the wire codec are split over several files; fmt_impl.cpp is fmt's
# implementation) and the live collector's HTTP request parse, one pure file of lib/live: compiled once, with the
# fuzzer's coverage, on every core, and linked into the three targets and the seed maker.
sources=("$src"/lib/read/*.cpp "$src/lib/live/http_request.cpp")
echo "building with $cxx in $work"
mkdir -p "$work/obj"
compile() { "$cxx" "${flags[@]}" "${san[@]}" -fsanitize=fuzzer-no-link -c "$1" -o "$work/obj/$(basename "$1" .cpp).o"; }
running=0
for f in "${sources[@]}"; do
    compile "$f" &
    if ((++running >= $(nproc))); then
        wait -n || { echo "FAIL: the fuzz build"; exit 1; }
        running=$((running - 1))
    fi
done
for j in $(jobs -p); do wait "$j" || { echo "FAIL: the fuzz build"; exit 1; }; done
objs=("$work"/obj/*.o)
for t in wire rank_file http; do
    "$cxx" "${flags[@]}" "${san[@]}" -fsanitize=fuzzer "$src/test/fuzz/fuzz_$t.cpp" "${objs[@]}" -o "$work/fuzz_$t" &
done
"$cxx" "${flags[@]}" "${san[@]}" "$src/test/fuzz/make_seeds.cpp" "${objs[@]}" -o "$work/make_seeds" &
for j in $(jobs -p); do wait "$j" || { echo "FAIL: the fuzz build"; exit 1; }; done

for t in wire rank_file http; do mkdir -p "$work/seeds_$t" "$work/corpus_$t"; done
mkdir -p "$work/crashes"
"$work/make_seeds" "$work/seeds_wire" "$work/seeds_rank_file" "$work/seeds_http"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
status=0
for t in wire rank_file http; do
    echo "== fuzz_$t for ${secs}s"
    if ! "$work/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$work/crashes/$t-" "$work/corpus_$t" "$work/seeds_$t" 2>"$work/fuzz_$t.log"; then
        tail -n 60 "$work/fuzz_$t.log"
        echo "FAIL: fuzz_$t found a crash (artifact in $work/crashes; FUZZ_WORK=DIR keeps it)"
        status=1
    else
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/fuzz_$t.log" | sed "s/^/  /"
        grep -m1 -E "^#[0-9]+ +DONE" "$work/fuzz_$t.log" | sed "s/^/  /" || true
    fi
done
exit $status
