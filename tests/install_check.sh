#!/bin/sh
# tests/install_check.sh BUILD_DIR SOURCE_DIR CC CMAKE: the installed tree, as a user gets it.
#
# Installs BUILD_DIR into BUILD_DIR/install-check, then: the expected files are there; the
# header compiles alone (C11, -Wall -Wextra -Werror -pedantic; and as C++ when c++ exists);
# tests/install/example.c builds with `pkg-config --cflags --libs inferlab` and runs; the
# shared library exports exactly the functions inferlab.h marks IL_API; the same program builds
# through the CMake package (find_package(inferlab) -> inferlab::inferlab) and runs; the
# installed inferlab binary starts. Exit 0 when all hold, 1 at the first that does not.
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cc=$3 cmake=$4
if grep -Eq '^IL_(SANITIZE|TSAN):BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: a sanitizer build: a program linked by plain cc cannot load its instrumented libinferlab.so (the release preset runs this test)"
  exit 77
fi
prefix=$build/install-check
work=$build/install-check-work
rm -rf "$prefix" "$work"
mkdir -p "$work"
fail() { echo "install_check: FAILED: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
lib=$prefix/lib
[ -d "$lib" ] || lib=$(dirname "$(find "$prefix" -name inferlab.pc | head -1)")/..
for f in bin/inferlab include/inferlab.h; do [ -e "$prefix/$f" ] || fail "$f is not installed"; done
for f in libinferlab.so libinferlab.a pkgconfig/inferlab.pc cmake/inferlab/inferlabConfig.cmake \
         cmake/inferlab/inferlabConfigVersion.cmake cmake/inferlab/inferlabTargets.cmake; do
  [ -e "$lib/$f" ] || fail "lib/$f is not installed"
done
soname=$(objdump -p "$lib/libinferlab.so" | awk '/SONAME/ {print $2}')
echo "soname: $soname"
case $soname in libinferlab.so.[0-9]*) ;; *) fail "libinferlab.so has SONAME '$soname', not libinferlab.so.MAJOR" ;; esac
[ -e "$lib/$soname" ] || fail "$soname is not installed"

# the header alone, in C and C++
printf '#include <inferlab.h>\nint main(void) { return il_version() == 0; }\n' >"$work/alone.c"
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I"$prefix/include" -c "$work/alone.c" -o "$work/alone.o" ||
  fail "inferlab.h does not compile alone as C11"
if command -v c++ >/dev/null 2>&1; then
  cp "$work/alone.c" "$work/alone.cpp"
  c++ -std=c++11 -Wall -Wextra -Werror -I"$prefix/include" -c "$work/alone.cpp" -o "$work/alone_cpp.o" ||
    fail "inferlab.h does not compile as C++11"
fi

# pkg-config
export PKG_CONFIG_PATH="$lib/pkgconfig"
flags=$(pkg-config --cflags --libs inferlab) || fail "pkg-config --cflags --libs inferlab"
echo "pkg-config: $flags"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror "$src/tests/install/example.c" $flags -Wl,-rpath,"$lib" -o "$work/example_pc" ||
  fail "example.c does not build with pkg-config's flags"
"$work/example_pc" >"$work/example_pc.out" 2>&1 || { cat "$work/example_pc.out"; fail "example (pkg-config) failed"; }
cat "$work/example_pc.out"
ldd "$work/example_pc" | grep -q "$lib/libinferlab.so" || fail "example did not load the installed libinferlab.so"

# exports: exactly the IL_API functions of the header
grep -oE '^(IL_NODISCARD )?IL_API [^(]*\(' "$prefix/include/inferlab.h" | sed 's/($//; s/.*[ *]//' | sort -u >"$work/api.txt"
nm -D --defined-only "$lib/libinferlab.so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^_' | sort -u >"$work/exported.txt"
if ! cmp -s "$work/api.txt" "$work/exported.txt"; then
  echo "exported but not in inferlab.h (>) / in inferlab.h but not exported (<):" >&2
  diff "$work/api.txt" "$work/exported.txt" >&2
  fail "libinferlab.so's exports differ from inferlab.h's IL_API functions"
fi
echo "exports: $(wc -l <"$work/api.txt") functions, all from inferlab.h"

# CMake package
mkdir -p "$work/cm"
cat >"$work/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(example C)
find_package(inferlab 0 REQUIRED)
add_executable(example_cm $src/tests/install/example.c)
target_link_libraries(example_cm PRIVATE inferlab::inferlab)
CM
"$cmake" -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$work/cm.log" 2>&1 && "$cmake" --build "$work/cm/build" >>"$work/cm.log" 2>&1 ||
  { cat "$work/cm.log"; fail "example.c does not build with find_package(inferlab)"; }
"$work/cm/build/example_cm" >"$work/example_cm.out" 2>&1 || { cat "$work/example_cm.out"; fail "example (CMake) failed"; }
echo "cmake package: example_cm ran: $(tail -1 "$work/example_cm.out")"

"$prefix/bin/inferlab" --version >"$work/version.out" 2>&1 || { cat "$work/version.out"; fail "installed inferlab --version"; }
head -1 "$work/version.out"
if [ -e "$lib/libinferlab-cuda.so" ]; then # the installed binary finds the installed module
  grep "cuda module:" "$work/version.out"
  grep -q "cuda module: .*/libinferlab-cuda.so (" "$work/version.out" || fail "installed inferlab does not load lib/libinferlab-cuda.so"
fi
rm -rf "$prefix" "$work"
echo "install_check: ok"
