# cuda_attn: host-side checks of the CUDA backend's flash attention kernels (after cuda.cmake,
# whose il_cuda_build and fake module they extend).
#
#   test_cuda_attn_twin   the kernels' host twins against the scalar CPU reference (no GPU)
#   test_cuda_attn_device the kernels on a GPU against the twins (skips without one; its
#                         _fakecuda run checks the program itself on the fake module)
#   fake module           the flash launchers as those twins (tests/fakes/fake_cuda_attn.cpp),
#                         so test_backend_ops_fakecuda runs `flash` through the glue
if(il_cuda_build)
  target_sources(inferlab_cuda_fake PRIVATE ${CMAKE_SOURCE_DIR}/tests/fakes/fake_cuda_attn.cpp)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/tests/fakes/fake_cuda_attn.cpp PROPERTIES COMPILE_OPTIONS -ffp-contract=off)

  # A C++ test over the kernels' headers, linked with the library; the twins' float operations
  # must stay unfused on the host, as they are on the device.
  function(il_cuda_attn_test name)
    add_executable(${name} ${CMAKE_SOURCE_DIR}/tests/${name}.cpp ${CMAKE_SOURCE_DIR}/tests/harness.c)
    set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
    target_include_directories(${name} PRIVATE ${IL_INCLUDES} ${CMAKE_SOURCE_DIR}/tests)
    target_include_directories(${name} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
    target_compile_options(${name} PRIVATE -ffp-contract=off $<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>)
    target_link_libraries(${name} PRIVATE inferlab_static)
  endfunction()

  il_cuda_attn_test(test_cuda_attn_twin)
  add_test(NAME test_cuda_attn_twin COMMAND test_cuda_attn_twin)
  set_tests_properties(test_cuda_attn_twin PROPERTIES LABELS "quick;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300)

  il_cuda_attn_test(test_cuda_attn_device)
  add_dependencies(test_cuda_attn_device inferlab_cuda inferlab_cuda_fake)
  add_test(NAME test_cuda_attn_device COMMAND test_cuda_attn_device)
  add_test(NAME test_cuda_attn_device_fakecuda COMMAND test_cuda_attn_device)
  set_tests_properties(test_cuda_attn_device test_cuda_attn_device_fakecuda PROPERTIES LABELS "quick;gpu"
    SKIP_RETURN_CODE 77 TIMEOUT 300)
  set_tests_properties(test_cuda_attn_device_fakecuda PROPERTIES
    ENVIRONMENT "INFERLAB_CUDA_MODULE=$<TARGET_FILE:inferlab_cuda_fake>")
endif()

# Static SASS checks of the flash kernels in the built module (skip without cuobjdump).
if(il_cuda_build)
  if(IL_PYTHON3)
    # the two kernel files' objects, not the whole module: a quarter of the disassembly
    add_test(NAME sass_attn_check COMMAND ${IL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/sass_attn_check.py
      "$<FILTER:$<TARGET_OBJECTS:inferlab_cuda>,INCLUDE,attn_f[ad]\\.cu>" COMMAND_EXPAND_LISTS)
    set_tests_properties(sass_attn_check PROPERTIES LABELS "quick;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300)
  endif()
endif()
