# cuda: the CUDA backend, built as the module libinferlab-cuda.so next to the executable.
#
#   -DIL_CUDA=AUTO   (default) build it when nvcc is found, else a CPU-only build
#   -DIL_CUDA=ON     build it; fail when nvcc (or cuBLAS) is missing
#   -DIL_CUDA=OFF    CPU-only build
#   -DIL_CUDA_ARCHS="80;86;89;90"   compute capabilities: SASS for each, and PTX for the
#                    newest so newer GPUs JIT-compile it ("90" becomes "80-real;...;90").
#                    "native" is not accepted: scripts/gpu-check.sh passes the present GPU's.
#
# The module links the CUDA runtime statically (cudart_static) and cuBLAS/cuBLASLt dynamically
# (RPATH to the toolkit's lib directory). It does not link the inferlab library: the host hands
# it a table of library functions at load (src/backend/cudamod.h).
# A build directory configured before this option existed holds the old placeholder
# `option(IL_CUDA ... ON)` as a BOOL: that was never a user's choice, so it becomes AUTO.
get_property(il_cuda_type CACHE IL_CUDA PROPERTY TYPE)
if(il_cuda_type STREQUAL "BOOL")
  set(IL_CUDA AUTO CACHE STRING "Build the CUDA backend module: AUTO (when nvcc is found), ON (required), OFF" FORCE)
endif()
set(IL_CUDA AUTO CACHE STRING "Build the CUDA backend module: AUTO (when nvcc is found), ON (required), OFF")
set_property(CACHE IL_CUDA PROPERTY STRINGS AUTO ON OFF)
set(IL_CUDA_ARCHS "80;86;89;90" CACHE STRING "CUDA compute capabilities to compile for (PTX for the newest)")
string(TOUPPER "${IL_CUDA}" il_cuda_mode)
if(il_cuda_mode STREQUAL "TRUE" OR il_cuda_mode STREQUAL "1" OR il_cuda_mode STREQUAL "YES")
  set(il_cuda_mode ON)
elseif(il_cuda_mode STREQUAL "FALSE" OR il_cuda_mode STREQUAL "0" OR il_cuda_mode STREQUAL "NO")
  set(il_cuda_mode OFF)
endif()
if(NOT il_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "-DIL_CUDA=${IL_CUDA}: expected AUTO, ON or OFF")
endif()

set(il_cuda_build OFF)
if(NOT il_cuda_mode STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(il_cuda_build ON)
  elseif(il_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "-DIL_CUDA=ON but no CUDA compiler (nvcc) was found: put nvcc on PATH or set "
                        "CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc, or configure with -DIL_CUDA=AUTO")
  else()
    message(STATUS "CUDA backend: nvcc not found, CPU-only build (-DIL_CUDA=AUTO)")
  endif()
endif()

if(il_cuda_build)
  # Validate the list before CMake's own check sees it; build the SASS+PTX spelling.
  set(il_archs_in "$CACHE{IL_CUDA_ARCHS}")
  if(il_archs_in STREQUAL "")
    message(FATAL_ERROR "-DIL_CUDA_ARCHS is empty: give compute capabilities, e.g. \"80;90\"")
  endif()
  set(il_archs_num "")
  foreach(a ${il_archs_in})
    string(REGEX REPLACE "^sm_|-(real|virtual)$" "" a "${a}") # doctor's fix repeats the built list
    if(NOT a MATCHES "^[0-9][0-9][0-9]?[af]?$")
      message(FATAL_ERROR "-DIL_CUDA_ARCHS: '${a}' is not a compute capability like 80, 86, 90 or 90a")
    endif()
    list(APPEND il_archs_num ${a})
  endforeach()
  list(REMOVE_DUPLICATES il_archs_num)
  list(SORT il_archs_num COMPARE NATURAL)
  list(GET il_archs_num -1 il_newest)
  set(il_archs_cmake "")
  foreach(a ${il_archs_num})
    if(a STREQUAL il_newest)
      list(APPEND il_archs_cmake "${a}")
    else()
      list(APPEND il_archs_cmake "${a}-real")
    endif()
  endforeach()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${il_archs_cmake})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cudart_static)
    if(il_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "-DIL_CUDA=ON: cuBLAS or the static CUDA runtime was not found in ${CUDAToolkit_LIBRARY_DIR}")
    endif()
    message(STATUS "CUDA backend: cuBLAS or cudart_static missing, CPU-only build")
    set(il_cuda_build OFF)
  endif()
endif()

if(il_cuda_build)
  set(IL_HAVE_CUDA 1)
  set(IL_CUDA_ARCHS_BUILT "${il_archs_cmake}")
  string(REPLACE ";" "," il_archs_text "${il_archs_cmake}")
  set(IL_CUDA_VERSION "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
  message(STATUS "CUDA backend: module libinferlab-cuda.so for ${IL_CUDA_ARCHS_BUILT} (CUDA ${IL_CUDA_VERSION})")

  # The committed matvec dispatch table (the model's ranking, or what a device measured:
  # scripts/gpu-check.sh writes the replacement), compiled into the module as a string.
  set(il_mv_table_file ${CMAKE_SOURCE_DIR}/src/backend/cuda/mv_table.txt)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${il_mv_table_file})
  file(READ ${il_mv_table_file} il_mv_table_text)
  string(REPLACE "\\" "\\\\" il_mv_table_text "${il_mv_table_text}")
  string(REPLACE "\"" "\\\"" il_mv_table_text "${il_mv_table_text}")
  string(REPLACE "\n" "\\n\"\n  \"" il_mv_table_text "${il_mv_table_text}")
  file(WRITE ${CMAKE_BINARY_DIR}/generated/il_mv_table.h.new
    "/* generated from src/backend/cuda/mv_table.txt by cmake/parts/cuda.cmake */\n"
    "static const char il__mv_table_text[] =\n  \"${il_mv_table_text}\";\n")
  file(COPY_FILE ${CMAKE_BINARY_DIR}/generated/il_mv_table.h.new ${CMAKE_BINARY_DIR}/generated/il_mv_table.h ONLY_IF_DIFFERENT)

  file(GLOB il_cuda_c CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.c)
  file(GLOB il_cuda_cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
  # backend/dry.c: the planner's dry device refusals, shared with sim (the module links no library)
  add_library(inferlab_cuda MODULE ${il_cuda_c} ${il_cuda_cu} ${CMAKE_SOURCE_DIR}/src/backend/dry.c)
  set_target_properties(inferlab_cuda PROPERTIES
    OUTPUT_NAME inferlab-cuda
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
    CUDA_ARCHITECTURES "${il_archs_cmake}"
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    C_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    LINKER_LANGUAGE C
    BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}"
    INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  target_include_directories(inferlab_cuda PRIVATE ${IL_INCLUDES})
  target_include_directories(inferlab_cuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS}) # its headers are not -Wundef clean
  target_compile_definitions(inferlab_cuda PRIVATE
    IL_CUDA_MODULE=1
    "IL_CUDA_ARCHS_TEXT=\"${il_archs_text}\""
    "IL_CUDA_VERSION_TEXT=\"${IL_CUDA_VERSION}\"")
  target_compile_options(inferlab_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:C>:${IL_WARN}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  # cudart_static keeps libcudart out of the loader's way; cuBLAS comes from the toolkit's
  # directory through the RPATH. --exclude-libs and -Bsymbolic: the module's symbols (and
  # cudart's) bind inside the module and do not leak into the process.
  target_link_libraries(inferlab_cuda PRIVATE CUDA::cudart_static CUDA::cublas CUDA::cublasLt Threads::Threads
                        ${CMAKE_DL_LIBS} m rt)
  target_link_options(inferlab_cuda PRIVATE -Wl,--exclude-libs,ALL -Wl,-Bsymbolic -Wl,--no-undefined)

  # The fake module: the same glue (cuda.c, attn_ops.c, gemm.c, host.c) over a host-memory stand-in for the
  # CUDA runtime and cuBLAS and host versions of the kernels (tests/fakes/fake_cuda*), so the
  # glue runs end to end in CI without a GPU. Host compilers only: no nvcc objects, no cudart.
  enable_language(CXX)
  add_library(inferlab_cuda_fake MODULE
    ${CMAKE_SOURCE_DIR}/src/backend/cuda/cuda.c ${CMAKE_SOURCE_DIR}/src/backend/cuda/gemm.c
    ${CMAKE_SOURCE_DIR}/src/backend/cuda/host.c ${CMAKE_SOURCE_DIR}/src/backend/dry.c ${CMAKE_SOURCE_DIR}/tests/fakes/fake_cudart.c
    ${CMAKE_SOURCE_DIR}/src/backend/cuda/mv3_model.c ${CMAKE_SOURCE_DIR}/src/backend/cuda/graph.c
    ${CMAKE_SOURCE_DIR}/src/backend/cuda/attn_ops.c
    ${CMAKE_SOURCE_DIR}/tests/fakes/fake_cuda_kernels.cpp ${CMAKE_SOURCE_DIR}/tests/fakes/fake_cuda_selftest.cpp
    ${CMAKE_SOURCE_DIR}/tests/fakes/fake_cuda_graph.cpp)
  set_target_properties(inferlab_cuda_fake PROPERTIES
    OUTPUT_NAME inferlab-cuda-fake
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fakes
    CXX_STANDARD 17
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden)
  target_include_directories(inferlab_cuda_fake PRIVATE ${IL_INCLUDES})
  target_include_directories(inferlab_cuda_fake SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(inferlab_cuda_fake PRIVATE
    "IL_CUDA_ARCHS_TEXT=\"${il_archs_text}\""
    "IL_CUDA_VERSION_TEXT=\"${IL_CUDA_VERSION}\"")
  target_compile_options(inferlab_cuda_fake PRIVATE $<$<COMPILE_LANGUAGE:C>:${IL_WARN}>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter>)
  target_link_libraries(inferlab_cuda_fake PRIVATE Threads::Threads m)
  target_link_options(inferlab_cuda_fake PRIVATE -Wl,-Bsymbolic -Wl,--no-undefined)

  # Matvec version 3 without a GPU: the kernels' per-lane functions (mv3.cuh) compiled for the
  # host as their twin, against the references; the performance model and dispatch table.
  # -ffp-contract=off: the twin's sums must not be fused where the kernels' are not.
  add_executable(test_cuda_mv3 ${CMAKE_SOURCE_DIR}/tests/cuda/test_mv3.cpp ${CMAKE_SOURCE_DIR}/tests/harness.c
    ${CMAKE_SOURCE_DIR}/src/backend/cuda/mv3_model.c)
  set_target_properties(test_cuda_mv3 PROPERTIES CXX_STANDARD 17)
  target_include_directories(test_cuda_mv3 PRIVATE ${IL_INCLUDES} ${CMAKE_SOURCE_DIR}/tests)
  target_include_directories(test_cuda_mv3 SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(test_cuda_mv3 PRIVATE -ffp-contract=off
    $<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter>)
  target_link_libraries(test_cuda_mv3 PRIVATE inferlab_static)
  add_test(NAME test_cuda_mv3 COMMAND test_cuda_mv3)
  set_tests_properties(test_cuda_mv3 PROPERTIES LABELS "quick;gpu" TIMEOUT 300)

  # The matvec tournament scripts/gpu-check.sh runs on a device (its twin check needs mv3.cuh).
  add_executable(bench_cuda_mv3 ${CMAKE_SOURCE_DIR}/bench/bench_cuda_mv3.cpp ${CMAKE_SOURCE_DIR}/src/backend/cuda/mv3_model.c)
  set_target_properties(bench_cuda_mv3 PROPERTIES CXX_STANDARD 17)
  target_include_directories(bench_cuda_mv3 PRIVATE ${IL_INCLUDES})
  target_include_directories(bench_cuda_mv3 SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(bench_cuda_mv3 PRIVATE -ffp-contract=off $<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter>)
  target_link_libraries(bench_cuda_mv3 PRIVATE inferlab_static)
  add_dependencies(bench_cuda_mv3 inferlab_cuda)

  # Static checks of version 3's SASS (registers, no local memory, 16-byte loads, no byte loads,
  # dp4a): cuobjdump and nvdisasm from the toolkit or PyPI (nvidia-cuda-cuobjdump,
  # nvidia-cuda-nvdisasm); without them the test skips, saying so.
  # One architecture keeps it to seconds: sm_90 (the device the issue measures) when built.
  set(il_sass_arch "")
  if("90" IN_LIST il_archs_num)
    set(il_sass_arch --arch sm_90)
  endif()
  if(IL_PYTHON3)
    # matvec3.cu's object (both kernels it checks live there), not the whole module: a quarter
    # of the disassembly
    add_test(NAME test_cuda_sass COMMAND ${IL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/cuda/sass_check.py
      ${il_sass_arch} "$<FILTER:$<TARGET_OBJECTS:inferlab_cuda>,INCLUDE,matvec3\\.cu>" COMMAND_EXPAND_LISTS)
    set_tests_properties(test_cuda_sass PROPERTIES SKIP_RETURN_CODE 77 LABELS "quick;gpu" TIMEOUT 600)
  endif()

  # Tests and benchmarks load the module from their own directory: build it with them.
  function(il_cuda_wire_targets)
    file(GLOB il_t ${CMAKE_SOURCE_DIR}/tests/test_*.c ${CMAKE_SOURCE_DIR}/bench/bench_*.c)
    foreach(t ${il_t})
      get_filename_component(name ${t} NAME_WE)
      if(TARGET ${name})
        add_dependencies(${name} inferlab_cuda)
      endif()
    endforeach()
    add_dependencies(inferlab inferlab_cuda)
    # The glue end to end on the fake module: the op test, the engine test, the module test.
    foreach(t test_backend_ops test_cuda_engine test_cuda_module test_cuda_glue test_cuda_graph)
      if(TARGET ${t})
        add_dependencies(${t} inferlab_cuda_fake)
        add_test(NAME ${t}_fakecuda COMMAND ${t})
        set_tests_properties(${t}_fakecuda PROPERTIES LABELS "quick;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300
          ENVIRONMENT "INFERLAB_CUDA_MODULE=$<TARGET_FILE:inferlab_cuda_fake>;IL_CLI=$<TARGET_FILE:inferlab>;IL_SRC=${CMAKE_SOURCE_DIR}")
      endif()
    endforeach()
    # Tensor parallelism's NCCL path end to end: two fake devices, the fake libnccl.
    if(TARGET test_tp AND TARGET il_fake_nccl)
      add_dependencies(test_tp inferlab_cuda_fake il_fake_nccl)
      add_test(NAME test_tp_fakecuda COMMAND test_tp)
      set_tests_properties(test_tp_fakecuda PROPERTIES LABELS "quick;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300
        ENVIRONMENT "INFERLAB_CUDA_MODULE=$<TARGET_FILE:inferlab_cuda_fake>;FAKE_CUDA_DEVICES=2;INFERLAB_NCCL_LIB=$<TARGET_FILE:il_fake_nccl>")
    endif()
    # The `cuda` cases of three engine tests, each on the fake module (NAME_fakecuda) and on a
    # device (NAME_cuda, which skips without one): the prefix cache's logits against a run from
    # scratch (test_prefix_cache.c), constrained generation (test_grammar.c), and speculative
    # decoding in continuous batching (test_spec.c: few lanes on the fake module, whose host
    # kernels are slow; the full chi-square count on a device).
    foreach(il_dev_case prefix_cache:cuda grammar:cuda spec:cuda_full)
      string(REPLACE ":" ";" il_dev_case "${il_dev_case}")
      list(GET il_dev_case 0 il_n)
      list(GET il_dev_case 1 il_dev_args)
      string(REPLACE "_" ";" il_dev_args "${il_dev_args}")
      if(TARGET test_${il_n})
        add_dependencies(test_${il_n} inferlab_cuda_fake)
        add_test(NAME test_${il_n}_fakecuda COMMAND test_${il_n} cuda)
        set_tests_properties(test_${il_n}_fakecuda PROPERTIES LABELS "quick;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300
          ENVIRONMENT "INFERLAB_CUDA_MODULE=$<TARGET_FILE:inferlab_cuda_fake>")
        add_test(NAME test_${il_n}_cuda COMMAND test_${il_n} ${il_dev_args})
        set_tests_properties(test_${il_n}_cuda PROPERTIES LABELS "quick;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER CALL il_cuda_wire_targets)
endif()
