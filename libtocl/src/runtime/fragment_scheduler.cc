#include "runtime/fragment_scheduler.h"

#include <algorithm>

namespace tocl::runtime {

FragmentScheduler::FragmentScheduler(uint64_t total_bytes, uint64_t fragment_bytes, size_t rails,
                                     Limits limits)
    : limits_(limits),
      total_bytes_(total_bytes),
      fragment_bytes_(fragment_bytes),
      state_((total_bytes + fragment_bytes - 1) / fragment_bytes, State::kUnsent),
      rail_of_(state_.size(), -1),
      rails_(rails),
      bandwidth_(rails, 0),
      full_(rails, false) {}

uint64_t FragmentScheduler::Length(uint64_t index) const {
  return std::min<uint64_t>(fragment_bytes_, total_bytes_ - Offset(index));
}

uint64_t FragmentScheduler::Acknowledge(uint64_t offset, uint64_t length, Clock::time_point now) {
  if (offset % fragment_bytes_ != 0) return 0;
  uint64_t fresh = 0;
  for (uint64_t index = offset / fragment_bytes_;
       index < count() && Offset(index) < offset + length; ++index) {
    if (state_[index] == State::kAcked) continue;
    // An unsent one was given back by a network thought dead: its
    // acknowledgement came after all, and it is not sent again.
    if (state_[index] == State::kPosted && rail_of_[index] >= 0) {
      RailProgress& progress = rails_[rail_of_[index]];
      if (progress.inflight > 0) --progress.inflight;
      progress.acked_bytes += Length(index);
      progress.last_ack = now;
    }
    state_[index] = State::kAcked;
    ++acked_;
    ++fresh;
  }
  return fresh;
}

std::vector<FragmentScheduler::Failure> FragmentScheduler::StartRound(std::span<RailHealth> rails,
                                                                      Clock::time_point now,
                                                                      bool congested) {
  std::vector<Failure> failures;
  for (size_t r = 0; r < rails.size(); ++r) {
    RailHealth& health = rails[r];
    RailProgress& progress = rails_[r];
    if (health.UsableAt(now)) health.failed = false;
    const bool silent =
        progress.inflight > 0 && !congested && now - progress.last_ack > limits_.fragment_timeout;
    if (!health.broken && !silent) continue;
    failures.push_back(
        Failure{r, health.broken, progress.inflight, !health.failed || progress.inflight > 0});
    if (health.broken) {
      health.Break();
    } else {
      health.failed = true;
      health.retry_at = now + limits_.fragment_timeout * limits_.retry_after_timeouts;
    }
    for (uint64_t i = 0; i < count(); ++i) {
      if (state_[i] == State::kPosted && rail_of_[i] == int(r)) {
        state_[i] = State::kUnsent;
        retry_.push_back(i);
      }
    }
    progress.inflight = 0;
  }
  // This message's bandwidth where measured, else what the peer showed
  // before; unknown ones count as the mean of the known.
  double known_sum = 0;
  int known = 0;
  for (size_t r = 0; r < rails.size(); ++r) {
    const double measured = Measured(r);
    bandwidth_[r] = measured > 0 ? measured : rails[r].bandwidth;
    if (bandwidth_[r] > 0) {
      known_sum += bandwidth_[r];
      ++known;
    }
  }
  for (double& b : bandwidth_) {
    if (b <= 0) b = known > 0 ? known_sum / known : 1.0;
  }
  std::fill(full_.begin(), full_.end(), false);
  return failures;
}

std::optional<FragmentScheduler::Placement> FragmentScheduler::Next(
    std::span<const RailHealth> rails) {
  while (!retry_.empty() || next_fresh_ < count()) {
    if (!retry_.empty() && state_[retry_.front()] == State::kAcked) {
      retry_.pop_front();
      continue;
    }
    int best = -1;
    double best_finish = 0;
    for (size_t r = 0; r < rails.size(); ++r) {
      if (rails[r].failed || full_[r]) continue;
      const double finish = double((rails_[r].inflight + 1) * fragment_bytes_) / bandwidth_[r];
      if (best < 0 || finish < best_finish) {
        best = int(r);
        best_finish = finish;
      }
    }
    if (best < 0 || rails_[best].inflight >= limits_.window) return std::nullopt;
    const uint64_t index = retry_.empty() ? next_fresh_ : retry_.front();
    return Placement{index, size_t(best), rail_of_[index] >= 0};
  }
  return std::nullopt;
}

void FragmentScheduler::Posted(const Placement& placement, Clock::time_point now) {
  if (!retry_.empty() && retry_.front() == placement.index) {
    retry_.pop_front();
  } else {
    ++next_fresh_;
  }
  RailProgress& progress = rails_[placement.rail];
  if (progress.first_post == Clock::time_point()) progress.first_post = now;
  if (progress.inflight == 0) progress.last_ack = now;
  ++progress.inflight;
  state_[placement.index] = State::kPosted;
  rail_of_[placement.index] = static_cast<int8_t>(placement.rail);
}

double FragmentScheduler::Measured(size_t rail) const {
  const RailProgress& progress = rails_[rail];
  const double seconds =
      std::chrono::duration<double>(progress.last_ack - progress.first_post).count();
  if (progress.acked_bytes < limits_.measured_after * fragment_bytes_ || seconds <= 0) return 0;
  return double(progress.acked_bytes) / seconds;
}

double FragmentScheduler::Learned(size_t rail, double before) const {
  const double measured = Measured(rail);
  if (measured <= 0) return before;
  return before == 0 ? measured : 0.5 * before + 0.5 * measured;
}

}  // namespace tocl::runtime
