#include "bbkit/file_system.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>

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
constexpr KnownFileSystem known[] = {
    {0x6969, "nfs", true},        {0x517B, "smb", true},        {0xFF534D42, "cifs", true},
    {0xFE534D42, "smb2", true},   {0x0BD00BD0, "lustre", true}, {0x47504653, "gpfs", true},
    {0x00C36400, "ceph", true},   {0x01161970, "gfs2", true},   {0x7461636F, "ocfs2", true},
    {0x19830326, "beegfs", true}, {0x01021997, "9p", true},     {0x5346414F, "afs", true},
    {0x6B414653, "afs", true},    {0x73757245, "coda", true},   {0x20030528, "orangefs", true},
    {0x65735546, "fuse", true},  // sshfs, GlusterFS, ...: how it locks is the daemon's
    {0xEF53, "ext4", false},      {0x58465342, "xfs", false},   {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false}, {0x2FC12FC1, "zfs", false},   {0x794C7630, "overlayfs", false},
    {0xF2F52010, "f2fs", false},
};

// The option of the NFS mount of device `dev` that keeps locks on this host (nfs(5): nolock,
// local_lock=all|flock|posix), "" when none does or the mount is not found. mountinfo's fields:
// id, parent, major:minor, root, mount point, options, optional fields, "-", type, source,
// super options; NFS prints its lock options among the super options.
std::string local_lock_option(dev_t dev) {
    std::ifstream mountinfo("/proc/self/mountinfo");
    const std::string device = std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
    std::string line;
    while (std::getline(mountinfo, line)) {
        std::istringstream fields(line);
        std::string id, parent, numbers;
        if (!(fields >> id >> parent >> numbers) || numbers != device)
            continue;
        const std::size_t dash = line.find(" - ");
        if (dash == std::string::npos)
            continue;
        std::istringstream tail(line.substr(dash + 3));
        std::string type, source, options;
        tail >> type >> source >> options;
        std::istringstream each(options);
        std::string option;
        while (std::getline(each, option, ','))
            if (option == "nolock" ||
                (starts_with(option, "local_lock=") && option != "local_lock=none"))
                return option;
    }
    return "";
}

}  // namespace

FileSystemKind file_system_kind_of_magic(unsigned long magic) {
    for (const KnownFileSystem& fs : known)
        if (fs.magic == magic)
            return {fs.name, fs.shared, ""};
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%lx", magic);
    return {hex, false, ""};
}

FileSystemKind file_system_kind(const std::string& path) {
#ifdef BBKIT_FAULT_INJECTION
    if (const char* forced = std::getenv("BBKIT_TEST_SHARED_FS"); forced != nullptr && *forced)
        return {forced, true, ""};
#endif
    struct statfs st {};
    if (::statfs(path.c_str(), &st) != 0)
        throw system_error("cannot tell the file system of " + path, errno);
    // f_type is a signed word on some ABIs: compare its low 32 bits.
    FileSystemKind kind =
        file_system_kind_of_magic(static_cast<unsigned long>(st.f_type) & 0xFFFFFFFFUL);
    struct stat where {};
    if (kind.name == "nfs" && ::stat(path.c_str(), &where) == 0)
        kind.local_locks = local_lock_option(where.st_dev);
    return kind;
}

}  // namespace bbkit
