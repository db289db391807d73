#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace tt {

Status make_directories(const std::string& dir, const char* what) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return make_status(StatusCode::kIoError, "cannot create %s '%s': %s", what, partial.c_str(),
                         std::strerror(errno));
  }
  struct stat st {};
  TT_RETURN_IF(::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), kIoError, "%s '%s' is not a directory", what,
               dir.c_str());
  return Status::ok();
}
namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h = buf;
  for (char& c : h)
    if (c == '/') c = '_';
  return h;
}

}  // namespace

std::string temporary_path(const std::string& path) {
  return path + ".tmp." + host_name() + "." + std::to_string(getpid());
}

RemovedFiles remove_stale_temporaries(const std::string& dir, const std::string& prefix) {
  RemovedFiles out;
  DIR* d = opendir(dir.empty() ? "." : dir.c_str());
  if (d == nullptr) return out;
  const std::string here = host_name();
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t t = name.rfind(".tmp.");
    if (t == std::string::npos) continue;
    const std::string rest = name.substr(t + 5);  // <host>.<pid> or <pid>
    const size_t dot = rest.rfind('.');
    const std::string pid_text = dot == std::string::npos ? rest : rest.substr(dot + 1);
    const std::string host = dot == std::string::npos ? here : rest.substr(0, dot);
    if (pid_text.empty() || pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (host != here) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(pid_text.c_str()));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    const std::string full = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(full.c_str()) == 0) {
      ++out.files;
      out.bytes += static_cast<int64_t>(st.st_size);
    }
  }
  closedir(d);
  return out;
}

Result<AtomicFile> AtomicFile::open(const std::string& path) {
  AtomicFile f;
  f.path_ = path;
  f.tmp_ = temporary_path(path);
  f.fd_ = ::open(f.tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TT_RETURN_IF(f.fd_ < 0, kIoError, "cannot write '%s': %s", path.c_str(), std::strerror(errno));
  return f;
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(std::exchange(o.fd_, -1)) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
  if (this != &o) {
    abandon();
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());  // no temporary file is left behind
  fd_ = -1;
}

Status AtomicFile::write(const void* data, size_t bytes) {
  TT_RETURN_IF(fd_ < 0, kFailedPrecondition, "writing '%s' after it was put in place or given up", path_.c_str());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      abandon();
      return make_status(StatusCode::kIoError, "writing '%s' failed: %s", path_.c_str(), std::strerror(err));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status AtomicFile::commit() {
  TT_RETURN_IF(fd_ < 0, kFailedPrecondition, "'%s' was put in place or given up already", path_.c_str());
  int err = ::fsync(fd_) == 0 ? 0 : errno;
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err == 0 && ::rename(tmp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp_.c_str());
    return make_status(StatusCode::kIoError, "writing '%s' failed: %s", path_.c_str(), std::strerror(err));
  }
  // The rename is durable once the folder is.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash == 0 ? 1 : slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

Status write_file_atomically(const std::string& path, const std::string& text) {
  TT_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::open(path));
  TT_TRY(f.write(text.data(), text.size()));
  return f.commit();
}

}  // namespace tt
