// The exit code a library call fails with (ExitCode::ok when it does not), and its message.
#pragma once

#include <functional>
#include <string>

#include "bbkit/error.hpp"

namespace bbkit {

inline ExitCode code_of(const std::function<void()>& body, std::string* message = nullptr) {
    try {
        body();
    } catch (const Error& error) {
        if (message != nullptr)
            *message = error.what();
        return error.code();
    }
    return ExitCode::ok;
}

}  // namespace bbkit
