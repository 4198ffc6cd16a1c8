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

// Adds the commit `start` begins to `group`; `out` gets its answer. The server waits for
// every such answer (ctx.commits) before its event loops, which the answers are posted
// to, go away.
void startCommit(TaskGroup& group, GatewayContext& ctx, StartCommit start, Committed& out) {
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

// The caller's `start` and `sync` outlive the await. (By reference: g++ 12 may destroy a
// co_await expression's temporaries twice, TaskGroup::wait says more.)
Task<Committed> awaitCommit(GatewayContext& ctx, StartCommit& start,
                            std::move_only_function<Committed()>& sync) {
  if (!ctx.index().asyncCommits()) co_return co_await offload(ctx.pool(), [&] { return sync(); });
  Committed out;
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup group(ctx.pool(), ex);
  startCommit(group, ctx, std::move(start), out);
  (void)co_await group.wait();
  co_return out;
}

}  // namespace

Task<Committed> commitObject(GatewayContext& ctx, std::string_view bucket,
                             std::string_view key, const index_kv::Manifest& m,
                             index_kv::Precondition pre) {
  StartCommit start = [&](index_kv::Index::CommitDone done) {
    ctx.index().putObjectAsync(bucket, key, m, pre, std::move(done));
  };
  std::move_only_function<Committed()> sync = [&] {
    return ctx.index().putObject(bucket, key, m, pre);
  };
  co_return co_await awaitCommit(ctx, start, sync);
}

Task<Committed> removeObject(GatewayContext& ctx, std::string_view bucket,
                             std::string_view key) {
  const auto none = index_kv::Precondition::none();
  StartCommit start = [&](index_kv::Index::CommitDone done) {
    ctx.index().deleteObjectAsync(bucket, key, none, std::move(done));
  };
  std::move_only_function<Committed()> sync = [&] {
    return ctx.index().deleteObject(bucket, key, none);
  };
  co_return co_await awaitCommit(ctx, start, sync);
}

void removeObjectIn(TaskGroup& group, GatewayContext& ctx, std::string_view bucket,
                    std::string_view key, Committed& out) {
  const auto none = index_kv::Precondition::none();
  if (!ctx.index().asyncCommits()) {
    group.spawn([&ctx, bucket, key, none, &out] {
      out = ctx.index().deleteObject(bucket, key, none);
      return Status::ok();
    });
    return;
  }
  startCommit(
      group, ctx,
      [&ctx, bucket, key, none](index_kv::Index::CommitDone done) {
        ctx.index().deleteObjectAsync(bucket, key, none, std::move(done));
      },
      out);
}

}  // namespace granary::gateway
