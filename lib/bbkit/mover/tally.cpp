#include "bbkit/mover/tally.hpp"

namespace bbkit::mover_internal {

void Warnings::add(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (kept_.size() >= max_kept) {
        ++dropped_;
        return;
    }
    if (seen_.insert(message).second)
        kept_.push_back(message);
}

std::vector<std::string> Warnings::list() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> all = kept_;
    if (dropped_ > 0)
        all.push_back(std::to_string(dropped_) + " more warnings");
    return all;
}

}  // namespace bbkit::mover_internal
