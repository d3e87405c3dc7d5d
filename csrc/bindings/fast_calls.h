#pragma once
// The API's calls on plain host buffers, in one crossing into C++: all_reduce,
// broadcast, reduce, all_gather_into_tensor, reduce_scatter_tensor, gather, scatter,
// all_to_all, all_to_all_single (chunks of the rows, even or by split sizes), send and recv
// (from a named rank or any): pycollect/api.py tries them first; register_fast_calls.cc
// makes them Python's pycollect._C.FastCalls, one per group, and pycollect._C.FastFront,
// which finds the group.
//
// An 8-byte all-reduce costs the engine half a microsecond, and the general path spent
// three more in Python around it: a Buffer object, the op, the algorithm and the device
// path resolved, then the group's lock and its list of calls in flight. Here the common
// case is answered in C++: C-contiguous numpy arrays or CPU torch tensors of an engine
// dtype (host_span.h), an op given as an int (pycollect.ReduceOp is one), the group's own
// algorithm, nothing of the group's still running. Such a call takes the group's lock as
// the general path does (calls stay in issue order across threads), runs on this thread
// with the GIL released, and returns None when it ran to its end.
//
// async_op=True, isend and irecv (FastAsyncScope, below) take the same calls: queued for the
// group's worker, even behind calls still in flight, and handed back as their Work.
//
// Anything else is declined before anything is issued: False comes back, and Python takes
// the general path, which raises the errors that name what is wrong (refusals live in one
// place: a wrong size or a dtype that differs between two buffers is declined here too).
// A call issued here that did not end here (queued behind another thread's, or failed)
// comes back as the engine's Work, already in the group's list of calls in flight with its
// buffers, and Python waits on it as on any blocking call.
#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "common/host_span.h"
#include "common/types.h"

namespace pycollect {

class Communicator;
class Work;

// The calls of the API's async_op=True (register_fast_entry.cc): while one lives on a thread,
// the FastCalls calls made there are queued for the group's worker, never run on the thread,
// whether or not calls of the group are still in flight, and each comes back as its Work,
// in the group's list of calls in flight with its buffers (as ProcessGroup.submit leaves it).
class __attribute__((visibility("hidden"))) FastAsyncScope {
 public:
  FastAsyncScope();
  ~FastAsyncScope();
  static bool on();

 private:
  bool saved_;
};

// Default algorithms of the group's calls with a choice (ProcessGroup._default_algos).
struct FastAlgos {
  Algo allReduce, broadcast, allGather, reduceScatter;
};

// Hidden, as pybind11's own types are: it holds their objects.
class __attribute__((visibility("hidden"))) FastCalls {
 public:
  // `lock` and `pending`: the group's IssueLock (issue_lock.h) and deque of calls in flight
  // (pycollect/group.py); `releaseSettled`: a weakref.WeakMethod of the group's method that
  // drops those the engine is done with (under the lock): weak, so that the group and this
  // object make no cycle (one the garbage collector cannot see through this object).
  // `ranks`: the group's members by global rank, in group-rank order.
  FastCalls(std::shared_ptr<Communicator> comm, pybind11::object lock, pybind11::object pending,
            pybind11::object releaseSettled, std::vector<int> ranks, FastAlgos algos);

  // Each returns None (ran to its end), False (declined, nothing issued) or the Work of a
  // call issued that did not end here. `root`, `peer`: group ranks; `op`, `tag`: Python ints;
  // `algo`: an Algo's code, or kGroupAlgo for the group's own (FastAlgos).
  static constexpr int kGroupAlgo = -1;
  pybind11::object allReduce(PyObject* tensor, PyObject* op, int algo = kGroupAlgo);
  pybind11::object broadcast(PyObject* tensor, int root, int algo = kGroupAlgo);
  pybind11::object reduce(PyObject* tensor, PyObject* op, int root);
  pybind11::object barrier();  // with the group's timeout (a timeout of its own: the general path)
  pybind11::object allGather(PyObject* output, PyObject* input, int algo = kGroupAlgo);  // output = every rank's input
  pybind11::object reduceScatter(PyObject* output, PyObject* input, PyObject* op, int algo = kGroupAlgo);
  // The list forms: `list` a list or tuple of one buffer per rank, each the size of `tensor`
  // (`output`) and of its dtype (declined otherwise).
  pybind11::object allGatherList(PyObject* list, PyObject* tensor, int algo = kGroupAlgo);
  pybind11::object reduceScatterList(PyObject* output, PyObject* list, PyObject* op, int algo = kGroupAlgo);
  // The coalesced forms: `tensors` / `inputs` a list or tuple of buffers of one dtype (at
  // least one); `outputLists` one such list per rank, each output the size of its input.
  pybind11::object allReduceCoalesced(PyObject* tensors, PyObject* op);
  pybind11::object allGatherCoalesced(PyObject* outputLists, PyObject* inputs);
  pybind11::object send(PyObject* tensor, int peer, PyObject* tag);
  pybind11::object recv(PyObject* tensor, int peer, PyObject* tag);  // kAnySource: declined
  // From any rank: the sender's global rank (a Python int) where it ran to its end, else as
  // the others.
  pybind11::object recvAny(PyObject* tensor, PyObject* tag);
  // `list`: on the root a list or tuple of one buffer per rank (None elsewhere), all of the
  // tensor's dtype, the root's own of the tensor's size (declined otherwise).
  pybind11::object gather(PyObject* tensor, PyObject* list, int root);
  pybind11::object scatter(PyObject* tensor, PyObject* list, int root);
  // Lists or tuples of one buffer per rank, all of one dtype, this rank's two of one size.
  pybind11::object allToAll(PyObject* outputs, PyObject* inputs);
  // Chunks of the first dimension of two buffers of one dtype whose rows hold as many
  // elements, split by `outSplits`, `inSplits` (lists or tuples of ints, or None: evenly
  // among the ranks). Of contiguous buffers a chunk of rows is a range of elements.
  pybind11::object allToAllSingle(PyObject* output, PyObject* input, PyObject* outSplits, PyObject* inSplits);

  // The group rank of a global rank given as a Python int; -1 for anything else (not an
  // int, not a member).
  int groupRank(PyObject* global) const;

 private:
  // What a call that ran to its end here returns: None (`done` says otherwise).
  struct NothingToSay {
    pybind11::object operator()(const Work&) const { return pybind11::none(); }
  };
  template <size_t N, class Issue, class Done = NothingToSay>
  pybind11::object run(PyObject* const (&buffers)[N], const bool (&writes)[N], Issue issue, Done done = Done());
  // A call on lists of buffers (gather, scatter, all-to-all), or declined: `tensor` (none:
  // nullptr), `list` and `inputs` (lists or tuples of one buffer per rank; none: nullptr),
  // all of one dtype. issue(the spans in that order) runs without the GIL and returns
  // nullptr to decline.
  template <class Issue>
  pybind11::object runLists(PyObject* tensor, bool tensorWrites, PyObject* list, bool listWrites, PyObject* inputs,
                            Issue issue);
  // The same on `buffers` collected (each written where `writes` says).
  template <class Issue>
  pybind11::object runBuffers(const std::vector<PyObject*>& buffers, const std::vector<bool>& writes, Issue issue);
  // Under the group's lock: `issue` run without the GIL, `buffers` kept with its Work;
  // done(the Work) if it ran to its end here.
  template <class Issue, class Done = NothingToSay>
  pybind11::object issued(PyObject* const* buffers, size_t n, Issue issue, Done done = Done());
  Py_ssize_t inFlight() const;

  std::shared_ptr<Communicator> comm_;
  pybind11::object lock_, pending_, releaseSettled_;
  const std::vector<int> ranks_;
  const FastAlgos algos_;
};

// What a declined call returns: False.
pybind11::object fastDeclined();

// An int (not a bool) in [lo, hi], into `out`; false (no Python error left set) otherwise.
bool fastInteger(PyObject* v, long long lo, long long hi, long long& out);

}  // namespace pycollect
