// core/atomic_file: a whole file replaced at once. The text goes to PATH.tmp.<pid> in the same folder, is fsynced and
// renamed over PATH, and the folder is fsynced: a reader sees the old file or the new one, never part of one, even
// after a crash; on any failure the temporary file is removed.
//
//   TT_TRY(write_file_atomically("metrics.json", j.dump(2)));
#pragma once

#include <string>

#include "core/status.h"

namespace tt {

Status write_file_atomically(const std::string& path, const std::string& text);

}  // namespace tt
