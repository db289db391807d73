#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

Status write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = temporary_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TT_RETURN_IF(fd < 0, kIoError, "cannot write '%s': %s", path.c_str(), std::strerror(errno));
  size_t done = 0;
  bool ok = true;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());  // no temporary file is left behind
    return make_status(StatusCode::kIoError, "writing '%s' failed: %s", path.c_str(), std::strerror(err));
  }
  // The rename is durable once the folder is.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

}  // namespace tt
