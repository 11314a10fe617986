# Tokenizer: the byte-level BPE pre-tokenizers (src/model/pretok.c) match Unicode categories with PCRE2
# (Debian: libpcre2-dev), found through pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(IL_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
target_link_libraries(inferlab_obj PRIVATE PkgConfig::IL_PCRE2)
target_link_libraries(inferlab_static PUBLIC PkgConfig::IL_PCRE2)
target_link_libraries(inferlab_shared PRIVATE PkgConfig::IL_PCRE2)
