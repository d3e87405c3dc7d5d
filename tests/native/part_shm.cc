// The native driver's shm part: 2 to 4 ranks of one host over shared memory (every link
// must be "shm"), running the collectives' sweep (part_collectives.cc) on 2 and 4 ranks
// and the p2p suite (part_p2p.cc) on 2 and 3, with fewer sizes and float32 only. The group
// is told its ranks share a host, so the calls up to 1 MiB per rank run through the shared
// arena (collectives/shared_arena.h: flags and futexes, with messages moving meanwhile) and
// the larger ones as rings over the shared-memory links; the all-reduce also runs forced
// through the arena at every count (its pipeline of pieces, several rounds at 4 MiB). Then,
// with the arena's limit lifted for every call (CommOptions::sharedMaxBytes), the reduce to
// every root on 2 and 3 ranks: one phase, the pipeline of pieces, two rounds.
#include "collective_cases.h"
#include "parts.h"

namespace driver {

void partShm() {
  Sweep sweep;
  sweep.allreduceCounts = {0, 7, size_t{1} << 16, size_t{1} << 20};
  sweep.counts = {0, 7, size_t{1} << 16};
  sweep.int64 = false;
  sweep.shared = true;  // the arena's all-reduce forced at every count: one phase, pieces, rounds
  for (int n : {2, 3, 4}) {
    GroupSpec spec;
    spec.size = n;
    spec.options = [](int) { return makeOptions(TransportKind::kShm); };
    spec.hostOf.assign(n, 0);
    runGroup(spec, [&](Communicator& c, Barrier& barrier, int) {
      expectLinks(c, [](int) { return "shm"; });
      if (n != 3) collectiveSweep(c, sweep);
      if (n != 4) p2pSuite(c, barrier, 100);
    });
  }
  for (int n : {2, 3}) {
    GroupSpec spec;
    spec.size = n;
    spec.options = [](int) {
      CommOptions o = makeOptions(TransportKind::kShm);
      o.sharedMaxBytes = size_t{1} << 30;
      return o;
    };
    spec.hostOf.assign(n, 0);
    runGroup(spec, [&](Communicator& c, Barrier&, int) {
      int style = 0;
      for (size_t count : {size_t{7}, size_t{1} << 13, (size_t{1} << 18) + 3}) {
        for (int root = 0; root < n; ++root) reduceCase(c, count, root, style++);
      }
    });
  }
}

}  // namespace driver
