#!/usr/bin/env bash
# Sanitizers as checks: builds the engine and its native driver (tests/native/engine_driver.cc,
# every rank a thread of one process, no Python) with ThreadSanitizer (`thread`) or with
# AddressSanitizer and UndefinedBehaviorSanitizer (`address`), each in its own build
# directory (build/sanitize-thread, build/sanitize-address), and runs the driver's parts
# under it, one process per part. Exits non-zero on any sanitizer finding, wrong result
# or hang.
#
#   bash scripts/sanitize.sh thread|address [part ...]
#
# Parts: collectives, p2p, faults (deadlines and killed peers), shm, hierarchy; none
# named: all. PYCOLLECT_SANITIZE_ITERATIONS sets how many kills the faults part runs
# (200). Prints a line per part and a final line.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bash scripts/sanitize.sh thread|address [collectives|p2p|faults|shm|hierarchy ...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
kind=$1
shift
all_parts=(collectives p2p faults shm hierarchy)
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=("${all_parts[@]}")
for part in "${parts[@]}"; do
  case " ${all_parts[*]} " in
    *" $part "*) ;;
    *) echo "sanitize: no part named '$part' (parts: ${all_parts[*]})" >&2; exit 2 ;;
  esac
done

# Exit statuses that say which sanitizer spoke (the driver itself exits 1 on a wrong
# result, 3 on a hang).
tsan_exit=66
asan_exit=67
ubsan_exit=68
case "$kind" in
  thread)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    runtime_packages="libtsan2"
    # halt_on_error: the first report ends the part (and fails it). history_size: more
    # of each thread's past kept, so a race's other access keeps its stack.
    export TSAN_OPTIONS="halt_on_error=1 exitcode=$tsan_exit second_deadlock_stack=1 history_size=4 ${TSAN_OPTIONS:-}"
    ;;
  address)
    # -fno-sanitize-recover=undefined: undefined behaviour ends the run like a memory error.
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    runtime_packages="libasan8 libubsan1"
    export ASAN_OPTIONS="halt_on_error=1 exitcode=$asan_exit detect_leaks=1 check_initialization_order=1 strict_init_order=1 detect_stack_use_after_return=1 ${ASAN_OPTIONS:-}"
    export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 exitcode=$ubsan_exit ${UBSAN_OPTIONS:-}"
    ;;
  *) usage ;;
esac
# No suppression file: nothing in the engine's own code (namespace pycollect, csrc/) may be
# hidden, and the driver has needed none outside it.

cxx=${CXX:-g++}
# The sanitizer's runtime library: a Debian toolchain can lack it (gcc's -dev package only
# recommends it). Installed only when a sanitized program does not link.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
echo 'int main() { return 0; }' > "$probe_dir/probe.cc"
if ! $cxx $flags "$probe_dir/probe.cc" -o "$probe_dir/probe" 2>/dev/null; then
  echo "sanitize $kind: $cxx cannot link $flags; installing $runtime_packages" >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y --no-install-recommends $runtime_packages >/dev/null
  else
    echo "sanitize $kind: install $runtime_packages (apt-get) and run again" >&2
    exit 2
  fi
  $cxx $flags "$probe_dir/probe.cc" -o "$probe_dir/probe"
fi

build="build/sanitize-$kind"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=Ninja$" "$build/CMakeCache.txt"; then
  generator=()  # keep the generator the directory was made with
fi
start=$(date +%s)
echo "sanitize $kind: building $build ($flags)"
# -O1 -g: quicker to build than the package's -O3, and every frame in the stacks.
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DPYCOLLECT_OPT_FLAG=-O1 \
  -DPYCOLLECT_BUILD_PYTHON=OFF -DPYCOLLECT_BUILD_DRIVER=ON \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$build" --target pycollect_engine_driver -j "$(nproc)" >"$build/build.log" 2>&1 || {
  cat "$build/build.log" >&2
  echo "sanitize $kind: build failed" >&2
  exit 1
}
echo "sanitize $kind: built in $(( $(date +%s) - start )) s"

driver="$build/pycollect_engine_driver"
run=("$driver")
if [ "$kind" = thread ] && [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ] &&
  command -v setarch >/dev/null; then
  # GCC 12's ThreadSanitizer finds no room for its shadow memory under more than 28 bits
  # of mmap randomisation (some kernels' default since 6.5): run without address randomisation.
  run=(setarch "$(uname -m)" -R "$driver")
fi
iterations=${PYCOLLECT_SANITIZE_ITERATIONS:-200}
failed=()
run_start=$(date +%s)
for part in "${parts[@]}"; do
  status=0
  "${run[@]}" --part "$part" --label "sanitize $kind" --iterations "$iterations" --part-timeout 600 || status=$?
  if [ "$status" -ne 0 ]; then
    case "$status" in
      "$tsan_exit") why="ThreadSanitizer finding" ;;
      "$asan_exit") why="AddressSanitizer finding" ;;
      "$ubsan_exit") why="UndefinedBehaviorSanitizer finding" ;;
      1) why="wrong result or unexpected error" ;;
      3) why="hang" ;;
      *) why="exit $status" ;;
    esac
    echo "sanitize $kind: $part FAILED ($why, exit $status; the report is above)"
    failed+=("$part")
  fi
done
took=$(( $(date +%s) - run_start ))
if [ ${#failed[@]} -eq 0 ]; then
  echo "sanitize $kind: all ok (${#parts[@]} parts: ${parts[*]}; ran ${took} s)"
else
  echo "sanitize $kind: FAILED: ${failed[*]} (of ${#parts[@]} parts; ran ${took} s)"
  exit 1
fi
