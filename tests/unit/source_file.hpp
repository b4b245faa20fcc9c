// A file of the source tree that a unit test reads (the example configuration, a man page, the
// library's sources, the case tables in tests/data).
#pragma once

#include <cstdlib>
#include <string>

namespace bbkit::unit {

// Under $BBKIT_SOURCE_DIR when it is set (tests/unit-as-user hands a copy to a user who may not
// read the checkout), else in the tree this binary was built from.
inline std::string source_file(const std::string& relative) {
    const char* dir = std::getenv("BBKIT_SOURCE_DIR");
    return std::string(dir != nullptr && *dir != '\0' ? dir : BBKIT_SOURCE_DIR) + "/" + relative;
}

}  // namespace bbkit::unit
