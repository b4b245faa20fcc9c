#include "bbkit/job_nodes.hpp"

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <set>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

bool is_node_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

void check_node_name(const std::string& name) {
    const bool valid = !name.empty() && name.size() <= max_node_name && name[0] != '.' &&
                       name[0] != '_' && name[0] != '-' &&
                       std::all_of(name.begin(), name.end(), is_node_char);
    if (!valid)
        throw Error(ExitCode::data,
                    "invalid node name '" + printable(name.substr(0, max_node_name + 1)) +
                        "' (letters, digits, '.', '_', '-', starting with a letter or digit, at "
                        "most " +
                        std::to_string(max_node_name) + ")");
}

}  // namespace

JobNodes job_nodes(const std::string& node, const std::string& nodes) {
    check_node_name(node);
    JobNodes out;
    out.name = node;
    std::set<std::string_view> seen;
    bool found = false;
    std::uint32_t count = 0;
    std::size_t begin = 0;
    while (true) {
        const std::size_t comma = nodes.find(',', begin);
        const std::string name =
            nodes.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
        check_node_name(name);
        if (count == max_job_nodes)
            throw Error(ExitCode::data, "more than " + std::to_string(max_job_nodes) +
                                            " nodes in the job's node list");
        if (!seen.insert(std::string_view(nodes).substr(begin, name.size())).second)
            throw Error(ExitCode::data, "node '" + name + "' is twice in the job's node list");
        if (name == node) {
            out.index = count;
            found = true;
        }
        ++count;
        if (comma == std::string::npos)
            break;
        begin = comma + 1;
    }
    if (!found)
        throw Error(ExitCode::data, "node '" + node + "' is not in the job's node list");
    out.count = count;
    return out;
}

JobNodes this_host_alone() {
    char host[HOST_NAME_MAX + 1] = {};
    if (gethostname(host, sizeof host - 1) != 0)
        throw system_error("cannot read this host's name", errno);
    std::string name(host);
    name = name.substr(0, name.find('.'));
    check_node_name(name);
    return JobNodes{name, 0, 1};
}

std::string gathered_destination(const std::string& destination, StageType type,
                                 const std::string& node) {
    if (type == StageType::directory)
        return destination == "/" ? "/" + node : destination + "/" + node;
    const std::size_t slash = destination.rfind('/');
    return destination.substr(0, slash + 1) + node + destination.substr(slash);
}

}  // namespace bbkit
