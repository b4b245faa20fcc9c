// A buffer's key, the one name every file, record and message uses for it: (cluster, job id,
// incarnation) for a job's buffer, (cluster, persistent name) for a persistent one. Its text
// form, its parsing, and the rules for the names and ids it is made of.
#pragma once

#include <cstdint>
#include <string>

namespace bbkit {

enum class BufferKind { job, persistent };

// (cluster, job id, incarnation) or (cluster, persistent name).
struct BufferKey {
    std::string cluster;
    std::uint64_t job_id = 0;
    std::uint32_t incarnation = 0;
    std::string name;  // non-empty exactly for persistent buffers

    static BufferKey job(std::string cluster, std::uint64_t job_id, std::uint32_t incarnation);
    // Throws Error(data) when `name` is not a valid persistent buffer name.
    static BufferKey persistent(std::string cluster, std::string name);

    BufferKind kind() const { return name.empty() ? BufferKind::job : BufferKind::persistent; }
    // Used in file names (env/<key>.env, run/<key>.lock): "main.42.1", "main.p.alpha".
    std::string str() const;
    // The directory a new buffer gets, relative to its pool: the whole key, cluster first, then
    // 16 random hex digits ("job/main.42.1.<hex>", "persistent/main.alpha.<hex>"), so that
    // nobody can name another user's buffer directory, nor test whether it exists (bbkit(7),
    // SECURITY). A new name at each call; a record keeps the one it was created with (older
    // records have none of the random part, or not even the cluster).
    std::string new_directory() const;

    bool operator==(const BufferKey& other) const;
    bool operator!=(const BufferKey& other) const { return !(*this == other); }
};

// The random part new_directory() ends an entry of job/ or persistent/ with.
constexpr std::size_t directory_token_digits = 16;
// An entry of job/ or persistent/ without that random part ("main.42.1" for
// "main.42.1.<hex>"); an entry without one (older records) as it is.
std::string without_directory_token(const std::string& entry);

// Inverse of BufferKey::str(). Throws Error(data) naming `text`.
BufferKey parse_buffer_key(const std::string& text);

// Persistent names: 1 to 64 letters, digits, '_' and '-', not starting with a digit (Slurm
// reserves numeric names for job buffers) or '-'. Throws Error(data) naming the name. The one
// rule for every tool and the directive parser.
void check_persistent_name(const std::string& name);

// A Slurm job id (also an array job or task id) as text: digits only, at most 2^63-1, so it is
// stored as it was given. Throws Error(usage) naming `what` ("job id") otherwise.
std::uint64_t parse_job_id(const std::string& text, const std::string& what = "job id");

}  // namespace bbkit
