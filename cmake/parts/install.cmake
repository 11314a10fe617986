# install: `cmake --install build/release --prefix DIR` puts the inferlab binary in bin/, the
# shared library (libinferlab.so.MAJOR, exporting only inferlab.h's IL_API functions) and the
# static archive in lib/, the CUDA module beside the shared library, include/inferlab.h, a
# pkg-config file (lib/pkgconfig/inferlab.pc) and a CMake package (lib/cmake/inferlab:
# find_package(inferlab) -> inferlab::inferlab). tests/install_check.sh builds a program
# against the installed tree both ways and runs it (ctest: install_tree).
include(CMakePackageConfigHelpers)

install(TARGETS inferlab RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS inferlab_shared EXPORT inferlabTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS inferlab_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/inferlab.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET inferlab_cuda)
  install(TARGETS inferlab_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# pkg-config: the shared library needs nothing on the command line; --static lists what the
# archive was linked with (the optional parts only when they were built). Deferred to the end
# of configuration, when every part has decided what it builds.
function(il__install_pkgconfig)
  set(IL_PC_LIBS_PRIVATE "-lm -lpthread ${CMAKE_DL_LIBS}")
  set(IL_PC_REQUIRES_PRIVATE "")
  foreach(pair "IL_PCRE2=libpcre2-8" "IL_MHD=libmicrohttpd" "IL_JANSSON=jansson" "IL_YAML=yaml-0.1")
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 0 var)
    list(GET pair 1 mod)
    if(${var}_FOUND)
      string(APPEND IL_PC_REQUIRES_PRIVATE " ${mod}")
    endif()
  endforeach()
  string(STRIP "${IL_PC_REQUIRES_PRIVATE}" IL_PC_REQUIRES_PRIVATE)
  file(RELATIVE_PATH IL_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  configure_file(${CMAKE_SOURCE_DIR}/cmake/install/inferlab.pc.in ${CMAKE_BINARY_DIR}/generated/inferlab.pc @ONLY)
endfunction()
cmake_language(DEFER CALL il__install_pkgconfig)
install(FILES ${CMAKE_BINARY_DIR}/generated/inferlab.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(EXPORT inferlabTargets NAMESPACE inferlab:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/inferlab)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/install/inferlabConfig.cmake.in
  ${CMAKE_BINARY_DIR}/generated/inferlabConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/inferlab)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/generated/inferlabConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/generated/inferlabConfig.cmake
  ${CMAKE_BINARY_DIR}/generated/inferlabConfigVersion.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/inferlab)

# The installed tree, tested: install into the build tree, then build tests/install/example.c
# against it with pkg-config and with find_package, run both, and check the exported symbols.
if(PKG_CONFIG_EXECUTABLE)
  add_test(NAME install_tree COMMAND sh ${CMAKE_SOURCE_DIR}/tests/install_check.sh ${CMAKE_BINARY_DIR}
    ${CMAKE_SOURCE_DIR} ${CMAKE_C_COMPILER} ${CMAKE_COMMAND})
  set_tests_properties(install_tree PROPERTIES LABELS "slow" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
