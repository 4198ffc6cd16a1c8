// makeMeteredEngine (io_engine.h): Prometheus counters and latency histograms around every
// call of an IoEngine. The metric objects are looked up once; a call then costs a clock
// read and a few atomic adds.
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "granary/chunkstore/io_engine.h"

namespace granary::chunkstore {
namespace {

enum OpIndex { kRead, kWrite, kSync, kPunch, kResize, kOps };
constexpr std::array<const char*, kOps> kOpNames = {"read", "write", "fdatasync", "punch_hole",
                                                    "resize"};
static_assert(std::ranges::none_of(kOpNames, [](const char* s) { return s == nullptr; }));

class MeteredEngine final : public IoEngine {
 public:
  MeteredEngine(std::unique_ptr<IoEngine> inner, prometheus::Registry& registry)
      : inner_(std::move(inner)) {
    auto& ops = prometheus::BuildCounter()
                    .Name("granary_io_operations_total")
                    .Help("Chunk-store file operations by kind (io_uring or POSIX engine)")
                    .Register(registry);
    auto& bytes = prometheus::BuildCounter()
                      .Name("granary_io_bytes_total")
                      .Help("Bytes read and written by chunk-store file operations")
                      .Register(registry);
    auto& errors = prometheus::BuildCounter()
                       .Name("granary_io_errors_total")
                       .Help("Chunk-store file operations that failed")
                       .Register(registry);
    auto& latency = prometheus::BuildHistogram()
                        .Name("granary_io_duration_seconds")
                        .Help("Chunk-store file operation latency (fdatasync: one group commit)")
                        .Register(registry);
    static const prometheus::Histogram::BucketBoundaries kBuckets = {
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
        0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5};
    for (int i = 0; i < kOps; ++i) {
      const prometheus::Labels labels{{"op", kOpNames[i]}, {"engine", std::string(inner_->name())}};
      metrics_[i] = {&ops.Add(labels), &bytes.Add(labels), &errors.Add(labels),
                     &latency.Add(labels, kBuckets)};
    }
  }

  std::string_view name() const override { return inner_->name(); }
  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    return inner_->open(path, flags, mode);
  }
  Status close(int fd) override { return inner_->close(fd); }
  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    return timed(kWrite, data.size(), [&] { return inner_->pwrite(fd, data, offset); });
  }
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    return timed(kRead, out.size(), [&] { return inner_->pread(fd, out, offset); });
  }
  Status preadv(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) override {
    size_t bytes = 0;
    for (auto part : parts) bytes += part.size();
    return timed(kRead, bytes, [&] { return inner_->preadv(fd, parts, offset); });
  }
  bool preadNoWait(int fd, std::span<const std::span<uint8_t>> parts,
                   uint64_t offset) override {
    const auto start = std::chrono::steady_clock::now();
    if (!inner_->preadNoWait(fd, parts, offset)) return false;  // not an operation
    size_t bytes = 0;
    for (auto part : parts) bytes += part.size();
    record(kRead, bytes, start, Status::ok());
    return true;
  }
  Status fdatasync(int fd) override {
    return timed(kSync, 0, [&] { return inner_->fdatasync(fd); });
  }
  Status fsync(int fd) override {
    return timed(kSync, 0, [&] { return inner_->fsync(fd); });
  }
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    return timed(kPunch, 0, [&] { return inner_->punchHole(fd, offset, len); });
  }
  // Once per extent (presizing) and at recovery's cuts.
  Status resize(int fd, uint64_t size) override {
    return timed(kResize, 0, [&] { return inner_->resize(fd, size); });
  }
  // Like open and close, namespace operations: not counted.
  Status rename(const std::string& from, const std::string& to) override {
    return inner_->rename(from, to);
  }
  Status remove(const std::string& path) override { return inner_->remove(path); }
  void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) override {
    inner_->readAsync(fd, out, offset, timedDone(kRead, out.size(), std::move(done)));
  }
  void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                  uint64_t offset, IoDone done) override {
    inner_->writeAsync(fd, head, tail, offset,
                       timedDone(kWrite, head.size() + tail.size(), std::move(done)));
  }
  void fdatasyncAsync(int fd, IoDone done) override {
    inner_->fdatasyncAsync(fd, timedDone(kSync, 0, std::move(done)));
  }
  IoBuffer registeredBuffer(size_t size) override { return inner_->registeredBuffer(size); }
  void beginBatch() override { inner_->beginBatch(); }
  void endBatch() override { inner_->endBatch(); }

 private:
  struct OpMetrics {
    prometheus::Counter* ops;
    prometheus::Counter* bytes;
    prometheus::Counter* errors;
    prometheus::Histogram* latency;
  };

  template <typename F>
  Status timed(OpIndex op, size_t bytes, F&& call) {
    const auto start = std::chrono::steady_clock::now();
    Status st = call();
    record(op, bytes, start, st);
    return st;
  }

  IoDone timedDone(OpIndex op, size_t bytes, IoDone done) {
    return [this, op, bytes, start = std::chrono::steady_clock::now(),
            done = std::move(done)](Status st) mutable {
      record(op, bytes, start, st);
      done(std::move(st));
    };
  }

  void record(OpIndex op, size_t bytes, std::chrono::steady_clock::time_point start,
              const Status& st) {
    const OpMetrics& m = metrics_[op];
    m.latency->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    m.ops->Increment();
    if (st.isOk()) {
      if (bytes) m.bytes->Increment(static_cast<double>(bytes));
    } else {
      m.errors->Increment();
    }
  }

  // Declared first, destroyed last: inner_'s destructor may still run callbacks that
  // record into it.
  std::array<OpMetrics, kOps> metrics_{};
  std::unique_ptr<IoEngine> inner_;
};

}  // namespace

std::unique_ptr<IoEngine> makeMeteredEngine(std::unique_ptr<IoEngine> inner,
                                            prometheus::Registry& registry) {
  return std::make_unique<MeteredEngine>(std::move(inner), registry);
}

}  // namespace granary::chunkstore
