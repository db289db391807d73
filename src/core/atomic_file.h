// core/atomic_file: a whole file replaced at once. The text goes to a temporary file beside PATH
// (temporary_path: PATH.tmp.<host>.<pid>), is fsynced and renamed over PATH, and the folder is fsynced: a reader sees
// the old file or the new one, never part of one, even after a crash; on any failure the temporary file is removed.
// What a killed writer leaves is removed by the next run (remove_stale_temporaries). AtomicFile does the same for a
// file written in pieces (one too large to hold in memory).
//
//   TT_TRY(write_file_atomically("metrics.json", j.dump(2)));
//   TT_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::open("logits.npy"));
//   TT_TRY(f.write(header.data(), header.size()));  // ... and more
//   TT_TRY(f.commit());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace tt {

Status write_file_atomically(const std::string& path, const std::string& text);

// A file put in place at once after it was written in pieces: open() creates the temporary file beside PATH, write()
// appends to it, commit() fsyncs it, renames it over PATH and fsyncs the folder. A failed write, or destruction before
// commit(), removes the temporary file and leaves PATH as it was.
class AtomicFile {
 public:
  static Result<AtomicFile> open(const std::string& path);
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&& o) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();
  Status write(const void* data, size_t bytes);
  Status commit();
  const std::string& path() const { return path_; }

 private:
  AtomicFile() = default;
  void abandon();
  std::string path_, tmp_;
  int fd_ = -1;
};

// Creates `dir` and the folders above it that are missing (mkdir -p), then checks that it is a folder. `what` names
// it in errors ("checkpoint directory", "launch --log-dir").
Status make_directories(const std::string& dir, const char* what);

// The temporary file this process writes PATH through: PATH.tmp.<host>.<pid> (core/tensorfile.h uses it too).
std::string temporary_path(const std::string& path);

// Note [stale temporaries]
// A writer killed mid-write leaves its temporary file behind (a checkpoint's is as large as the model: 68-304 MB
// each in issue 25's audit). In folder `dir`, removes the files whose names start with `prefix` and end in
// .tmp.<host>.<pid> (or .tmp.<pid>, as versions before this one named them) written on this host by a process that
// is gone (kill(pid, 0) fails with ESRCH). A file of another host is never touched: on a shared file system its
// writer may be alive. A process that reused the pid keeps the file (the safe side).
struct RemovedFiles {
  int files = 0;
  int64_t bytes = 0;
};
RemovedFiles remove_stale_temporaries(const std::string& dir, const std::string& prefix);

}  // namespace tt
