# doctor: test doubles for the NVIDIA driver libraries. The doctor and monitor load
# libnvidia-ml / libcuda with dlopen; the tests point them at these fakes, which answer from
# a scenario file (tests/fakes/fake_scenario.h). Nothing here links the real driver.
foreach(fake nvml cuda)
  add_library(il_fake_${fake} SHARED ${CMAKE_SOURCE_DIR}/tests/fakes/fake_${fake}.c)
  # the fakes define the driver's own C entry points, whose headers we do not include
  target_compile_options(il_fake_${fake} PRIVATE ${IL_WARN} -Wno-missing-prototypes)
  set_target_properties(il_fake_${fake} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fakes
    C_VISIBILITY_PRESET default)
endforeach()

# The test executables are defined after the parts are included, so their environment and
# dependencies are attached at the end of this directory's processing.
function(il_doctor_wire_tests)
  file(GLOB doctor_tests ${CMAKE_SOURCE_DIR}/tests/test_doctor*.c ${CMAKE_SOURCE_DIR}/tests/test_lab_watch.c)
  foreach(t ${doctor_tests})
    get_filename_component(name ${t} NAME_WE)
    if(TARGET ${name})
      add_dependencies(${name} il_fake_nvml il_fake_cuda)
      set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
        "IL_FAKE_NVML_LIB=$<TARGET_FILE:il_fake_nvml>"
        "IL_FAKE_CUDA_LIB=$<TARGET_FILE:il_fake_cuda>")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL il_doctor_wire_tests)

# doctor's parsers (jansson for daemon.json, libyaml for CDI specs) are required dependencies,
# found and linked in CMakeLists.txt.
