/* core/version: the library's version string, from the CMake project version. */
#include "inferlab.h"

#include "il_build_info.h"

const char *il_version(void) { return IL_VERSION_STRING; }
