// What the flight recorder (trace/flight.h) costs one call: what the engine does for a
// small all-reduce (issue, start, two steps with a wait each, end), timed in a loop, the
// median of 7 runs. bench/flight_cost.py prints it beside the end-to-end difference.
//
//   g++ -O2 -std=c++17 -Icsrc bench/flight_cost.cc csrc/trace/flight.cc -o flight_cost -pthread && ./flight_cost
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "trace/flight.h"

namespace {

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) double perCall(pycollect::flight::Recorder& r, uint64_t n) {
  pycollect::flight::Call call;
  call.kind = 1;
  call.count = 2;
  int64_t t0 = nowNs();
  for (uint64_t i = 0; i < n; ++i) {
    call.seq = i;
    pycollect::flight::Mark m = r.issued(call);
    m.started();
    m.step("header exchange", 0, 1);
    m.waiting(1);
    m.step("reduce", 0, 1);
    m.waiting(1);
    m.ended(false);
  }
  return double(nowNs() - t0) / n;
}

}  // namespace

int main() {
  pycollect::flight::Recorder recorder(1024);
  std::vector<double> runs;
  for (int rep = 0; rep < 7; ++rep) runs.push_back(perCall(recorder, 2000000));
  std::sort(runs.begin(), runs.end());
  std::printf("%.1f\n", runs[runs.size() / 2]);  // ns per call, median of 7 runs
  return 0;
}
