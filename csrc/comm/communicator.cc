#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"
#include "transport/wait.h"

namespace pycollect {
namespace {

// What kAuto runs where the group set a size from which the hierarchy runs (`from`,
// HierarchicalFrom): the hierarchy from there on, else `flat`.
Algo hierarchyOr(size_t bytes, size_t from, Algo flat) { return bytes >= from ? Algo::kHierarchical : flat; }

// What kAuto means for an all-reduce: the hierarchy from the group's size for it on;
// below, the cost model's table when the group passed one, else the direct algorithm for
// small messages on small groups (one round instead of 2(size-1)), the ring otherwise.
Algo chooseAllreduce(const CommOptions& o, int size, size_t bytes) {
  Algo fixed = size > 1 && size <= o.directMaxRanks && bytes <= o.directMaxBytes ? Algo::kDirect : Algo::kRing;
  return hierarchyOr(bytes, o.hierarchicalFrom.allreduce, lookupAuto(o.allreduceAuto, bytes, fixed));
}

// A list form's spans: one per rank of the group (`size`), each of `count` elements.
void checkCounts(const std::vector<Span>& spans, int size, size_t count, const char* what) {
  if (spans.size() != static_cast<size_t>(size)) {
    throw InvalidArgument(std::string(what) + ": " + std::to_string(spans.size()) + " buffers given, expected " +
                          std::to_string(size));
  }
  for (size_t p = 0; p < spans.size(); ++p) {
    if (spans[p].count != count) {
      throw InvalidArgument(std::string(what) + ": buffer " + std::to_string(p) + " holds " +
                            std::to_string(spans[p].count) + " elements, expected " + std::to_string(count));
    }
  }
}

// A host of its own for each of `size` ranks: the hosts until the group tells them.
std::vector<int> eachAlone(int size) {
  std::vector<int> hosts;
  for (int r = 0; r < size; ++r) hosts.push_back(r);
  return hosts;
}

// kAuto for the calls whose only choice is flat (the ring) or hierarchical: the
// hierarchy from `from` bytes on.
Algo ringOrHierarchy(Algo algo, size_t bytes, size_t from, const char* what) {
  Algo chosen = algo != Algo::kAuto ? algo : hierarchyOr(bytes, from, Algo::kRing);
  checkRingOrHierarchy(chosen, what);
  return chosen;
}

}  // namespace

Algo lookupAuto(const std::vector<AutoRow>& table, size_t bytes, Algo fallback) {
  for (const AutoRow& row : table) {
    if (bytes <= row.maxBytes) return row.algo;
  }
  return table.empty() ? fallback : table.back().algo;
}

void Communicator::setTopology(std::vector<int> hostOf, HierarchicalFrom from) {
  std::lock_guard<std::mutex> lock(mu_);
  if (connected_) throw InvalidArgument("the group's hosts are set before connect()");
  if (hostOf.size() != static_cast<size_t>(size_)) {
    throw InvalidArgument("set_topology: need the host of each of the " + std::to_string(size_) +
                          " ranks, got " + std::to_string(hostOf.size()));
  }
  hierarchy_ = Hierarchy(hostOf, rank_);
  options_.hierarchicalFrom = from;
}

void Communicator::setAutoTables(std::vector<AutoRow> allreduce, std::vector<AutoRow> allgather) {
  std::lock_guard<std::mutex> lock(mu_);
  if (connected_) throw InvalidArgument("the automatic choice's tables are set before connect()");
  options_.allreduceAuto = std::move(allreduce);
  options_.allgatherAuto = std::move(allgather);
}


Communicator::Communicator(int rank, int size, CommOptions options)
    : owner_(), rank_(rank), size_(size), options_(options), p2p_(rank, size > 0 ? size : 1, options.p2p),
      sendSeq_(size > 0 ? size : 1, 0), tracing_(options.trace), recorder_(size), flight_(options.flightEntries), hierarchy_(eachAlone(size), rank), arena_(rank, size) {
  if (size < 1) throw InvalidArgument("world size must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is outside [0, " +
                          std::to_string(size) + ")");
  }
  TransportOptions to;
  to.rank = rank;
  to.size = size;
  to.timeoutSec = options_.timeoutSec;
  to.socketBuffer = options_.socketBuffer;
  to.secret = options_.secret;
  to.linkTimeoutSec = options_.linkTimeoutSec > 0 ? options_.linkTimeoutSec : kDefaultLinkTimeoutSec;
  to.hostTag = options_.hostTag;
  to.shmSingleCopyBytes = options_.shmSingleCopyBytes;
  to.allLinksAtStart = options_.allLinksAtStart;
  transport_ = makeTransport(options_.transport, to);
}

Communicator::~Communicator() {
  if (!owner_.here()) {
    // A std::thread still "joinable" would terminate the process when destroyed: move
    // it into memory that is never freed (the thread itself was not copied by fork).
    new std::thread(std::move(worker_));
    staging_.release();  // its stream threads (host device) were not copied either
    return;
  }
  shutdown();
}

void Communicator::checkNotForked() const { owner_.check("this process group"); }

std::pair<std::string, int> Communicator::listen(const std::string& host) {
  checkNotForked();
  Endpoint e = transport_->listen(host);
  return {e.host, e.port};
}

void Communicator::connect(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                           uint64_t token) {
  checkNotForked();
  if (connected_) throw InvalidArgument("communicator is already connected");
  if (hosts.size() != ports.size()) {
    throw InvalidArgument("connect: need one host and one port per rank");
  }
  std::vector<Endpoint> peers;
  for (size_t i = 0; i < hosts.size(); ++i) peers.push_back({hosts[i], ports[i]});
  links_ = transport_->connect(peers, token);
  p2pLinks_ = transport_->links(Channel::kPointToPoint);
  p2p_.setLinks(p2pLinks_);
  std::lock_guard<std::mutex> lock(mu_);
  connected_ = true;
  worker_ = std::thread([this] { workerLoop(); });
}

WireHeader Communicator::makeHeader(OpKind kind, DType dtype, ReduceOp op, size_t count, int root) {
  checkReduction(op, dtype);  // every call passes here; non-reductions pass kSum
  WireHeader h;
  h.kind = static_cast<uint8_t>(kind);
  h.dtype = static_cast<uint8_t>(dtype);
  h.redop = static_cast<uint8_t>(op);
  h.count = count;
  h.root = root;
  h.rank = rank_;
  return h;
}

void Communicator::checkPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is outside the group [0, " + std::to_string(size_) + ")");
  }
  if (peer == rank_) {
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is this rank itself");
  }
}

// The header carries the algorithm that runs, so ranks that chose differently (e.g. a
// different PYCOLLECT_ALGO) fail with a mismatch instead of hanging. `bytes` is what one
// run of the algorithm moves: the call's, or one staged piece's (communicator_staged.cc).
WireHeader Communicator::allReduceHeader(size_t count, DType dtype, ReduceOp op, Algo algo, size_t bytes) {
  Algo chosen = chooseAlgo(algo, bytes);
  checkAllreduceAlgo(chosen, "all_reduce");
  WireHeader h = makeHeader(OpKind::kAllReduce, dtype, op, count, -1);
  h.algo = static_cast<uint8_t>(chosen);
  return h;
}

WireHeader Communicator::allGatherHeader(size_t count, DType dtype, Algo algo, size_t outBytes) {
  Algo chosen = chooseAllgather(algo, outBytes);
  WireHeader h = makeHeader(OpKind::kAllGather, dtype, ReduceOp::kSum, count, -1);
  h.algo = static_cast<uint8_t>(chosen);
  return h;
}

std::shared_ptr<Work> Communicator::allReduce(void* data, size_t count, DType dtype, ReduceOp op,
                                              Algo algo, Compress compress) {
  if (compress != Compress::kNone) {
    // The compressed ring runs over the whole group on one host, on the rails (inter-host
    // only, the hosts' levels exact) across hosts. The header's root carries the format,
    // so ranks that disagree on it mismatch.
    const Algo chosen = algo != Algo::kAuto ? algo : hierarchy_.hosts() > 1 ? Algo::kHierarchical : Algo::kRing;
    checkCompressed(compress, dtype, op, chosen);
    WireHeader h = makeHeader(OpKind::kAllReduce, dtype, op, count, static_cast<int>(compress));
    h.algo = static_cast<uint8_t>(chosen);
    return enqueue(h, [=](Context& c) { allreduceCompressedWith(chosen, c, data, count, op, compress); });
  }
  const WireHeader h = allReduceHeader(count, dtype, op, algo, count * dtypeSize(dtype));
  const Algo chosen = static_cast<Algo>(h.algo);
  return enqueue(h, [=](Context& c) { allreduceWith(chosen, c, data, count, dtype, op); });
}

std::shared_ptr<Work> Communicator::allGather(const void* in, void* out, size_t count, DType dtype,
                                              Algo algo) {
  const WireHeader h = allGatherHeader(count, dtype, algo, count * dtypeSize(dtype) * size_);
  const Algo chosen = static_cast<Algo>(h.algo);
  return enqueue(h, [=](Context& c) { allgatherWith(chosen, c, in, out, count, dtype); });
}

std::shared_ptr<Work> Communicator::allGatherList(Span in, std::vector<Span> outs, DType dtype, Algo algo) {
  checkCounts(outs, size_, in.count, "all_gather(outputs)");
  const WireHeader h = allGatherHeader(in.count, dtype, algo, in.count * dtypeSize(dtype) * size_);
  const Algo chosen = static_cast<Algo>(h.algo);
  return enqueue(h, [=, outs = std::move(outs)](Context& c) { allgatherInto(chosen, c, in, outs, dtype); });
}

std::shared_ptr<Work> Communicator::reduceScatterList(std::vector<Span> ins, Span out, DType dtype, ReduceOp op,
                                                      Algo algo) {
  checkCounts(ins, size_, out.count, "reduce_scatter(inputs)");
  const WireHeader h = reduceScatterHeader(out.count, dtype, op, algo, out.count * dtypeSize(dtype) * size_);
  const Algo chosen = static_cast<Algo>(h.algo);
  return enqueue(h, [=, ins = std::move(ins)](Context& c) { reduceScatterFrom(chosen, c, ins, out, dtype, op); });
}

WireHeader Communicator::reduceScatterHeader(size_t count, DType dtype, ReduceOp op, Algo algo, size_t inBytes) {
  WireHeader h = makeHeader(OpKind::kReduceScatter, dtype, op, count, -1);
  if (algo == Algo::kAuto && sharedFits(OpKind::kReduceScatter, inBytes / size_)) algo = Algo::kShared;
  h.algo = static_cast<uint8_t>(ringOrHierarchy(algo, inBytes, options_.hierarchicalFrom.reduceScatter,
                                                "reduce_scatter"));
  return h;
}

WireHeader Communicator::broadcastHeader(size_t count, DType dtype, int root, Algo algo, size_t bytes) {
  checkRoot(root, "broadcast");
  WireHeader h = makeHeader(OpKind::kBroadcast, dtype, ReduceOp::kSum, count, root);
  if (algo == Algo::kAuto && sharedFits(OpKind::kBroadcast, bytes)) algo = Algo::kShared;
  h.algo = static_cast<uint8_t>(ringOrHierarchy(algo, bytes, options_.hierarchicalFrom.broadcast, "broadcast"));
  return h;
}

std::shared_ptr<Work> Communicator::reduceScatter(const void* in, void* out, size_t count,
                                                  DType dtype, ReduceOp op, Algo algo) {
  const WireHeader h = reduceScatterHeader(count, dtype, op, algo, count * dtypeSize(dtype) * size_);
  const Algo chosen = static_cast<Algo>(h.algo);
  return enqueue(h, [=](Context& c) { reduceScatterWith(chosen, c, in, out, count, dtype, op); });
}

Algo Communicator::chooseAlgo(Algo algo, size_t bytes) const {
  if (algo != Algo::kAuto) return algo;
  return sharedFits(OpKind::kAllReduce, bytes) ? Algo::kShared : chooseAllreduce(options_, size_, bytes);
}

bool Communicator::sharedFits(OpKind kind, size_t bytes) const {
  if (size_ < 2 || hierarchy_.hosts() != 1 || options_.transport == TransportKind::kTcp) return false;
  size_t limit = options_.sharedMaxBytes;
  if (limit == kSharedPerCall) {  // what measured faster (communicator.h)
    switch (kind) {
      case OpKind::kAllReduce:
      case OpKind::kAllGather:
      case OpKind::kReduceScatter:
        return true;
      case OpKind::kBroadcast:
        limit = size_ > 2 ? kSharedLargeBytes : kSharedBroadcastBytes;
        break;
      case OpKind::kReduce:
        limit = size_ > 2 ? kSharedLargeBytes : kSharedSmallBytes;
        break;
      default:
        limit = kSharedSmallBytes;
    }
  }
  return limit > 0 && bytes <= limit;
}

Algo Communicator::chooseAllgather(Algo algo, size_t outBytes) const {
  // kAuto: the hierarchy where the group set it to run, else the cost model's table (the
  // ring without one).
  Algo chosen = algo != Algo::kAuto ? algo
                : sharedFits(OpKind::kAllGather, outBytes / size_) ? Algo::kShared
                                               : hierarchyOr(outBytes, options_.hierarchicalFrom.allgather,
                                                             lookupAuto(options_.allgatherAuto, outBytes, Algo::kRing));
  checkAllgatherAlgo(chosen, "all_gather");
  return chosen;
}

void Communicator::checkRoot(int root, const char* what) const {
  if (root < 0 || root >= size_) {
    throw InvalidArgument(std::string(what) + ": root " + std::to_string(root) +
                          " is outside the group [0, " + std::to_string(size_) + ")");
  }
}

std::shared_ptr<Work> Communicator::broadcast(void* data, size_t count, DType dtype, int root, Algo algo) {
  const size_t bytes = count * dtypeSize(dtype);
  const WireHeader h = broadcastHeader(count, dtype, root, algo, bytes);
  const Algo chosen = static_cast<Algo>(h.algo);
  return enqueue(h, [=](Context& c) { broadcastWith(chosen, c, data, bytes, root); });
}

std::shared_ptr<Work> Communicator::reduce(void* data, size_t count, DType dtype, ReduceOp op,
                                           int root) {
  checkRoot(root, "reduce");
  WireHeader h = makeHeader(OpKind::kReduce, dtype, op, count, root);
  if (sharedFits(OpKind::kReduce, count * dtypeSize(dtype))) {
    h.algo = static_cast<uint8_t>(Algo::kShared);
    return enqueue(h, [=](Context& c) { reduceShared(c, data, count, dtype, op, root); });
  }
  return enqueue(h, [=](Context& c) { reduceChain(c, data, count, dtype, op, root); });
}

namespace {

// One span per rank, or none; `what` names the call in the error.
void checkSpans(const std::vector<Span>& spans, size_t want, const char* what) {
  if (spans.size() != want) {
    throw InvalidArgument(std::string(what) + ": " + std::to_string(spans.size()) +
                          " buffers given, expected " + std::to_string(want));
  }
}

}  // namespace

void Communicator::checkRootList(const std::vector<Span>& spans, size_t own, int root,
                                 const char* what) const {
  checkRoot(root, what);
  checkSpans(spans, rank_ == root ? size_ : 0, what);
  if (rank_ == root && spans[root].count != own) {
    throw InvalidArgument(std::string(what) + ": the root's own slot holds " +
                          std::to_string(spans[root].count) + " elements, its own buffer " +
                          std::to_string(own));
  }
}

std::shared_ptr<Work> Communicator::gather(Span in, std::vector<Span> outs, DType dtype, int root) {
  checkRootList(outs, in.count, root, "gather");
  WireHeader h = makeHeader(OpKind::kGather, dtype, ReduceOp::kSum, in.count, root);
  if (sharedFits(OpKind::kGather, 0)) {  // at any size: shared_arena.h, "Parts"
    h.algo = static_cast<uint8_t>(Algo::kShared);
    return enqueue(h, [in, outs = std::move(outs), dtype, root](Context& c) { gatherShared(c, in, outs, dtype, root); });
  }
  return enqueue(h, [in, outs = std::move(outs), dtype, root](Context& c) { gatherDirect(c, in, outs, dtype, root); });
}

std::shared_ptr<Work> Communicator::scatter(std::vector<Span> ins, Span out, DType dtype, int root) {
  checkRootList(ins, out.count, root, "scatter");
  WireHeader h = makeHeader(OpKind::kScatter, dtype, ReduceOp::kSum, out.count, root);
  if (sharedFits(OpKind::kScatter, 0)) {
    h.algo = static_cast<uint8_t>(Algo::kShared);
    return enqueue(h, [ins = std::move(ins), out, dtype, root](Context& c) { scatterShared(c, ins, out, dtype, root); });
  }
  return enqueue(h, [ins = std::move(ins), out, dtype, root](Context& c) { scatterDirect(c, ins, out, dtype, root); });
}

std::shared_ptr<Work> Communicator::allToAll(std::vector<Span> ins, std::vector<Span> outs,
                                             DType dtype) {
  checkSpans(ins, size_, "all_to_all(inputs)");
  checkSpans(outs, size_, "all_to_all(outputs)");
  if (ins[rank_].count != outs[rank_].count) {
    throw InvalidArgument("all_to_all: rank " + std::to_string(rank_) + " sends itself " +
                          std::to_string(ins[rank_].count) + " elements but expects " +
                          std::to_string(outs[rank_].count));
  }
  size_t total = 0;
  for (const Span& s : ins) total += s.count;
  WireHeader h = makeHeader(OpKind::kAllToAll, dtype, ReduceOp::kSum, total, -1);
  if (sharedFits(OpKind::kAllToAll, 0)) {  // at any size: see alltoall_shared.cc
    h.algo = static_cast<uint8_t>(Algo::kShared);
    return enqueue(h, [ins = std::move(ins), outs = std::move(outs), dtype](Context& c) {
      alltoallShared(c, ins, outs, dtype);
    });
  }
  return enqueue(h, [ins = std::move(ins), outs = std::move(outs), dtype](Context& c) {
    alltoallDirect(c, ins, outs, dtype);
  });
}

std::shared_ptr<Work> Communicator::allReduceCoalesced(std::vector<Span> tensors, DType dtype,
                                                       ReduceOp op, Algo algo) {
  size_t total = 0;
  for (const Span& s : tensors) total += s.count;
  Algo chosen = chooseAlgo(algo, total * dtypeSize(dtype));
  checkAllreduceAlgo(chosen, "all_reduce_coalesced");
  WireHeader h = makeHeader(OpKind::kAllReduceCoalesced, dtype, op, total,
                            static_cast<int>(tensors.size()));
  h.algo = static_cast<uint8_t>(chosen);
  return enqueue(h, [tensors = std::move(tensors), dtype, op, chosen](Context& c) {
    allreduceCoalesced(c, tensors, dtype, op, chosen);
  });
}

std::shared_ptr<Work> Communicator::allGatherCoalesced(std::vector<Span> ins, std::vector<Span> outs,
                                                       DType dtype, Algo algo) {
  checkSpans(outs, size_ * ins.size(), "all_gather_coalesced(outputs)");
  size_t total = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].count != ins[i % ins.size()].count) {
      throw InvalidArgument("all_gather_coalesced: output " + std::to_string(i) + " holds " +
                            std::to_string(outs[i].count) + " elements, input " +
                            std::to_string(i % ins.size()) + " " +
                            std::to_string(ins[i % ins.size()].count));
    }
  }
  for (const Span& s : ins) total += s.count;
  Algo chosen = chooseAllgather(algo, total * dtypeSize(dtype) * size_);
  WireHeader h = makeHeader(OpKind::kAllGatherCoalesced, dtype, ReduceOp::kSum, total,
                            static_cast<int>(ins.size()));
  h.algo = static_cast<uint8_t>(chosen);
  return enqueue(h, [ins = std::move(ins), outs = std::move(outs), dtype, chosen](Context& c) {
    allgatherCoalesced(c, ins, outs, dtype, chosen);
  });
}

std::shared_ptr<Work> Communicator::barrier(double timeoutSec) {
  WireHeader h = makeHeader(OpKind::kBarrier, DType::kUInt8, ReduceOp::kSum, 0, -1);
  if (sharedFits(OpKind::kBarrier, 0)) {
    h.algo = static_cast<uint8_t>(Algo::kShared);
    return enqueue(Collective{h, [](Context& c) { barrierShared(c); }, nullptr, timeoutSec});
  }
  return enqueue(Collective{h, [](Context& c) { barrierAll(c); }, nullptr, timeoutSec});
}

namespace {

std::unique_ptr<P2POp> message(bool send, void* data, size_t count, DType dtype, int peer, int tag, WireHeader call) {
  auto op = std::make_unique<P2POp>();
  op->send = send;
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(data);
  op->bytes = count * dtypeSize(dtype);
  op->call = call;
  return op;
}

}  // namespace

std::shared_ptr<Work> Communicator::send(const void* data, size_t count, DType dtype, int peer, int tag) {
  checkPeer(peer, "send");
  WireHeader call = makeHeader(OpKind::kSend, dtype, ReduceOp::kSum, count, tag);
  return issueP2P(message(true, const_cast<void*>(data), count, dtype, peer, tag, call));
}

std::shared_ptr<RecvWork> Communicator::recv(void* data, size_t count, DType dtype, int peer, int tag) {
  if (peer == kAnySource) {
    if (size_ == 1) throw InvalidArgument("recv from any source: the group has no other rank");
  } else {
    checkPeer(peer, "recv");
  }
  WireHeader call = makeHeader(OpKind::kSend, dtype, ReduceOp::kSum, count, tag);
  call.rank = peer;  // the message is the peer's
  return std::static_pointer_cast<RecvWork>(issueP2P(message(false, data, count, dtype, peer, tag, call)));
}

std::shared_ptr<Work> Communicator::recvAny(void* data, size_t count, DType dtype, int tag, int32_t* source) {
  if (size_ == 1) throw InvalidArgument("recv from any source: the group has no other rank");
  WireHeader call = makeHeader(OpKind::kSend, dtype, ReduceOp::kSum, count, tag);
  auto op = message(false, data, count, dtype, kAnySource, tag, call);
  op->sourceOut = source;
  return issueP2P(std::move(op));
}

Clock::time_point Communicator::deadlineFromNow(double timeoutSec, Clock::time_point now) const {
  double seconds = timeoutSec >= 0 ? timeoutSec : timeout();
  return now + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

bool Communicator::failed() {
  if (!owner_.here()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return !failure_.empty();
}

std::string Communicator::failure() {
  if (!owner_.here()) return "the process group belongs to pid " + std::to_string(owner_.pid());
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

size_t Communicator::scratchBytes() const { return scratchBytes_.load(); }

uint64_t Communicator::bytesSent() const { return bytesSent_.load(); }

void Communicator::countBytesSent() {
  uint64_t total = 0;
  for (Link* l : links_) {
    if (l != nullptr) total += l->bytesPosted();
  }
  bytesSent_.store(total + arena_.bytesWritten());
}

std::map<int, std::string> Communicator::linkKinds() {
  checkNotForked();
  std::map<int, std::string> kinds;
  for (int p = 0; p < static_cast<int>(links_.size()); ++p) {
    const char* kind = links_[p] != nullptr ? transport_->linkKind(p) : nullptr;
    if (kind != nullptr) kinds[p] = kind;  // the links made so far
  }
  return kinds;
}

std::map<std::string, uint64_t> Communicator::counters() {
  checkNotForked();
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, uint64_t> out;  // the kinds called at least once
  for (size_t k = 0; k < calls_.size(); ++k) {
    if (calls_[k] != 0) out[opKindName(static_cast<OpKind>(k))] = calls_[k];
  }
  return out;
}

}  // namespace pycollect
