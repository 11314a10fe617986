# The tests, declared: each tests/test_*.c is one executable linked against the library, with the
# labels and time limit written here rather than guessed from its source. Configuring fails when a
# tests/test_*.c has no entry below, or an entry names a file that is gone.
#
# Labels (ctest -L NAME, or the presets `quick`, `cpu-only`, `cuda`; docs/testing.md):
#   quick     seconds each on an idle machine
#   slow      tens of seconds or more (many CLI runs, whole-vocabulary passes)
#   fixtures  reads ../shared/fixtures (skips, saying so, when they are absent)
#   gpu       needs a CUDA device or the CUDA module (skips in a CPU-only build)
#   python    a Python integration test (cmake/parts/server.cmake)
#   emulated  under QEMU's user-mode emulation; left out of every default preset
# A test prints "SKIP: reason" and exits 77 when something it needs is absent.
set(IL_TEST_TABLE
  # name                   labels                  timeout (s)
  test_access              quick                   300
  test_act_handover        quick                   300
  test_allreduce           quick                   300  # host sum on sim devices; the NCCL table's failure paths
  test_archs               quick                   300
  test_attn_kernels        quick                   300
  test_attn_paged          quick                   300
  test_backend_ops         quick                   300  # CPU backends; the CUDA part skips without a device
  test_bench_device        quick                   300
  test_caching_alloc       slow                    300
  test_cli                 slow,fixtures           900
  test_cli_usage           slow,fixtures           300
  test_cpu_ops             quick                   300
  test_cuda_engine         quick,gpu               300
  test_cuda_sample         quick                   300  # the sample kernel's host twin; no toolkit needed
  test_cuda_glue           quick,gpu               300
  test_cuda_graph          quick,gpu               300  # decode steps as CUDA graphs; the trace on the fake module
  test_cuda_module         quick,gpu               300
  test_dl                  quick                   300
  test_doctor              quick                   300  # fake NVML/CUDA libraries, no device
  test_doctor_beyond       quick                   300
  test_doctor_cli          slow                    300
  test_doctor_corpus       quick                   300
  test_doctor_elf          quick                   300
  test_doctor_explain      quick                   300
  test_doctor_input        quick                   300
  test_doctor_k8s          quick                   300
  test_doctor_world        quick                   300
  test_engine_private      quick                   300
  test_engine_units        quick                   300
  test_eval                quick,fixtures          300
  test_everyday_cli        slow,fixtures           300
  test_everyday_units      quick                   300
  test_forward             quick                   300
  test_moe                 quick                   300
  test_gguf                quick,fixtures          300
  test_grammar             quick                   300
  test_guard               quick                   300
  test_kv_engine           quick                   300
  test_kvpages             quick                   300
  test_lab_bench           quick                   300
  test_bench_spec          quick                   300
  test_lab_experiment      quick                   300
  test_lab_report          quick                   300
  test_lab_stats           quick                   300
  test_lab_watch           quick                   300
  test_lab_cmdbench        quick                   300  # bench --cmd on short shell commands
  test_layers              quick                   300  # includes point down the layers of design.md
  # all 32 lessons through the binary: seconds of CPU, but past 300 s of wall time on a loaded
  # 2-core machine under the sanitizers
  test_learn               quick                   900
  test_learn_machine       quick                   300
  test_learn_units         quick                   300
  test_llama2c             slow,fixtures           300
  test_log                 quick                   300
  test_matmul              quick                   300
  test_measured_figures    quick                   300
  test_offload             quick                   300
  test_multi_device        quick                   300
  test_tp                  quick                   300  # tensor parallelism on sim devices: logits, memory per device, bytes
  test_plan                slow,fixtures           300
  test_plan_devices        quick                   300
  test_precision           quick,fixtures          300
  test_prefix_cache        quick                   300
  test_quant               quick                   300
  test_quant_mix           quick                   300
  test_quant_model         slow,fixtures           300
  test_quant_q5            quick                   300
  test_quantize_k          quick                   300
  test_sbuf                quick                   300
  test_sched               quick                   300
  test_schema              quick                   300
  test_sim                 slow                    300
  test_spawn               quick                   300
  test_spec                quick                   300
  test_startup             quick                   300
  test_strhash_trie        quick                   300
  test_template            quick,fixtures          300
  test_tokenizer           slow,fixtures           300
  test_tokenizer_smollm2   quick                   300
)

set(il_known_labels quick slow fixtures gpu python emulated)
set(il_declared "")
list(LENGTH IL_TEST_TABLE il_n)
math(EXPR il_last "${il_n} - 1")
foreach(i RANGE 0 ${il_last} 3)
  math(EXPR il_j "${i} + 1")
  math(EXPR il_k "${i} + 2")
  list(GET IL_TEST_TABLE ${i} name)
  list(GET IL_TEST_TABLE ${il_j} labels)
  list(GET IL_TEST_TABLE ${il_k} timeout)
  string(REPLACE "," ";" labels "${labels}")
  foreach(l ${labels})
    if(NOT l IN_LIST il_known_labels)
      message(FATAL_ERROR "tests/tests.cmake: ${name}: unknown label '${l}' (known: ${il_known_labels})")
    endif()
  endforeach()
  if(NOT timeout MATCHES "^[0-9]+$")
    message(FATAL_ERROR "tests/tests.cmake: ${name}: timeout '${timeout}' is not a number of seconds")
  endif()
  set(src ${CMAKE_SOURCE_DIR}/tests/${name}.c)
  if(NOT EXISTS ${src})
    message(FATAL_ERROR "tests/tests.cmake declares ${name}, but tests/${name}.c does not exist")
  endif()
  list(APPEND il_declared ${name})
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/harness.c)
  target_compile_options(${name} PRIVATE ${IL_WARN})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE inferlab_static)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" SKIP_RETURN_CODE 77 TIMEOUT ${timeout}
    ENVIRONMENT "IL_FIXTURES=${CMAKE_SOURCE_DIR}/../shared/fixtures;IL_CLI=$<TARGET_FILE:inferlab>;IL_SRC=${CMAKE_SOURCE_DIR}")
endforeach()

file(GLOB il_test_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
foreach(t ${il_test_sources})
  get_filename_component(name ${t} NAME_WE)
  if(NOT name IN_LIST il_declared)
    message(FATAL_ERROR "tests/${name}.c has no entry in tests/tests.cmake: add a line with its "
                        "labels (quick or slow, and fixtures/gpu when it needs them) and time limit")
  endif()
endforeach()
