// The ring all-reduce whose bytes cross the wire compressed (reduce/compress.h): the one
// algorithm behind all_reduce(compress="bf16" | "int8"), run over the whole group
// (allreduceCompressed) or over the inter-host rails of the hierarchical all-reduce, whose
// intra-host levels stay exact. Its idea, with a worked example, is at the top of
// allreduce_compressed.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/blocks.h"
#include "collectives/context.h"
#include "collectives/rail_pipeline.h"
#include "common/types.h"

namespace pycollect {

class CompressedRing : public SliceRing {
 public:
  // Rings over `ring` (the call's context or a view of it) in wire format `c`, summing
  // (AVG: `divisor` = the group's size, applied once to each result before it is encoded).
  CompressedRing(Context& ring, Compress c, int divisor);
  // The bytes of wire memory a slice of `blocks` (one range per rank of the ring) needs,
  // and that memory (before the first push; it holds the running slice's encoded bytes).
  size_t wireCapacity(const std::vector<Range>& blocks) const;
  void setWire(char* wire) { wire_ = wire; }
  // Queues an all-reduce of `blocks` of `buf`: on every rank of the ring, block b ends
  // as the decoded bytes its owner (rank b of the ring) encoded once. Returns its index.
  size_t push(float* buf, std::vector<Range> blocks);
  void poll() override;
  std::string waiting() const override;
  int waitingFor() const override;

 private:
  struct Slice {
    float* buf;
    std::vector<Range> blocks;
    std::vector<size_t> wireAt;  // where each block's bytes start in wire_
  };
  // A pipelining unit: at most `per_` values of a block, and where they go on the wire.
  struct Unit {
    size_t offset, length;  // in buf, elements
    size_t wire, bytes;     // in wire_, bytes
  };
  // Where each block's encoded bytes start in the wire memory (8-byte aligned), then the
  // total: one layout for wireCapacity and push.
  std::vector<size_t> wireLayout(const std::vector<Range>& blocks) const;
  std::vector<Unit> unitsOf(const Slice& sl, int block) const;
  bool scatters() const { return step_ < ring_.size - 1; }
  int outBlock() const;  // the block step_ sends
  int inBlock() const;   // the block step_ receives
  void start(const Slice& sl);
  void sendNext(const Slice& sl);
  void consume(const Slice& sl, const Unit& u);

  Context& ring_;
  const Compress c_;
  const int divisor_;
  char* wire_ = nullptr;
  const size_t per_;  // values per unit: a multiple of kInt8Block
  std::vector<Slice> slices_;
  int step_ = 0;
  bool started_ = false;
  std::vector<Unit> sends_, recvs_;
  std::vector<uint64_t> sendTickets_, recvTickets_;
  size_t sendsPosted_ = 0, sendsDone_ = 0, recvsDone_ = 0;
};

// Runs one CompressedRing over `blocks` of `buf` on `ring` to its end (ring's waits poll
// it); `memory(bytes)` gives its wire buffer (the context's scratch or stage).
void runCompressedRing(Context& ring, Compress c, int divisor, float* buf, const std::vector<Range>& blocks,
                       const std::function<char*(size_t)>& memory);

}  // namespace pycollect
