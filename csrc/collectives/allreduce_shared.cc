// Shared-memory all-reduce, for a group whose ranks all share a host (shared_arena.h).
//
// No message crosses a link; every rank's data is read in place from the group's arena.
//   - Small rounds (up to kOnePhaseBytes): each rank copies its input into its slot and
//     raises its `arrived` flag; every rank then reduces all the slots itself, in rank
//     order, x0 op x1 op ... op x(n-1), straight into its output. One flag per rank per
//     call: the whole cost of an 8-byte call is a copy, a store, the peers' stores seen,
//     and a reduction. A round of at most 8 bytes a rank goes in the rank's flag line
//     instead of its slot (SharedArena::lineSlot): each rank writes one cache line and
//     reads one of each peer's.
//   - Larger rounds run as a pipeline of pieces (shared_arena.h, "Pieces") of up to
//     kPieceBytes, each cut into one chunk per rank. Rank r reduces chunk r of every piece
//     and copies the other chunks from the ranks that reduced them:
//       fill(j):   copy the chunks of piece j that the *others* reduce into this rank's
//                  slot (chunk r stays out: rank r reads its own term from its input),
//                  raise `filled = j`;
//       reduce(j): once every peer filled j, reduce chunk r of every slot in rank order
//                  into chunk r of this rank's slot (the free place), copy it to the
//                  output, raise `done = j`;
//       copy(j):   once peer p is done with j, copy chunk p of piece j from its slot.
//     The order is fill(0), then for each j: reduce(j), fill(j + 1), copy(j): while this
//     rank fills piece j + 1 its peers reduce piece j, so each wait is short, and each
//     piece is still in a cache when it is read. Each rank copies in (n - 1)/n of its
//     input instead of all of it, and reads its share once.
// Every chunk is reduced by one rank, in one order, and copied by the others: the result
// is the same to the bit on every rank. A call larger than the arena's slot runs as
// several rounds; consecutive rounds use the slot's two parities, so a rank fills the next
// round while its peers still read this one. A large reduce (reduce_shared.cc) runs the
// same pipeline, but only its root copies the chunks out: the others' buffers are untouched.
//
// Example, 2 ranks, 8 bytes: rank 0 copies x0 into its slot, raises arrived = k, sees rank
// 1's arrived = k, and computes x0 + x1 from the two slots; rank 1 does the same.
// Example, 2 ranks, 256 KiB (two pieces of 128 KiB, chunks of 64 KiB): rank 0 copies the
// second half of piece 0 into its slot, rank 1 the first half; rank 0 reduces the first
// half (its input and rank 1's slot) into its slot and output, then fills piece 1 while
// rank 1 finishes reducing the second half of piece 0, then copies that half from rank 1's
// slot; then piece 1 alike.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"
#include "reduce/reduce.h"

namespace pycollect {
namespace {

constexpr size_t kPieceBytes = 128 << 10;
constexpr size_t kBiteBytes = 8 << 10;

}  // namespace

void pipelinedRound(Context& ctx, SharedArena& a, uint32_t k, char* out, size_t n, DType dtype, ReduceOp op,
                    int root) {
  const size_t es = dtypeSize(dtype);
  const bool keeps = root < 0 || ctx.rank == root;  // the result lands in `out` (a reduce: the root's only)
  const char* input = root < 0 ? "its all-reduce input" : "its reduce input";
  const char* share = root < 0 ? "its share of the all-reduce" : "its share of the reduce";
  const int me = ctx.rank, size = ctx.size;
  const size_t perPiece = std::max<size_t>(size, kPieceBytes / es);
  const size_t perBite = std::max<size_t>(1, kBiteBytes / es);
  const uint32_t pieces = static_cast<uint32_t>((n + perPiece - 1) / perPiece);
  const uint32_t first = a.nextPieces(pieces);
  char* mine = a.slot(me, k);
  auto begin = [&](uint32_t j) { return j * perPiece; };
  auto length = [&](uint32_t j) { return std::min(perPiece, n - begin(j)); };
  auto fill = [&](uint32_t j) {
    const Chunks chunks(length(j), size);
    const size_t b = begin(j), o = b + chunks.offset(me), e = o + chunks.length(me);
    a.put(k, b * es, out + b * es, (o - b) * es);
    a.put(k, e * es, out + e * es, (b + length(j) - e) * es);
    a.filled(first + j);
  };
  auto reduceMine = [&](uint32_t j) {
    for (int p = 0; p < size; ++p) {
      if (p != me) a.waitFilled(ctx, p, first + j, input);
    }
    const Chunks chunks(length(j), size);
    const size_t o = (begin(j) + chunks.offset(me)) * es, len = chunks.length(me);
    // In bites that stay in the first-level cache between the reduction and the copy.
    for (size_t i = 0; i < len; i += perBite) {
      const size_t at = o + i * es, m = std::min(perBite, len - i);
      reduceSlots(a, size, k, at, m, dtype, op, mine + at, me, out + at);
      if (keeps) std::memcpy(out + at, mine + at, m * es);
    }
    a.wrote(len * es);
    a.done(first + j);
  };
  auto copy = [&](uint32_t j) {
    if (!keeps) return;
    const Chunks chunks(length(j), size);
    for (int p = 0; p < size; ++p) {
      if (p == me) continue;
      a.waitDone(ctx, p, first + j, share);
      const size_t o = (begin(j) + chunks.offset(p)) * es;
      std::memcpy(out + o, a.slot(p, k) + o, chunks.length(p) * es);
    }
  };
  fill(0);
  // `arrived = k` after the first piece: every peer is done with round k - 1 (the slot
  // parity the next round reuses), and its call's announcement is checked here, once.
  a.arrive(k);
  a.waitAllArrived(ctx, k, input);
  for (uint32_t j = 0; j < pieces; ++j) {
    reduceMine(j);
    if (j + 1 < pieces) fill(j + 1);
    copy(j);
  }
}

namespace {

// dst = term(0) op term(1) op ... op term(size - 1) (AVG: divided by the size).
template <class Term>
void reduceInOrder(int size, Term term, size_t count, DType dtype, ReduceOp op, void* dst) {
  if (count == 0) return;
  if (size == 1) {
    std::memcpy(dst, term(0), count * dtypeSize(dtype));
    return;
  }
  reduce(dst, term(0), term(1), count, dtype, op);
  for (int p = 2; p < size; ++p) reduce(dst, dst, term(p), count, dtype, op);
  if (op == ReduceOp::kAvg) divide(dst, count, dtype, size);
}

}  // namespace

Algo linkAllreduce(int size, size_t bytes) {
  return size <= 8 && bytes <= (16 << 10) ? Algo::kDirect : Algo::kRing;
}

void reduceSlots(const SharedArena& a, int size, uint32_t round, size_t offset, size_t count, DType dtype,
                 ReduceOp op, void* dst, int self, const void* own) {
  reduceInOrder(size, [&](int p) -> const void* { return p == self ? own : a.slot(p, round) + offset; }, count,
                dtype, op, dst);
}

void reduceLines(const SharedArena& a, int size, uint32_t round, size_t count, DType dtype, ReduceOp op, void* dst) {
  reduceInOrder(size, [&](int p) -> const void* { return a.lineSlot(p, round); }, count, dtype, op, dst);
}

void allreduceShared(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return allreduceWith(linkAllreduce(ctx.size, count * dtypeSize(dtype)),
                                                            ctx, data, count, dtype, op);
  const size_t es = dtypeSize(dtype);
  char* out = static_cast<char*>(data);
  inRounds(ctx, *a, count, kArenaSlotBytes / es, "shared all-reduce", [&](uint32_t k, size_t off, size_t n) {
    if (n * es > kOnePhaseBytes) return pipelinedRound(ctx, *a, k, out + off * es, n, dtype, op);
    const bool inLine = n * es <= SharedArena::kLineBytes;
    if (inLine) {
      a->putInLine(k, out + off * es, n * es);
    } else {
      a->put(k, 0, out + off * es, n * es);
    }
    a->arrive(k);
    a->waitAllArrived(ctx, k, "its all-reduce input");
    if (inLine) return reduceLines(*a, ctx.size, k, n, dtype, op, out + off * es);
    reduceSlots(*a, ctx.size, k, 0, n, dtype, op, out + off * es);
  });
}

}  // namespace pycollect
