#include "transport/tcp/refusals.h"

#include <cstdio>

namespace pycollect {
namespace tcp {

void RefusalLog::add(const Address& from, const Verdict& verdict, Clock::time_point now) {
  flush(now, false);
  if (total_ == 0) {
    windowStart_ = now;
    std::fprintf(stderr, "pycollect: rank %d refused a connection from %s: %s\n", rank_,
                 from.str().c_str(), verdict.why.c_str());
  }
  ++total_;
  ++counts_[static_cast<int>(verdict.refusal)];
}

void RefusalLog::flush(Clock::time_point now, bool force) {
  if (total_ == 0 || (!force && now - windowStart_ < kWindow)) return;
  if (total_ > 1) {  // one refusal was printed in full already
    std::string kinds;
    for (int k = 0; k < kKinds; ++k) {
      if (counts_[k] == 0) continue;
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(counts_[k]) + " " +
               refusalName(static_cast<Refusal>(k));
    }
    double seconds = std::chrono::duration<double>(now - windowStart_).count();
    std::fprintf(stderr, "pycollect: rank %d refused %d connections on port %d in the last %.1f s: %s\n",
                 rank_, total_, port_, seconds, kinds.c_str());
  }
  total_ = 0;
  counts_.fill(0);
}

}  // namespace tcp
}  // namespace pycollect
