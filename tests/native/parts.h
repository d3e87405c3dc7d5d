// The native driver's parts (engine_driver.cc's main runs the ones asked for) and the
// suites one part's file lends another: each part's entry function runs its groups and
// records its checks in report(); a wrong result fails a check, a hang trips the watchdog.
#pragma once

#include <cstdint>

#include "harness.h"

namespace driver {

// The parts, one file each.
void partCollectives();                         // part_collectives.cc
void partP2P();                                 // part_p2p.cc
void partFaults(int iterations, uint32_t seed);  // part_faults.cc
void partShm();                                 // part_shm.cc
void partHierarchy();                           // part_hierarchy.cc

// The point-to-point suite (part_p2p.cc), which part_shm.cc runs again over shared memory.
void p2pSuite(Communicator& c, Barrier& barrier, int stormMessages);

// The p2p suite's waits from several threads and against late senders (p2p_waits.cc).
void threadedWaits(Communicator& c, int messages);
void lateSender(Communicator& c, Barrier& barrier, bool inlineScope, bool collective);
void manyWaiters(Communicator& c, Barrier& barrier, int threads, int rounds);

}  // namespace driver
