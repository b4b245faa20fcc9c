#include "bbkit/audit.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {
namespace {

std::string now_iso8601() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// Who ran the tool through sudo, when sudo did: root acts for them.
std::string sudo_caller() {
    const char* uid = std::getenv("SUDO_UID");
    if (uid == nullptr)
        return "";
    const char* user = std::getenv("SUDO_USER");
    return " sudo_uid=" + printable(uid) + (user ? " sudo_user=" + printable(user) : "");
}

// gethostname(), printable; "?" when it fails.
std::string host_name() {
    char host[HOST_NAME_MAX + 1] = {};
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
        return "?";
    return printable(host);
}

}  // namespace

// The same record for syslog (journald reads it): identifier "bbkit", facility authpriv, so a
// site's log collection keeps who did what even when the state directory is lost. syslog adds
// the time and the pid; without a syslog socket nothing is sent, and nothing fails.
void to_syslog(const std::string& record) {
    openlog("bbkit", LOG_PID, LOG_AUTHPRIV);
    syslog(LOG_NOTICE, "%s", record.c_str());
    closelog();
}

void audit(const std::string& state_dir, const std::string& who, const std::string& action,
           const std::string& details) {
    const std::string caller = "uid=" + std::to_string(getuid()) + sudo_caller();
    const std::string what = "tool=" + who + " action=" + action + " " + printable(details);
    to_syslog(caller + " " + what);
    const std::string path = state_dir + "/log/audit.log";
    Fd fd;
    try {
        // log/ is the state owner's: nothing it plants there is written through.
        fd = open_state_file(state_dir, "log/audit.log", O_WRONLY | O_APPEND | O_CREAT, 0600);
    } catch (const Error& e) {
        spdlog::warn("cannot write the audit log {}: {}", path, e.what());
        return;
    }
    // The host with the pid: controllers that share the state directory write one log
    // (bbkit(7), STATE DIRECTORY, "Controller failover"); syslog names the host itself.
    const std::string line = now_iso8601() + " " + caller + " host=" + host_name() +
                             " pid=" + std::to_string(getpid()) + " " + what + "\n";
    if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        spdlog::warn("cannot write the audit log {}: {}", path, std::strerror(errno));
}

}  // namespace bbkit
