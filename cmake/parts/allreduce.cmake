# allreduce: a fake libnccl (tests/fakes/fake_nccl.c) so test_allreduce runs the NCCL path of
# backend/allreduce (dlopen, the group, the error strings) without GPUs or NCCL installed.
add_library(il_fake_nccl SHARED ${CMAKE_SOURCE_DIR}/tests/fakes/fake_nccl.c)
# the fake defines NCCL's own C entry points, whose header we do not include
target_compile_options(il_fake_nccl PRIVATE ${IL_WARN} -Wno-missing-prototypes)
set_target_properties(il_fake_nccl PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fakes
  C_VISIBILITY_PRESET default)

function(il_allreduce_wire_tests)
  if(TARGET test_allreduce)
    add_dependencies(test_allreduce il_fake_nccl)
    set_property(TEST test_allreduce APPEND PROPERTY ENVIRONMENT "IL_FAKE_NCCL_LIB=$<TARGET_FILE:il_fake_nccl>")
  endif()
endfunction()
cmake_language(DEFER CALL il_allreduce_wire_tests)
