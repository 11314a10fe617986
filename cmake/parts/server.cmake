# Server: `inferlab serve` needs libmicrohttpd (HTTP; optional, found in CMakeLists.txt) and
# jansson (JSON; required). Without libmicrohttpd the build goes on without the HTTP layer:
# src/server/template.c and the scheduler still build (for `chat`), and `inferlab serve` says
# how to get the server.
set(IL_SERVER_NET_SOURCES
  ${CMAKE_SOURCE_DIR}/src/server/server.c
  ${CMAKE_SOURCE_DIR}/src/server/api.c)

# The chat page: src/server/page.html embedded as bytes (no build step for the page itself).
set(IL_PAGE_HTML ${CMAKE_SOURCE_DIR}/src/server/page.html)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${IL_PAGE_HTML})
file(READ ${IL_PAGE_HTML} IL_PAGE_HEX HEX)
string(LENGTH "${IL_PAGE_HEX}" IL_PAGE_HEX_LEN)
math(EXPR IL_PAGE_LEN "${IL_PAGE_HEX_LEN} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," IL_PAGE_BYTES "${IL_PAGE_HEX}")
file(WRITE ${CMAKE_BINARY_DIR}/generated/il_page_data.c.tmp
  "/* generated from src/server/page.html by cmake/parts/server.cmake */\n"
  "#include <stddef.h>\n"
  "static const unsigned char il__page[] = {${IL_PAGE_BYTES} 0};\n"
  "const char *const il_page_html = (const char *)il__page;\n"
  "const size_t il_page_html_len = ${IL_PAGE_LEN};\n")
configure_file(${CMAKE_BINARY_DIR}/generated/il_page_data.c.tmp ${CMAKE_BINARY_DIR}/generated/il_page_data.c COPYONLY)

if(IL_MHD_FOUND)
  message(STATUS "inferlab: building the server (libmicrohttpd ${IL_MHD_VERSION}, jansson ${IL_JANSSON_VERSION})")
  target_sources(inferlab_obj PRIVATE ${CMAKE_BINARY_DIR}/generated/il_page_data.c)
  target_link_libraries(inferlab_obj PRIVATE PkgConfig::IL_MHD)
  target_link_libraries(inferlab_static PUBLIC PkgConfig::IL_MHD)
  target_link_libraries(inferlab_shared PRIVATE PkgConfig::IL_MHD)
  target_compile_definitions(inferlab PRIVATE IL_HAVE_SERVER=1)
  set(IL_HAVE_SERVER 1)
else()
  message(STATUS "inferlab: libmicrohttpd not found: building WITHOUT `inferlab serve` "
                 "(install libmicrohttpd-dev, or run scripts/deps.sh)")
  set_source_files_properties(${IL_SERVER_NET_SOURCES} PROPERTIES HEADER_FILE_ONLY ON)
  set(IL_HAVE_SERVER 0)
endif()

enable_testing()
# Integration tests: each starts `inferlab serve` on a free loopback port (tests/python/).
if(IL_PYTHON3)
  file(GLOB IL_PY_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/python/test_*.py)
  foreach(t ${IL_PY_TESTS})
    get_filename_component(name ${t} NAME_WE)
    add_test(NAME py_${name} COMMAND ${IL_PYTHON3} ${t})
    set_tests_properties(py_${name} PROPERTIES LABELS python SKIP_RETURN_CODE 77 TIMEOUT 300
      ENVIRONMENT "IL_CLI=$<TARGET_FILE:inferlab>;IL_SRC=${CMAKE_SOURCE_DIR};IL_HAVE_SERVER=${IL_HAVE_SERVER};IL_FIXTURES=${CMAKE_SOURCE_DIR}/../shared/fixtures")
  endforeach()
  # The same llama.cpp comparison on the downloaded models (Gemma 3 270M: minutes on two cores),
  # apart from the builtin models' seconds so that the default run keeps its time budget.
  if(TEST py_test_llamacpp_ref)
    set_property(TEST py_test_llamacpp_ref APPEND PROPERTY ENVIRONMENT "IL_LLAMACPP_SOURCES=builtin")
    add_test(NAME py_test_llamacpp_ref_model COMMAND ${IL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/python/test_llamacpp_ref.py)
    set_tests_properties(py_test_llamacpp_ref_model PROPERTIES LABELS "python;model" SKIP_RETURN_CODE 77 TIMEOUT 1800
      ENVIRONMENT "IL_CLI=$<TARGET_FILE:inferlab>;IL_SRC=${CMAKE_SOURCE_DIR};IL_FIXTURES=${CMAKE_SOURCE_DIR}/../shared/fixtures;IL_LLAMACPP_SOURCES=cache")
  endif()
endif()
