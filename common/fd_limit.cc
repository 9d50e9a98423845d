#include "common/fd_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>

#include "common/log.h"

namespace chorus {
namespace {

// Descriptors left over for what the process opens later (files, pipes, eventfds).
constexpr int64_t kSpareFds = 64;

}  // namespace

int64_t OpenFdCount() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  int64_t n = -1;  // the directory's own descriptor
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n < 0 ? 0 : n;
}

Status ReserveFds(int64_t more, const std::string& what, const std::string& lower) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return IoError("getrlimit(RLIMIT_NOFILE)", errno);
  const int64_t open = OpenFdCount();
  const int64_t need = open + more + kSpareFds;
  const auto fits = [need](rlim_t l) { return l == RLIM_INFINITY || static_cast<int64_t>(l) >= need; };
  if (fits(lim.rlim_cur)) return Status::Ok();
  const rlim_t soft = lim.rlim_cur;
  if (fits(lim.rlim_max)) {
    lim.rlim_cur = static_cast<rlim_t>(need);
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      CHORUS_INFO(what << ": raised the soft RLIMIT_NOFILE from " << soft << " to " << need);
      return Status::Ok();
    }
  }
  return Unavailable(what + " needs " + std::to_string(more) + " file descriptors (" + std::to_string(need) +
                     " with the " + std::to_string(open) + " open and " + std::to_string(kSpareFds) +
                     " spare), but RLIMIT_NOFILE is " + std::to_string(soft) + " (hard limit " +
                     (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
                     "); raise it (ulimit -n) or " + lower);
}

}  // namespace chorus
