#include "bbkit/mover.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/job_nodes.hpp"
#include "bbkit/mover/common.hpp"
#include "bbkit/sources.hpp"
#include "bbkit/stage_plan.hpp"

namespace bbkit {

namespace {

std::string root_of(const StagePlan& plan, const StageDirective& stage) {
    if (stage.buffer.empty())
        return plan.job_root;
    const auto root = plan.persistent_roots.find(stage.buffer);
    if (root == plan.persistent_roots.end())
        throw Error(ExitCode::no_input,
                    "persistent buffer '" + stage.buffer + "' is not available to this job");
    return root->second;
}

// A transfer job's part (StagePlan::part), in either direction: its share of the line's
// files, by inode, into directories the other parts fill at the same time.
void set_part(MoveEntry& entry, const StagePlan& plan) {
    entry.shard_index = plan.part;
    entry.shard_count = plan.parts;
    entry.shard_by_inode = true;
    entry.shared_directories = true;
}

}  // namespace

std::map<std::string, std::vector<MoveEntry>> entries_by_root(const StagePlan& plan) {
    std::map<std::string, std::vector<MoveEntry>> groups;
    if (plan.direction == StageDirection::in) {
        // What is wrong with a line's sources (missing, unreadable, a list's own lines) is the
        // source's; a tree over the capacity says so itself (require_fits).
        mover_internal::typed(FailureKind::source, "read", "",
                              [&] { check_stage_in(plan.stages, plan.capacity); });
        for (const StageDirective& stage : plan.stages) {
            std::vector<SourceEntry> expanded;
            if (stage.type == StageType::list)
                expanded = mover_internal::typed(FailureKind::source, "read", stage.source,
                                                 [&] { return read_stage_list(stage); });
            else
                expanded.push_back({stage.source, stage.destination, stage.type, stage.where});
            // distribute=shard: this node's share only (bbkit(7), NODE-LOCAL POOLS).
            const bool shard = stage.distribute == Spread::shard;
            for (const SourceEntry& e : expanded) {
                MoveEntry entry{e.source, e.destination, e.type};
                if (shard) {
                    entry.shard_index = plan.nodes.index;
                    entry.shard_count = plan.nodes.count;
                } else if (plan.parts > 1) {
                    set_part(entry, plan);
                }
                groups[root_of(plan, stage)].push_back(entry);
            }
        }
        return groups;
    }
    for (const StageDirective& stage : plan.stages) {
        check_stage_type(stage.type, false);  // lines recorded before bb-parse refused it
        MoveEntry entry{stage.source, stage.destination, stage.type};
        // A node-local buffer's results: under the node's name, or merged (never replacing
        // another node's file) when the line says gather=merge.
        if (stage.gather == Gather::merge)
            entry.keep_existing = true;
        else if (!plan.nodes.name.empty() && stage.buffer.empty())
            entry.destination =
                gathered_destination(stage.destination, stage.type, plan.nodes.name);
        if (plan.parts > 1)
            set_part(entry, plan);
        groups[root_of(plan, stage)].push_back(entry);
    }
    return groups;
}

MoveSummary run_stage_plan(const StagePlan& plan,
                           const std::function<void(const PlanProgress&)>& progress) {
    const auto groups = entries_by_root(plan);
    MoveSummary total;
    // What the roots already moved counted: the next root's counters start from there.
    std::uint64_t base_files = 0, base_bytes = 0;
    for (const auto& [root, entries] : groups) {
        MovePlan move;
        move.direction =
            plan.direction == StageDirection::in ? MoveDirection::in : MoveDirection::out;
        move.buffer_root = root;
        move.entries = entries;
        move.threads = plan.threads;
        move.durable = plan.durable;
        move.direct_io = plan.direct_io;
        move.trust_syncfs = plan.trust_syncfs;
        move.memory_limit = plan.memory_limit;
        move.temp_token = plan.temp_token;
        if (plan.direction == StageDirection::in && root == plan.job_root)
            move.capacity = plan.capacity;
        MoveProgress last;
        MoveSummary summary = run_move(move, [&](const MoveProgress& p) {
            last = p;
            PlanProgress plan_progress;
            plan_progress.files_done = base_files + p.files_done;
            plan_progress.bytes_done = base_bytes + p.bytes_done;
            plan_progress.files_total = base_files + p.files_total;
            plan_progress.bytes_total = base_bytes + p.bytes_total;
            const bool started = plan_progress.files_done > 0 || plan_progress.bytes_done > 0;
            plan_progress.phase = p.syncing  ? StagePhase::syncing
                                  : !started ? StagePhase::measuring
                                             : StagePhase::copying;
            progress(plan_progress);
        });
        total.files += summary.files;
        total.bytes += summary.bytes;
        total.skipped += summary.skipped;
        total.seconds += summary.seconds;
        total.phases.append(summary.phases);
        std::move(summary.warnings.begin(), summary.warnings.end(),
                  std::back_inserter(total.warnings));
        base_files += last.files_total;  // a move's last report is its complete count
        base_bytes += last.bytes_total;
    }
    return total;
}

void run_and_report(const StagePlan& plan, const std::function<void(const std::string&)>& report) {
    try {
        const MoveSummary summary = run_stage_plan(plan, [&](const PlanProgress& p) {
            report(
                progress_line(p.files_done, p.files_total, p.bytes_done, p.bytes_total, p.phase));
        });
        for (const std::string& w : summary.warnings)
            report(warning_line(w));
        fault_point("mover.before-summary");
        report(summary_line(summary.files, summary.bytes, summary.skipped, summary.seconds,
                            summary.phases));
    } catch (const Error& e) {
        report(error_line(e));
        throw;
    } catch (const std::exception& e) {
        const Error internal(ExitCode::software, std::string("internal error: ") + e.what());
        report(error_line(internal));
        throw internal;
    }
}

}  // namespace bbkit
