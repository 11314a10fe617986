# learn: `inferlab learn`'s concept texts (docs/learn/LANG/NN-name.md, one file per concept and
# language, so a translator edits one concept in one place) embedded into the library as a
# generated C file; and the simulated NVIDIA driver libraries (tests/fakes) the doctor lessons
# load, built with inferlab and installed beside it (lib/inferlab/learn/, where lab/machine
# looks for them relative to the binary).
file(GLOB IL_LEARN_TEXTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/learn/*/*.md)
set(IL_LEARN_C ${CMAKE_BINARY_DIR}/generated/il_learn_texts.c)
add_custom_command(OUTPUT ${IL_LEARN_C}
  COMMAND ${CMAKE_COMMAND} -DOUT=${IL_LEARN_C} -DDIR=${CMAKE_SOURCE_DIR}/docs/learn -P ${CMAKE_SOURCE_DIR}/cmake/learn_embed.cmake
  DEPENDS ${IL_LEARN_TEXTS} ${CMAKE_SOURCE_DIR}/cmake/learn_embed.cmake
  COMMENT "Embedding the inferlab learn texts")
target_sources(inferlab_obj PRIVATE ${IL_LEARN_C})
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/lab/machine.c PROPERTIES
  COMPILE_DEFINITIONS "IL_LEARN_FAKES_REL=\"../${CMAKE_INSTALL_LIBDIR}/inferlab/learn\"")
add_dependencies(inferlab il_fake_nvml il_fake_cuda)
install(TARGETS il_fake_nvml il_fake_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/inferlab/learn)

# The learn tests need the simulated libraries and the binary built (their labels and time
# limits are declared in tests/tests.cmake).
function(il_learn_wire_tests)
  file(GLOB learn_tests ${CMAKE_SOURCE_DIR}/tests/test_learn*.c)
  foreach(t ${learn_tests})
    get_filename_component(name ${t} NAME_WE)
    if(TARGET ${name})
      add_dependencies(${name} il_fake_nvml il_fake_cuda inferlab)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL il_learn_wire_tests)
