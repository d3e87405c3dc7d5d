// fast_calls.h: the calls themselves; register_fast_calls.cc makes them Python's.
#include "bindings/fast_calls.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "bindings/blocking.h"
#include "bindings/host_span.h"
#include "bindings/issue_lock.h"
#include "comm/communicator.h"

namespace py = pybind11;

namespace pycollect {

namespace {

void* ptr(const HostSpan& s) { return reinterpret_cast<void*>(s.address); }
Algo pick(int algo, Algo group) { return algo == FastCalls::kGroupAlgo ? group : static_cast<Algo>(algo); }
DType dtypeOf(const HostSpan& s) { return static_cast<DType>(s.dtype); }

bool reduceOp(PyObject* v, ReduceOp& out) {
  long long code;
  if (!fastInteger(v, 0, kNumReduceOps - 1, code)) return false;
  out = static_cast<ReduceOp>(code);
  return true;
}

bool messageTag(PyObject* v, int& out) {  // a 32-bit tag, as api._check_tag
  long long t;
  if (!fastInteger(v, INT32_MIN, INT32_MAX, t)) return false;
  out = static_cast<int>(t);
  return true;
}

bool plainSpan(PyObject* buffer, bool writes, HostSpan& out) {
  return plainArraySpan(buffer, writes, out) || plainTensorSpan(buffer, writes, out);
}

// A list or tuple of one buffer per rank (`size`; 0: any number, at least one), appended
// to `buffers` (each written where `written`); false for anything else.
bool rankList(PyObject* list, size_t size, bool written, std::vector<PyObject*>& buffers, std::vector<bool>& writes) {
  if (!(PyList_CheckExact(list) || PyTuple_CheckExact(list))) return false;
  const size_t n = static_cast<size_t>(PySequence_Fast_GET_SIZE(list));
  if (size == 0 ? n == 0 : n != size) return false;
  buffers.insert(buffers.end(), PySequence_Fast_ITEMS(list), PySequence_Fast_ITEMS(list) + n);
  writes.insert(writes.end(), n, written);
  return true;
}

// The rows of each rank's chunk of a buffer of `rows` rows: `splits` (a list or tuple of
// `size` ints >= 0 that add up to `rows`) or, for None, `rows / size` each; false for
// anything else (the general path names it).
bool chunkRows(PyObject* splits, long long rows, size_t size, std::vector<size_t>& out) {
  if (splits == Py_None) {
    if (rows % static_cast<long long>(size) != 0) return false;
    out.assign(size, static_cast<size_t>(rows) / size);
    return true;
  }
  if (!(PyList_CheckExact(splits) || PyTuple_CheckExact(splits)) ||
      static_cast<size_t>(PySequence_Fast_GET_SIZE(splits)) != size) {
    return false;
  }
  out.resize(size);
  long long total = 0;
  for (size_t p = 0; p < size; ++p) {
    long long k;
    if (!fastInteger(PySequence_Fast_GET_ITEM(splits, p), 0, rows, k)) return false;
    out[p] = static_cast<size_t>(k);
    total += k;
  }
  return total == rows;
}

// A span as the engine's calls take it.
Span spanOf(const HostSpan& s) { return Span{static_cast<char*>(ptr(s)), s.count}; }

// Spans [first, end) of `spans`, as the engine's calls take them.
std::vector<Span> spansOf(const std::vector<HostSpan>& spans, size_t first, size_t end) {
  std::vector<Span> out;
  out.reserve(end - first);
  for (size_t i = first; i < end; ++i) out.push_back(spanOf(spans[i]));
  return out;
}

// Whether every span holds `count` elements (a list form's parts: else the general path
// names the one that does not).
bool allOfCount(const std::vector<Span>& spans, size_t count) {
  for (const Span& s : spans) {
    if (s.count != count) return false;
  }
  return true;
}

}  // namespace

py::object fastDeclined() { return py::bool_(false); }

bool fastInteger(PyObject* v, long long lo, long long hi, long long& out) {
  if (!PyLong_Check(v) || PyBool_Check(v)) return false;
  int overflow = 0;
  out = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (out == -1 && PyErr_Occurred()) PyErr_Clear();
  return overflow == 0 && out >= lo && out <= hi;
}

FastCalls::FastCalls(std::shared_ptr<Communicator> comm, py::object lock, py::object pending,
                     py::object releaseSettled, std::vector<int> ranks, FastAlgos algos)
    : comm_(std::move(comm)),
      lock_(std::move(lock)),
      pending_(std::move(pending)),
      releaseSettled_(std::move(releaseSettled)),
      ranks_(std::move(ranks)),
      algos_(algos) {
  if (!isIssueLock(lock_.ptr())) throw py::type_error("FastCalls: the group's lock must be a pycollect._C.IssueLock");
}

py::object FastCalls::allReduce(PyObject* tensor, PyObject* op, int algo) {
  ReduceOp o;
  if (!reduceOp(op, o)) return fastDeclined();
  const Algo a = pick(algo, algos_.allReduce);
  return run({tensor}, {true}, [&](const HostSpan* s) {
    return comm_->allReduce(ptr(s[0]), s[0].count, dtypeOf(s[0]), o, a);
  });
}

py::object FastCalls::barrier() {
  return issued(nullptr, 0, [&] { return comm_->barrier(); });
}

py::object FastCalls::broadcast(PyObject* tensor, int root, int algo) {
  const Algo a = pick(algo, algos_.broadcast);
  return run({tensor}, {true}, [&](const HostSpan* s) {
    return comm_->broadcast(ptr(s[0]), s[0].count, dtypeOf(s[0]), root, a);
  });
}

py::object FastCalls::reduce(PyObject* tensor, PyObject* op, int root) {
  ReduceOp o;
  if (!reduceOp(op, o)) return fastDeclined();
  return run({tensor}, {true}, [&](const HostSpan* s) {
    return comm_->reduce(ptr(s[0]), s[0].count, dtypeOf(s[0]), o, root);
  });
}

py::object FastCalls::allGather(PyObject* output, PyObject* input, int algo) {
  const Algo a = pick(algo, algos_.allGather);
  return run({input, output}, {false, true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
    if (s[0].dtype != s[1].dtype || s[1].count != s[0].count * static_cast<size_t>(comm_->size())) return nullptr;
    return comm_->allGather(ptr(s[0]), ptr(s[1]), s[0].count, dtypeOf(s[0]), a);
  });
}

py::object FastCalls::reduceScatter(PyObject* output, PyObject* input, PyObject* op, int algo) {
  ReduceOp o;
  if (!reduceOp(op, o)) return fastDeclined();
  const Algo a = pick(algo, algos_.reduceScatter);
  return run({input, output}, {false, true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
    if (s[0].dtype != s[1].dtype || s[0].count != s[1].count * static_cast<size_t>(comm_->size())) return nullptr;
    return comm_->reduceScatter(ptr(s[0]), ptr(s[1]), s[1].count, dtypeOf(s[0]), o, a);
  });
}

py::object FastCalls::send(PyObject* tensor, int peer, PyObject* tag) {
  int t;
  if (!messageTag(tag, t)) return fastDeclined();
  return run({tensor}, {false}, [&](const HostSpan* s) {
    return comm_->send(ptr(s[0]), s[0].count, dtypeOf(s[0]), peer, t);
  });
}

// From a named rank only: a receive from any source keeps its Work (it names the sender).
py::object FastCalls::recv(PyObject* tensor, int peer, PyObject* tag) {
  int t;
  if (peer == kAnySource || !messageTag(tag, t)) return fastDeclined();
  return run({tensor}, {true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
    return comm_->recv(ptr(s[0]), s[0].count, dtypeOf(s[0]), peer, t);
  });
}

py::object FastCalls::recvAny(PyObject* tensor, PyObject* tag) {
  int t;
  if (comm_->size() < 2 || !messageTag(tag, t)) return fastDeclined();  // a group of one: the general path says so
  return run({tensor}, {true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
    return comm_->recv(ptr(s[0]), s[0].count, dtypeOf(s[0]), kAnySource, t);
  }, [this](const Work& w) { return py::int_(ranks_[static_cast<const RecvWork&>(w).source()]); });
}

py::object FastCalls::allGatherList(PyObject* list, PyObject* tensor, int algo) {
  const Algo a = pick(algo, algos_.allGather);
  return runLists(tensor, false, list, true, nullptr, [&](const std::vector<HostSpan>& s) {
    std::vector<Span> outs = spansOf(s, 1, s.size());
    if (!allOfCount(outs, s[0].count)) return std::shared_ptr<Work>();
    return comm_->allGatherList(spanOf(s[0]), std::move(outs), dtypeOf(s[0]), a);
  });
}

py::object FastCalls::reduceScatterList(PyObject* output, PyObject* list, PyObject* op, int algo) {
  ReduceOp o;
  if (!reduceOp(op, o)) return fastDeclined();
  const Algo a = pick(algo, algos_.reduceScatter);
  return runLists(output, true, list, false, nullptr, [&](const std::vector<HostSpan>& s) {
    std::vector<Span> ins = spansOf(s, 1, s.size());
    if (!allOfCount(ins, s[0].count)) return std::shared_ptr<Work>();
    return comm_->reduceScatterList(std::move(ins), spanOf(s[0]), dtypeOf(s[0]), o, a);
  });
}

py::object FastCalls::allReduceCoalesced(PyObject* tensors, PyObject* op) {
  ReduceOp o;
  std::vector<PyObject*> buffers;
  std::vector<bool> writes;
  if (!reduceOp(op, o) || !rankList(tensors, 0, true, buffers, writes)) return fastDeclined();
  return runBuffers(buffers, writes, [&](const std::vector<HostSpan>& s) {
    return comm_->allReduceCoalesced(spansOf(s, 0, s.size()), dtypeOf(s[0]), o, algos_.allReduce);
  });
}

py::object FastCalls::allGatherCoalesced(PyObject* outputLists, PyObject* inputs) {
  // The inputs, then each rank's list of outputs in rank order (rank-major, as the engine
  // takes them): one output per input, of its size.
  const size_t size = static_cast<size_t>(comm_->size());
  std::vector<PyObject*> buffers;
  std::vector<bool> writes;
  if (!rankList(inputs, 0, false, buffers, writes) || !(PyList_CheckExact(outputLists) || PyTuple_CheckExact(outputLists)) ||
      static_cast<size_t>(PySequence_Fast_GET_SIZE(outputLists)) != size) {
    return fastDeclined();
  }
  const size_t k = buffers.size();
  for (size_t r = 0; r < size; ++r) {
    if (!rankList(PySequence_Fast_GET_ITEM(outputLists, r), k, true, buffers, writes)) return fastDeclined();
  }
  return runBuffers(buffers, writes, [&](const std::vector<HostSpan>& s) {
    for (size_t j = k; j < s.size(); ++j) {
      if (s[j].count != s[(j - k) % k].count) return std::shared_ptr<Work>();  // the general path names it
    }
    return comm_->allGatherCoalesced(spansOf(s, 0, k), spansOf(s, k, s.size()), dtypeOf(s[0]), algos_.allGather);
  });
}

py::object FastCalls::gather(PyObject* tensor, PyObject* list, int root) {
  const bool isRoot = root == comm_->rank();
  if (!isRoot && list != Py_None) return fastDeclined();  // a list on a non-root: the general path names it
  return runLists(tensor, false, isRoot ? list : nullptr, true, nullptr, [&](const std::vector<HostSpan>& s) {
    std::vector<Span> outs = spansOf(s, 1, s.size());  // none on a non-root
    if (isRoot && outs[root].count != s[0].count) return std::shared_ptr<Work>();  // the root's own slot
    return comm_->gather(spanOf(s[0]), std::move(outs), dtypeOf(s[0]), root);
  });
}

py::object FastCalls::scatter(PyObject* tensor, PyObject* list, int root) {
  const bool isRoot = root == comm_->rank();
  if (!isRoot && list != Py_None) return fastDeclined();
  return runLists(tensor, true, isRoot ? list : nullptr, false, nullptr, [&](const std::vector<HostSpan>& s) {
    std::vector<Span> ins = spansOf(s, 1, s.size());
    if (isRoot && ins[root].count != s[0].count) return std::shared_ptr<Work>();
    return comm_->scatter(std::move(ins), spanOf(s[0]), dtypeOf(s[0]), root);
  });
}

py::object FastCalls::allToAll(PyObject* outputs, PyObject* inputs) {
  const size_t size = static_cast<size_t>(comm_->size()), me = static_cast<size_t>(comm_->rank());
  return runLists(nullptr, false, outputs, true, inputs, [&](const std::vector<HostSpan>& s) {
    std::vector<Span> outs = spansOf(s, 0, size), ins = spansOf(s, size, 2 * size);
    if (outs[me].count != ins[me].count) return std::shared_ptr<Work>();  // this rank's own part
    return comm_->allToAll(std::move(ins), std::move(outs), dtypeOf(s[0]));
  });
}

py::object FastCalls::allToAllSingle(PyObject* output, PyObject* input, PyObject* outSplits, PyObject* inSplits) {
  const size_t size = static_cast<size_t>(comm_->size()), me = static_cast<size_t>(comm_->rank());
  HostSpan in, out;
  std::vector<size_t> outChunks, inChunks;  // rows per rank
  if (!plainSpan(input, false, in) || !plainSpan(output, true, out) || in.rows < 1 || out.rows < 1 ||
      !chunkRows(outSplits, out.rows, size, outChunks) || !chunkRows(inSplits, in.rows, size, inChunks) ||
      outChunks[me] != inChunks[me]) {
    return fastDeclined();
  }
  // Rows of one length in both buffers: a chunk of rows is then a range of elements.
  const size_t rowsIn = static_cast<size_t>(in.rows), rowsOut = static_cast<size_t>(out.rows), row = in.count / rowsIn;
  if (in.dtype != out.dtype || in.count % rowsIn != 0 || out.count != row * rowsOut) return fastDeclined();
  PyObject* const buffers[] = {input, output};
  return issued(buffers, 2, [&] {
    const size_t rowBytes = row * dtypeSize(dtypeOf(in));
    std::vector<Span> ins(size), outs(size);
    size_t inRow = 0, outRow = 0;
    for (size_t p = 0; p < size; ++p) {
      ins[p] = Span{static_cast<char*>(ptr(in)) + inRow * rowBytes, inChunks[p] * row};
      outs[p] = Span{static_cast<char*>(ptr(out)) + outRow * rowBytes, outChunks[p] * row};
      inRow += inChunks[p];
      outRow += outChunks[p];
    }
    return comm_->allToAll(std::move(ins), std::move(outs), dtypeOf(in));
  });
}

int FastCalls::groupRank(PyObject* global) const {
  long long g;
  if (!fastInteger(global, INT_MIN, INT_MAX, g)) return -1;
  const auto it = std::lower_bound(ranks_.begin(), ranks_.end(), static_cast<int>(g));
  return it != ranks_.end() && *it == g ? static_cast<int>(it - ranks_.begin()) : -1;
}

// The call on `buffers` (each written where `writes` says), or declined. `issue` runs
// without the GIL and returns nullptr to decline (the buffers do not fit together).
template <size_t N, class Issue, class Done>
py::object FastCalls::run(PyObject* const (&buffers)[N], const bool (&writes)[N], Issue issue, Done done) {
  HostSpan spans[N];
  for (size_t i = 0; i < N; ++i) {
    if (!plainSpan(buffers[i], writes[i], spans[i])) return fastDeclined();
  }
  return issued(buffers, N, [&] { return issue(spans); }, done);
}

template <class Issue>
py::object FastCalls::runLists(PyObject* tensor, bool tensorWrites, PyObject* list, bool listWrites, PyObject* inputs,
                               Issue issue) {
  const size_t size = static_cast<size_t>(comm_->size());
  // The tensor, the list's buffers and the inputs', each given (the general path names what
  // does not fit: a list of another length, say).
  std::vector<PyObject*> buffers;
  std::vector<bool> writes;
  if (tensor != nullptr) {
    buffers.push_back(tensor);
    writes.push_back(tensorWrites);
  }
  if ((list != nullptr && !rankList(list, size, listWrites, buffers, writes)) ||
      (inputs != nullptr && !rankList(inputs, size, false, buffers, writes))) {
    return fastDeclined();
  }
  return runBuffers(buffers, writes, issue);
}

template <class Issue>
py::object FastCalls::runBuffers(const std::vector<PyObject*>& buffers, const std::vector<bool>& writes, Issue issue) {
  // Held here: another thread may change a list while the call runs without the GIL.
  std::vector<py::object> held;
  held.reserve(buffers.size());
  for (PyObject* b : buffers) held.push_back(py::reinterpret_borrow<py::object>(b));
  std::vector<HostSpan> spans(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!plainSpan(buffers[i], writes[i], spans[i]) || spans[i].dtype != spans[0].dtype) return fastDeclined();
  }
  return issued(buffers.data(), buffers.size(), [&] { return issue(spans); });
}

template <class Issue, class Done>
py::object FastCalls::issued(PyObject* const* buffers, size_t n, Issue issue, Done done) {
  const bool async = FastAsyncScope::on();
  IssueLockHeld held(lock_.ptr());
  if (inFlight() != 0) {  // calls issued before: the buffers of those that ended are dropped
    py::object release = releaseSettled_();
    if (!release.is_none()) release();
    // One still runs: a blocking call goes the general path, which queues behind it (an
    // async one is queued behind it here).
    if (!async && inFlight() != 0) return fastDeclined();
  }
  std::shared_ptr<Work> work;
  {
    // The engine touches no Python object. (CPython's own calls: pybind11's scope looks up
    // its internals first.)
    PyThreadState* saved = PyEval_SaveThread();
    try {
      Blocking scope(!async);
      work = issue();
    } catch (...) {
      PyEval_RestoreThread(saved);
      throw;
    }
    PyEval_RestoreThread(saved);
  }
  if (work == nullptr) return fastDeclined();
  if (!async && work->isCompleted() && !work->failed()) return done(*work);
  py::object w = py::cast(work);
  py::tuple keep(n);
  for (size_t i = 0; i < n; ++i) keep[i] = py::reinterpret_borrow<py::object>(buffers[i]);
  pending_.attr("append")(py::make_tuple(w, keep));  // the buffers live until it ends
  return w;
}

namespace {
thread_local bool tFastAsync = false;
}  // namespace

FastAsyncScope::FastAsyncScope() : saved_(tFastAsync) { tFastAsync = true; }
FastAsyncScope::~FastAsyncScope() { tFastAsync = saved_; }
bool FastAsyncScope::on() { return tFastAsync; }

Py_ssize_t FastCalls::inFlight() const {
  const Py_ssize_t n = PyObject_Size(pending_.ptr());
  if (n < 0) throw py::error_already_set();
  return n;
}

}  // namespace pycollect
