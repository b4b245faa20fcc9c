// Fuzz target for lib/bbkit/directive: parse_request, then check_slurm_view as the tools ask it,
// over a job script, --bb text (directives or the short form) or --bbf contents, against a fixed
// configuration, in standalone and Slurm mode, with and without a job context. It must either
// return a request or throw bbkit::Error; a fully resolved request must survive canonical_lines
// (bb-parse --emit-script) unchanged.
//
// The first input byte chooses the variant: bits 0-1 the text (script, --bb, --bbf, script with
// an empty --bb), bit 2 Slurm mode, bit 3 a known job (id, array, name, working directory).
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bbkit/config.hpp"
#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"
#include "bbkit/slurm_view.hpp"

namespace {

void check(bool condition) {
    if (!condition)
        std::abort();
}

const bbkit::Config& config(bool slurm) {
    static const bbkit::Config standalone = bbkit::parse_config(R"(
state_dir = "/var/lib/bbkit"
default_pool = "nvme"
flags = ["EnablePersistent"]
[[pool]]
name = "nvme"
path = "/bb/nvme"
capacity = "5800GiB"
granularity = "200GiB"
[[pool]]
name = "small"
path = "/bb/small"
capacity = "4KiB"
granularity = "1KiB"
)",
                                                                "fuzz.toml");
    static const bbkit::Config slurm_mode = [] {
        bbkit::Config c = standalone;
        c.mode = bbkit::Mode::slurm;
        c.default_pool.reset();
        return c;
    }();
    return slurm ? slurm_mode : standalone;
}

bbkit::JobContext job(bool known) {
    bbkit::JobContext context;
    if (!known)
        return context;
    context.job_id = "1234";
    context.array_job_id = "1200";
    context.array_task_id = "34";
    context.workdir = "/home/alice/run 1";
    context.job_name = "sim \"x\" %j";  // a name must never inject anything
    return context;
}

bool same(const bbkit::StageDirective& a, const bbkit::StageDirective& b) {
    return a.type == b.type && a.source == b.source && a.destination == b.destination &&
           a.buffer == b.buffer && a.unresolved == b.unresolved;  // lines move: not compared
}

template <typename T, typename Same>
bool same_list(const std::vector<T>& a, const std::vector<T>& b, Same same_item) {
    if (a.size() != b.size())
        return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (!same_item(a[i], b[i]))
            return false;
    return true;
}

bool same(const bbkit::Request& a, const bbkit::Request& b) {
    if (a.has_directive != b.has_directive || a.job_buffer.has_value() != b.job_buffer.has_value())
        return false;
    if (a.job_buffer) {
        const auto& x = *a.job_buffer;
        const auto& y = *b.job_buffer;
        if (x.pool != y.pool || x.capacity != y.capacity || x.allocated != y.allocated ||
            x.access != y.access || x.type != y.type)
            return false;
    }
    const auto same_stage = [](const auto& x, const auto& y) { return same(x, y); };
    return same_list(a.stage_in, b.stage_in, same_stage) &&
           same_list(a.stage_out, b.stage_out, same_stage) &&
           same_list(a.create, b.create,
                     [](const auto& x, const auto& y) {
                         return x.name == y.name && x.pool == y.pool && x.capacity == y.capacity &&
                                x.allocated == y.allocated && x.access == y.access &&
                                x.type == y.type;
                     }) &&
           same_list(a.destroy, b.destroy,
                     [](const auto& x, const auto& y) {
                         return x.name == y.name && x.hurry == y.hurry;
                     }) &&
           same_list(a.use, b.use, [](const auto& x, const auto& y) { return x.name == y.name; });
}

bool resolved(const bbkit::Request& request) {
    for (const auto* stages : {&request.stage_in, &request.stage_out})
        for (const bbkit::StageDirective& s : *stages)
            if (s.unresolved)
                return false;
    return true;
}

void check_request(const bbkit::Request& request, const bbkit::Config& config) {
    if (request.job_buffer) {
        const bbkit::PoolConfig* pool = config.find_pool(request.job_buffer->pool);
        check(pool != nullptr);
        check(request.job_buffer->capacity > 0 &&
              request.job_buffer->allocated >= request.job_buffer->capacity &&
              request.job_buffer->allocated <= pool->capacity);
    }
    for (const auto* stages : {&request.stage_in, &request.stage_out})
        for (const bbkit::StageDirective& s : *stages) {
            // No path past PATH_MAX - 1 bytes is ever accepted (bb-parse(1), LIMITS).
            check(s.source.size() < PATH_MAX && s.destination.size() < PATH_MAX);
            const std::string& inside = stages == &request.stage_in ? s.destination : s.source;
            // Inside the buffer: relative, normalized, never climbing out.
            check(inside.empty() || (inside.front() != '/' && inside.back() != '/'));
            for (std::size_t begin = 0; begin <= inside.size();) {
                std::size_t end = inside.find('/', begin);
                if (end == std::string::npos)
                    end = inside.size();
                const std::string part = inside.substr(begin, end - begin);
                check(inside.empty() || (!part.empty() && part != "." && part != ".."));
                begin = end + 1;
            }
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    const unsigned variant = data[0];
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    const bbkit::Config& cfg = config(variant & 4);
    const bbkit::JobContext context = job(variant & 8);

    bbkit::RequestText input;
    switch (variant & 3) {
        case 0:
            input.script = text;
            break;
        case 1:
            input.bb = text;
            break;
        case 2:
            input.bbf = text;
            break;
        default:
            input.script = text;
            input.bb = "";
            break;
    }
    bbkit::Request request;
    try {
        request = bbkit::parse_request(input, cfg, context);
        bbkit::check_slurm_view(input, request, cfg);
    } catch (const bbkit::Error& e) {
        check(e.code() == bbkit::ExitCode::data || e.code() == bbkit::ExitCode::no_input ||
              e.code() == bbkit::ExitCode::no_perm);
        check(std::string(e.what()).find('\n') == std::string::npos);  // one-line messages
        return 0;
    }
    check_request(request, cfg);
    if (!resolved(request))
        return 0;  // still holds symbols Slurm replaces later: not yet in its final form

    std::string script = "#!/bin/sh\n";
    for (const std::string& line : bbkit::canonical_lines(request, cfg))
        script += line + "\n";
    bbkit::RequestText again;
    again.script = script;
    bbkit::Request reparsed;
    try {
        reparsed = bbkit::parse_request(again, cfg, context);
        bbkit::check_slurm_view(again, reparsed, cfg);
    } catch (const bbkit::Error&) {
        std::abort();  // canonical lines that do not parse
    }
    check(same(request, reparsed));
    return 0;
}
