#include "device/host_device.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

namespace pycollect {

// One record of an event: done once its stream ran up to it; `error` if the stream
// had failed by then.
struct HostDevice::Mark {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;

  void complete(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = why;
    }
    cv.notify_all();
  }
  std::string waitDone() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
    return error;
  }
  bool waitUntil(std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_until(lock, until, [this] { return done; });
  }
};

namespace {
std::atomic<uint64_t> streamsCreated{0}, streamsDestroyed{0};
}  // namespace

std::pair<uint64_t, uint64_t> HostDevice::streamCounts() {
  return {streamsCreated.load(), streamsDestroyed.load()};
}

// A FIFO of tasks and the thread that runs them. `error` (thread only) breaks it.
struct HostDevice::Stream {
  Stream() : thread([this] { run(); }) {}
  ~Stream() {
    closing.store(true);  // a waitValue gives up
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    thread.join();  // runs what is queued first: no record is left pending
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu);
      tasks.push_back(std::move(task));
    }
    cv.notify_all();
  }
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stopping || !tasks.empty(); });
        if (tasks.empty()) return;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
  std::string error;  // set by the thread when a task failed; later tasks are skipped
  std::atomic<bool> closing{false};  // the device is being destroyed
  std::thread thread;  // last: starts once the members above exist
};

HostDevice::HostDevice(HostDeviceOptions options) : options_(options) {
  streams_.push_back(std::make_unique<Stream>());  // handle 0: the default stream
}

HostDevice::~HostDevice() {
  streams_.clear();  // joins the threads: nothing polls a flag word any more
  for (uint32_t* f : flags_) std::free(f);
}

void HostDevice::throwIfSticky() const {
  if (!sticky_.empty()) throw DeviceError("host device: " + sticky_ + " (a sticky error)");
}

HostDevice::Stream& HostDevice::stream(StreamHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  throwIfSticky();
  if (handle >= streams_.size() || streams_[handle] == nullptr) {
    throw DeviceError("host device: no stream " + std::to_string(handle));
  }
  return *streams_[handle];
}

StreamHandle HostDevice::createStream() {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(std::make_unique<Stream>());
  ++streamsCreated;
  return streams_.size() - 1;
}

void HostDevice::destroyStream(StreamHandle handle) {
  std::unique_ptr<Stream> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle == 0 || handle >= streams_.size() || streams_[handle] == nullptr) {
      throw DeviceError("host device: destroyStream of no stream " + std::to_string(handle));
    }
    gone = std::move(streams_[handle]);
  }
  gone.reset();  // runs what is queued, then joins its thread
  ++streamsDestroyed;
}

void HostDevice::synchronizeAll(const char* what) {
  std::vector<std::shared_ptr<Mark>> marks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : streams_) {
      if (s == nullptr) continue;
      auto mark = std::make_shared<Mark>();
      s->push([mark] { mark->complete(""); });
      marks.push_back(mark);
    }
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSyncLimitMs);
  for (auto& m : marks) {
    if (!m->waitUntil(until)) {
      throw DeviceError(std::string("host device: ") + what + " synchronises the device, and a stream did not " +
                        "finish its queued work within " + std::to_string(kSyncLimitMs) + " ms (it waits for " +
                        "something only this thread would do next: a deadlock on a GPU)");
    }
  }
}

EventHandle HostDevice::createEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(nullptr);
  return events_.size();
}

void HostDevice::destroyEvent(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (event >= 1 && event <= events_.size()) events_[event - 1] = nullptr;
}

void HostDevice::copy(void* dst, const void* src, size_t bytes, StreamHandle handle) {
  Stream& s = stream(handle);
  uint64_t index;
  {
    std::lock_guard<std::mutex> lock(mu_);
    index = ++copies_;
  }
  const int delayUs = options_.copyDelayUs;
  const bool fail = index == options_.failCopy;
  Stream* sp = &s;
  HostDevice* self = this;  // outlives its streams
  s.push([self, sp, dst, src, bytes, delayUs, fail, index] {
    if (!sp->error.empty()) return;
    if (delayUs > 0) std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
    if (fail) {
      sp->error = "copy #" + std::to_string(index) + " failed (injected by the host device's failCopy)";
      if (self->options_.stickyErrors) {
        std::lock_guard<std::mutex> lock(self->mu_);
        if (self->sticky_.empty()) self->sticky_ = sp->error;
      }
      return;
    }
    std::memcpy(dst, src, bytes);
  });
}

void HostDevice::copyToHost(void* host, const void* device, size_t bytes, StreamHandle stream) {
  copy(host, device, bytes, stream);
}

void HostDevice::copyToDevice(void* device, const void* host, size_t bytes, StreamHandle stream) {
  copy(device, host, bytes, stream);
}

void HostDevice::fill(void* device, size_t bytes, int value, int delayUs, StreamHandle handle) {
  Stream* sp = &stream(handle);
  sp->push([sp, device, bytes, value, delayUs] {
    if (!sp->error.empty()) return;
    std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
    std::memset(device, value, bytes);
  });
}

void HostDevice::record(EventHandle event, StreamHandle handle) {
  Stream* sp = &stream(handle);
  auto mark = std::make_shared<Mark>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event < 1 || event > events_.size()) {
      throw DeviceError("host device: no event " + std::to_string(event));
    }
    events_[event - 1] = mark;
  }
  sp->push([sp, mark] { mark->complete(sp->error); });
}

bool HostDevice::query(EventHandle event) {
  std::shared_ptr<Mark> mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    throwIfSticky();
    if (event < 1 || event > events_.size()) {
      throw DeviceError("host device: no event " + std::to_string(event));
    }
    mark = events_[event - 1];
  }
  if (mark == nullptr) return true;
  std::lock_guard<std::mutex> lock(mark->mu);
  if (mark->done && !mark->error.empty()) throw DeviceError("host device: " + mark->error);
  return mark->done;
}

void HostDevice::streamWait(StreamHandle handle, EventHandle event) {
  Stream* sp = &stream(handle);
  std::shared_ptr<Mark> mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event >= 1 && event <= events_.size()) mark = events_[event - 1];
  }
  if (mark == nullptr) return;  // never recorded: nothing to wait for
  sp->push([sp, mark] {
    std::string error = mark->waitDone();
    if (!error.empty() && sp->error.empty()) sp->error = error;  // failure travels on
  });
}

void* HostDevice::allocPinned(size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw DeviceError("host device: out of memory for " + std::to_string(bytes) + " bytes");
  return p;
}

void HostDevice::freePinned(void* p) {
  synchronizeAll("freePinned (as cuMemFreeHost)");
  std::free(p);
}

uint32_t* HostDevice::allocFlags(size_t words) {
  if (options_.failFlags) throw DeviceError("host device: allocFlags failed (injected by failFlags)");
  auto* p = static_cast<uint32_t*>(std::calloc(words == 0 ? 1 : words, sizeof(uint32_t)));
  if (p == nullptr) throw DeviceError("host device: out of memory for flag words");
  std::lock_guard<std::mutex> lock(mu_);
  flags_.push_back(p);
  return p;
}

void HostDevice::freeFlags(uint32_t*) {
  // Kept until the destructor: a stream thread may still be polling a word.
}

void HostDevice::writeValue(StreamHandle handle, uint32_t* flag, uint32_t value) {
  Stream* sp = &stream(handle);
  // Stored even on a broken stream: on CUDA a copy's failure is a sticky error of the
  // whole context, which ends every stream's waits (with that error) instead of leaving
  // them hanging; here the waiters go on, and the error is the staged call's.
  sp->push([flag, value] { flagStore(flag, value); });
}

void HostDevice::waitValue(StreamHandle handle, uint32_t* flag, uint32_t value) {
  Stream* sp = &stream(handle);
  sp->push([sp, flag, value] {
    while (!flagReached(flagLoad(flag), value) && !sp->closing.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
}

void HostDevice::snapshot(void* dst, const void* src, size_t bytes, StreamHandle handle) {
  Stream* sp = &stream(handle);
  sp->push([sp, dst, src, bytes] {
    if (sp->error.empty()) std::memcpy(dst, src, bytes);
  });
}

void HostDevice::synchronize(StreamHandle handle) {
  Stream* sp = &stream(handle);
  auto mark = std::make_shared<Mark>();
  sp->push([mark] { mark->complete(""); });
  mark->waitDone();
}

}  // namespace pycollect
