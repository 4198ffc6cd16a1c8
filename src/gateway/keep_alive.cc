#include "keep_alive.h"

#include <string_view>

namespace granary::gateway {
namespace {
constexpr std::string_view kDeclaration = R"(<?xml version="1.0" encoding="UTF-8"?>)";

std::span<const uint8_t> bytesOf(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
}  // namespace

KeepAlive::KeepAlive(BodySink& sink, std::chrono::milliseconds after)
    : sink_(sink), after_(after), due_(std::chrono::steady_clock::now() + after) {}

void KeepAlive::set(std::string name, std::string value) {
  headers_.emplace_back(std::move(name), std::move(value));
}

Task<void> KeepAlive::tick() {
  if (after_.count() < 0 || failed_ || std::chrono::steady_clock::now() < due_) co_return;
  Status st = Status::ok();
  if (!started_) {
    started_ = true;
    S3Response head;
    head.headers = headers_;
    head.set("Content-Type", "application/xml");
    st = co_await sink_.writeHead(head, BodySink::kUnknownLength);
    // Whitespace may follow the declaration, not precede it: the document's first bytes.
    const std::string opening = std::string(kDeclaration) + "\n";
    if (st.isOk()) st = co_await sink_.write(bytesOf(opening));
  } else {
    st = co_await sink_.write(bytesOf(" "));
  }
  // The server's own flush sends what a sink holds back; a space must go now.
  if (st.isOk()) st = co_await sink_.flush();
  failed_ = !st.isOk();
  due_ = std::chrono::steady_clock::now() + after_;
}

Task<S3Response> KeepAlive::answer(S3Response res) {
  if (!started_) {
    if (res.status < 300) res.headers.insert(res.headers.end(), headers_.begin(), headers_.end());
    co_return res;
  }
  std::string_view body = res.body;
  if (body.starts_with(kDeclaration)) body.remove_prefix(kDeclaration.size());
  if (!failed_) {
    Status st = co_await sink_.write(bytesOf(body));
    if (st.isOk()) st = co_await sink_.finish();
    failed_ = !st.isOk();
  }
  S3Response sent;
  sent.status = res.status;
  sent.streamed = true;
  sent.close = res.close || failed_;
  co_return sent;
}

}  // namespace granary::gateway
