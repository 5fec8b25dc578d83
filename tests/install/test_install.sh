#!/usr/bin/env bash
# test_install.sh CMAKE BUILD_DIR README: installs BUILD_DIR into a temporary prefix and checks what a user of the
# installed tree gets: headers, libcohort.so/.a, cohort.pc, the CMake package, the tools and their man pages, and a
# libcohort.so that exports the public API alone. The C example is cut out of README (its first ```c block), so the
# README's example is the one that is built: once with pkg-config, once with find_package(cohort), and each binary
# runs on 2 ranks under the installed cohortrun.
set -euo pipefail
cmake=$1 build=$2 readme=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
libdir=$(dirname "$(find "$prefix" -name libcohort.so -print -quit)")
[ -n "$libdir" ] && [ -f "$libdir/libcohort.a" ] || fail "libcohort.so and libcohort.a are not both installed"
for f in include/cohort/cohort.h include/cohort/ddp.h bin/cohortrun bin/fmnist-train share/man/man1/cohortrun.1 \
  share/man/man1/fmnist-train.1; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ -f "$libdir/pkgconfig/cohort.pc" ] || fail "cohort.pc is not installed"
[ -f "$libdir/cmake/cohort/cohortConfig.cmake" ] || fail "the CMake package is not installed"
grep -q '^cohortrun \\- ' "$prefix/share/man/man1/cohortrun.1" || fail "cohortrun.1 has no NAME line"
grep -q -- '-np N' "$prefix/share/man/man1/cohortrun.1" || fail "cohortrun.1 does not carry --help"

# Only the public API is exported: no cohort__ internals, and the public functions are there.
exported=$(nm -D --defined-only "$libdir/libcohort.so" | awk '{print $3}')
if grep -q '^cohort__' <<<"$exported"; then
  fail "libcohort.so exports internals: $(grep '^cohort__' <<<"$exported" | head -5 | tr '\n' ' ')"
fi
for sym in cohort_init cohort_allreduce cohort_ddp_create cohort_last_error; do
  grep -qx "$sym" <<<"$exported" || fail "libcohort.so does not export $sym"
done

awk '/^```c$/ {on = 1; next} on && /^```$/ {exit} on' "$readme" >"$work/example.c"
grep -q cohort_init "$work/example.c" || fail "no C example found in $readme"

run() { # run NAME BINARY: 2 ranks under the installed launcher; every rank must succeed
  "$prefix/bin/cohortrun" -np 2 "$2" >"$work/$1.out" 2>&1 || { cat "$work/$1.out"; fail "$1: the example failed"; }
}

# The README's static link line against the build tree, as written (it lacked MPI's libraries on a build with MPI).
src=$(cd "$(dirname "$readme")" && pwd)
line=$(awk '/^cc -O2 -Iinclude example.c build\/lib\/libcohort.a/ {on = 1} on {print; if (!/\\$/) exit}' "$readme" |
  sed 's/\\$//' | tr '\n' ' ')
[ -n "$line" ] || fail "no static link line (cc -O2 -Iinclude example.c build/lib/libcohort.a ...) in $readme"
line=${line//build\//$build/}
line=${line/example.c/$work/example.c}
line=${line/-o example/-o $work/example_readme}
(cd "$src" && eval "$line") || fail "the README's static link line fails: $line"
run readme-static "$work/example_readme"

# Every tool says its version, and so does the library.
for tool in cohortrun fmnist-train cohort-bench; do
  v=$("$prefix/bin/$tool" --version) || fail "$tool --version failed"
  grep -Eq "^$tool \(cohort\) [0-9]+\.[0-9]+\.[0-9]+$" <<<"$v" || fail "$tool --version says '$v'"
done
printf '#include <stdio.h>\n#include <cohort/cohort.h>\nint main(void) { puts(cohort_version()); return 0; }\n' >"$work/v.c"
cc "$work/v.c" -I"$prefix/include" -L"$libdir" -lcohort -Wl,-rpath,"$libdir" -o "$work/v" || fail "cohort_version"
[ "$("$work/v")" = "$("$prefix/bin/cohortrun" --version | awk '{print $3}')" ] || fail "cohort_version() differs"

# pkg-config, shared library (an rpath, as an application would have, so that no LD_LIBRARY_PATH is needed).
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -O2 "$work/example.c" $(pkg-config --cflags --libs cohort) -Wl,-rpath,"$libdir" -o "$work/example_pc" ||
  fail "building the example with pkg-config"
# grep without -q reads all of ldd's output: with -q it may exit at the first match and, under pipefail, ldd's
# SIGPIPE then failed the check (seen once the libraries' list grew with MPI's).
ldd "$work/example_pc" | grep "$libdir/libcohort.so" >/dev/null || fail "example_pc does not use the installed libcohort.so"
run pkg-config "$work/example_pc"
# pkg-config --static: the archive and what it needs.
static_flags=$(pkg-config --static --cflags --libs cohort | sed "s#-lcohort#$libdir/libcohort.a#")
cc -O2 "$work/example.c" $static_flags -o "$work/example_static" || fail "building the example statically with pkg-config"
run pkg-config-static "$work/example_static"

# find_package(cohort) -> cohort::cohort.
mkdir -p "$work/cm"
cp "$work/example.c" "$work/cm/example.c"
cat >"$work/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(example C)
find_package(cohort 0.1 REQUIRED)
add_executable(example example.c)
target_link_libraries(example PRIVATE cohort::cohort)
CM
"$cmake" -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cm.log" 2>&1 &&
  "$cmake" --build "$work/cm/build" >>"$work/cm.log" 2>&1 || { cat "$work/cm.log"; fail "building with find_package"; }
run find_package "$work/cm/build/example"
echo "installed, built with pkg-config (shared and static) and find_package, ran on 2 ranks: ok"
