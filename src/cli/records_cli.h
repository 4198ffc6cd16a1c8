// `granary records ...`: command-line verbs for the record index (docs/record-index.md,
// section "CLI"), over the S3 API with SigV4 (s3_client.h).
#pragma once

namespace granary::cli {

// argv[0] is "records", argv[1] the verb. Returns the process exit status: 0 on success,
// 1 when a request or the local I/O failed (the reason on standard error), 2 on a usage
// error.
int records(int argc, char** argv);

// `granary admin ...`: operator verbs over the admin API (/_granary/admin/, root only;
// docs/operations.md). Same options and exit statuses.
int admin(int argc, char** argv);

}  // namespace granary::cli
