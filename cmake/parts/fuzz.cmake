# Fuzz harnesses (tests/fuzz/fuzz_*.c, issue 9). Two builds of the same source:
#  - IL_LIBFUZZER=ON with clang: libFuzzer targets for long runs (docs/fuzzing.md); configure
#    that build with -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined so the library
#    is instrumented for coverage too.
#  - otherwise: each harness links tests/fuzz/fuzz_main.c, a replay driver (seeds + random
#    mutations for a few seconds), registered as a CTest test: the smoke run, sanitized in the
#    asan preset.
option(IL_LIBFUZZER "Build the fuzz harnesses as libFuzzer targets (needs clang)" OFF)
file(GLOB IL_FUZZERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
list(FILTER IL_FUZZERS EXCLUDE REGEX "fuzz_main\\.c$")
foreach(f ${IL_FUZZERS})
  get_filename_component(name ${f} NAME_WE)
  if(IL_LIBFUZZER)
    if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
      message(FATAL_ERROR "IL_LIBFUZZER needs clang (CC=clang); gcc builds get the replay driver")
    endif()
    add_executable(${name} ${f})
    target_compile_options(${name} PRIVATE ${IL_WARN} -fsanitize=fuzzer,address,undefined)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  else()
    add_executable(${name} ${f} ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_main.c)
    target_compile_options(${name} PRIVATE ${IL_WARN})
    add_test(NAME ${name}_smoke COMMAND ${name} ${CMAKE_SOURCE_DIR}/../shared/fixtures/models/tok512.bin)
    set_tests_properties(${name}_smoke PROPERTIES LABELS "quick;fixtures" TIMEOUT 120
      ENVIRONMENT "IL_FIXTURES=${CMAKE_SOURCE_DIR}/../shared/fixtures;IL_FUZZ_SECONDS=3;IL_FUZZ_SEED=1")
  endif()
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz)
  target_link_libraries(${name} PRIVATE inferlab_static)
endforeach()
