#include "bbkit/file_system.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

struct KnownFileSystem {
    unsigned long magic;
    const char* name;
    bool shared;
};

// The magics as <linux/magic.h> and statfs(2) list them, and for the file systems outside the
// kernel tree (Lustre, GPFS, BeeGFS) as their clients report them. Shared: more than one host
// may open the same file, so locks and caches cross the network (bbkit(7), STATE DIRECTORY).
constexpr KnownFileSystem known_file_systems[] = {
    {0x6969, "nfs", true},
    {0x517B, "smb", true},
    {0xFF534D42, "cifs", true},
    {0xFE534D42, "smb2", true},
    {0x0BD00BD0, "lustre", true},
    {0x47504653, "gpfs", true},
    {0x00C36400, "ceph", true},
    {0x01161970, "gfs2", true},
    {0x7461636F, "ocfs2", true},
    {0x19830326, "beegfs", true},
    {0x01021997, "9p", true},
    {0x5346414F, "afs", true},
    {0x6B414653, "afs", true},
    {0x73757245, "coda", true},
    {0x20030528, "orangefs", true},
    {0x65735546, "fuse", true},  // sshfs, GlusterFS, ...: how it locks is the daemon's
    {0xEF53, "ext4", false},
    {0x58465342, "xfs", false},
    {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false},
    {0x2FC12FC1, "zfs", false},
    {0x794C7630, "overlayfs", false},
    {0xF2F52010, "f2fs", false},
    {0x52654973, "reiserfs", false},
    {0x3153464A, "jfs", false},
    {0xCA451A4E, "bcachefs", false},
    {0x3434, "nilfs", false},
    {0x858458F6, "ramfs", false},
};

FileSystemKind kind_named(const std::string& name, bool shared) {
    FileSystemKind kind;
    kind.name = name;
    kind.shared = shared;
    return kind;
}

// The mount options under which a file system's locks exclude only this host's processes
// (nfs(5): nolock, local_lock=all|flock|posix; Lustre: localflock, noflock; mount.cifs(8):
// nobrl).
bool lock_option_stays_local(const std::string& fs, const std::string& option) {
    if (fs == "nfs")
        return option == "nolock" ||
               (starts_with(option, "local_lock=") && option != "local_lock=none");
    if (fs == "lustre")
        return option == "localflock" || option == "noflock";
    if (fs == "cifs" || fs == "smb" || fs == "smb2")
        return option == "nobrl";
    return false;
}

// The file systems whose options say where their locks go: a mount of one that is not found
// is refused rather than trusted.
bool locks_by_options(const std::string& fs) {
    return fs == "nfs" || fs == "lustre" || fs == "cifs" || fs == "smb" || fs == "smb2";
}

// Shared file systems whose locking bbkit cannot judge: their daemon or mount decides (FUSE:
// sshfs keeps locks local; BeeGFS with tuneUseGlobalFileLocks=false, its default; 9p).
bool locks_unknowable(const std::string& fs) {
    return fs == "fuse" || fs == "beegfs" || fs == "9p";
}

}  // namespace

std::string local_lock_option(std::istream& mountinfo, const std::string& device,
                              const std::string& fs) {
    std::string line;
    while (std::getline(mountinfo, line)) {
        std::istringstream fields(line);
        std::string id, parent, numbers;
        if (!(fields >> id >> parent >> numbers) || numbers != device)
            continue;
        const std::size_t dash = line.find(" - ");
        if (dash == std::string::npos)
            continue;
        // After the separator: type, source, super options (NFS prints its lock options
        // there); the mount options are the sixth field before it.
        std::istringstream tail(line.substr(dash + 3));
        std::string type, source, super_options, root, point, mount_options;
        tail >> type >> source >> super_options;
        fields >> root >> point >> mount_options;
        for (const std::string* options : {&super_options, &mount_options}) {
            std::istringstream each(*options);
            std::string option;
            while (std::getline(each, option, ','))
                if (lock_option_stays_local(fs, option))
                    return option;
        }
        return "";
    }
    return "no mount of device " + device + " in /proc/self/mountinfo";
}

FileSystemKind file_system_kind_of_magic(unsigned long magic) {
    for (const KnownFileSystem& fs : known_file_systems)
        if (fs.magic == magic)
            return kind_named(fs.name, fs.shared);
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%lx", magic);
    FileSystemKind unknown = kind_named(hex, false);
    unknown.known = false;
    return unknown;
}

FileSystemKind file_system_kind(const std::string& path) {
    struct statfs st {};
    if (::statfs(path.c_str(), &st) != 0)
        throw system_error("cannot tell the file system of " + path, errno);
    // f_type is a signed word on some ABIs: compare its low 32 bits.
    FileSystemKind kind =
        file_system_kind_of_magic(static_cast<unsigned long>(st.f_type) & 0xFFFFFFFFUL);
#ifdef BBKIT_FAULT_INJECTION
    // Never for a caller another user started (sudo, a setuid bit): a test's own hook.
    if (const char* forced = std::getenv("BBKIT_TEST_SHARED_FS");
        forced != nullptr && *forced && getuid() == geteuid() && std::getenv("SUDO_UID") == nullptr)
        kind = kind_named(forced, true);
#endif
    if (locks_unknowable(kind.name)) {
        kind.locks_unknown = true;
        kind.local_locks =
            "locks that bbkit cannot judge (" + kind.name + "'s daemon or mount decides)";
    } else if (locks_by_options(kind.name)) {
        struct stat where {};
        if (::stat(path.c_str(), &where) != 0)
            throw system_error("cannot tell the file system of " + path, errno);
        std::ifstream mountinfo("/proc/self/mountinfo");
        kind.local_locks = local_lock_option(
            mountinfo,
            std::to_string(major(where.st_dev)) + ":" + std::to_string(minor(where.st_dev)),
            kind.name);
    }
    return kind;
}

}  // namespace bbkit
