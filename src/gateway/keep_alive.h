// The answer of a long request kept alive, as S3 keeps it: CopyObject and UploadPartCopy
// copy up to 5 GiB, and CompleteMultipartUpload may index a large container, before they
// can answer, and a client whose read timeout passes meanwhile (botocore's is 60 s) gives
// up and retries a request that succeeds. Once `after` has passed with nothing sent, tick()
// sends a 200 head and the XML declaration, then a space each `after` again; the answer is
// then the rest of that body: the result document, or an error as an <Error> document in
// the 200, which the SDKs look for in the answers of these three operations (S3's
// documented behaviour). tick() is called between the request's steps (each stripe), so a
// single step longer than `after` delays the next space.
#pragma once

#include <chrono>

#include "s3_request.h"

namespace granary::gateway {

class KeepAlive {
 public:
  // `after`: 0 sends at the first tick; negative never does.
  KeepAlive(BodySink& sink, std::chrono::milliseconds after);

  // A header of the successful answer known before the long work (the copy source's
  // version id): sent with the 200 head if it goes early, else added to a success.
  void set(std::string name, std::string value);
  Task<void> tick();
  bool started() const { return started_; }
  // What the handler returns: `res` itself if nothing was sent; else `res`'s body written
  // after what was sent (without its XML declaration), and a streamed answer whose
  // status is `res`'s, for the metrics and the access log (the client saw 200 and, in
  // the body, the <Error> whose code that status stands for).
  Task<S3Response> answer(S3Response res);

 private:
  BodySink& sink_;
  HeaderList headers_;
  std::chrono::milliseconds after_;
  std::chrono::steady_clock::time_point due_;
  bool started_ = false;
  bool failed_ = false;  // the client went away: nothing more is sent
};

}  // namespace granary::gateway
