// The exit code a library call fails with (ExitCode::ok when it does not), and its message.
#pragma once

#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

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

// code_of in a child that has first become `uid` and `gid` (no other groups), as a non-root
// state owner or user runs; the message comes back through a pipe, since nothing a child
// asserts reaches gtest. Needs root; a child that cannot switch gives 70 and says so.
inline ExitCode code_of_as(uid_t uid, gid_t gid, const std::function<void()>& body,
                           std::string* message = nullptr) {
    int fds[2];
    if (pipe(fds) != 0)
        return ExitCode::software;
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        std::string text = "cannot become uid " + std::to_string(uid);
        ExitCode code = ExitCode::software;
        if (setgroups(0, nullptr) == 0 && setresgid(gid, gid, gid) == 0 &&
            setresuid(uid, uid, uid) == 0) {
            text.clear();
            code = code_of(body, &text);
        }
        (void)!write(fds[1], text.data(), text.size());
        _exit(static_cast<int>(code));
    }
    close(fds[1]);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        text.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (message != nullptr)
        *message = text;
    return static_cast<ExitCode>(WIFEXITED(status) ? WEXITSTATUS(status) : 128);
}

}  // namespace bbkit
