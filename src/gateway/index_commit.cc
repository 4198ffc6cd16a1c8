// Index commits from an event loop. The embedded index answers commits on its committer
// thread (Index::asyncCommits): the loop queues the commit and resumes when the answer is
// posted back, with no worker thread parked on the group's fsync and two thread hops
// fewer per request (4 KiB PUTs: docs/benchmarks.md, "Commits without a worker thread").
// A remote index commits synchronously: its calls run on a worker thread.
#include "handlers.h"

namespace granary::gateway {
namespace {

using Committed = Result<std::optional<VersionId>>;
using StartCommit = std::move_only_function<void(index_kv::Index::CommitDone)>;
using SyncCommit = std::move_only_function<Committed()>;

// Adds one commit to `group`; `out` gets its answer. `start` begins it where the index
// commits asynchronously, `sync` runs on a worker thread elsewhere. The server waits for
// every asynchronous answer (ctx.commits) before its event loops, which the answers are
// posted to, go away.
void commitIn(TaskGroup& group, GatewayContext& ctx, StartCommit start, SyncCommit sync,
              Committed& out) {
  if (!ctx.index().asyncCommits()) {
    group.spawn([sync = std::move(sync), &out]() mutable {
      out = sync();
      return Status::ok();
    });
    return;
  }
  // The answer's callback. Members go in reverse order: `done` (which holds the loop's
  // executor) before the token that lets the server destroy the loop.
  struct Answer {
    CallsInFlight::Token in_flight;
    TaskGroup::Done done;
    Committed* out;
    void operator()(Committed r) {
      *out = std::move(r);
      done(Status::ok());
    }
  };
  group.startHere([&ctx, &out, start = std::move(start)](TaskGroup::Done done) mutable {
    start(Answer{CallsInFlight::Token(ctx.commits), std::move(done), &out});
  });
}

// One commit, awaited: add(group, out) adds it. `add` is the caller's and outlives the
// await (by reference: g++ 12 may destroy a co_await expression's temporaries twice,
// TaskGroup::wait says more).
template <typename Add>
Task<Committed> awaitCommit(GatewayContext& ctx, Add& add) {
  Committed out;
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup group(ctx.pool(), ex);
  add(group, out);
  (void)co_await group.wait();
  co_return out;
}

}  // namespace

Task<Committed> commitObject(GatewayContext& ctx, std::string_view bucket,
                             std::string_view key, const index_kv::Manifest& m,
                             index_kv::Precondition pre) {
  auto add = [&](TaskGroup& group, Committed& out) {
    commitIn(
        group, ctx,
        [&](index_kv::Index::CommitDone done) {
          ctx.index().putObjectAsync(bucket, key, m, pre, std::move(done));
        },
        [&] { return ctx.index().putObject(bucket, key, m, pre); }, out);
  };
  co_return co_await awaitCommit(ctx, add);
}

Task<Committed> removeObject(GatewayContext& ctx, std::string_view bucket,
                             std::string_view key, index_kv::Precondition pre) {
  auto add = [&](TaskGroup& group, Committed& out) {
    removeObjectIn(group, ctx, bucket, key, std::move(pre), out);
  };
  co_return co_await awaitCommit(ctx, add);
}

void removeObjectIn(TaskGroup& group, GatewayContext& ctx, std::string_view bucket,
                    std::string_view key, index_kv::Precondition pre, Committed& out) {
  commitIn(
      group, ctx,
      [&ctx, bucket, key, pre](index_kv::Index::CommitDone done) {
        ctx.index().deleteObjectAsync(bucket, key, pre, std::move(done));
      },
      [&ctx, bucket, key, pre] { return ctx.index().deleteObject(bucket, key, pre); }, out);
}

}  // namespace granary::gateway
