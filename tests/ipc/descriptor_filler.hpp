// descriptor_filler: fills this process's descriptor table so that the next call that makes a
// descriptor (dup, socketpair, memfd_create, a descriptor received with SCM_RIGHTS) fails with
// EMFILE, as in a process that reached its RLIMIT_NOFILE.
//
//   soma_test::ipc::descriptor_filler full;   // lowers the soft limit, then fills the table
//   ... calls that must report EMFILE ...
//   full.release(1);                           // one slot free again
//   full.release_all();                        // (or the destructor) gives back everything
//
// The soft limit is lowered to a little above the descriptors open now, so filling takes a
// few dup calls, not a million. For role processes (fork + exec): the change is process-wide.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace soma_test::ipc {

class descriptor_filler {
 public:
  descriptor_filler() {
    if (::getrlimit(RLIMIT_NOFILE, &previous_) != 0) return;
    const int open_now = highest_open_descriptor() + 1;
    rlimit lowered = previous_;
    lowered.rlim_cur = static_cast<rlim_t>(open_now + kHeadroom);
    if (lowered.rlim_cur > previous_.rlim_cur) lowered.rlim_cur = previous_.rlim_cur;
    if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0) return;
    lowered_ = true;
    for (;;) {
      const int fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) {
        full_ = errno == EMFILE;
        break;
      }
      fillers_.push_back(fd);
    }
  }
  ~descriptor_filler() { release_all(); }
  descriptor_filler(const descriptor_filler&) = delete;
  descriptor_filler& operator=(const descriptor_filler&) = delete;

  /// Whether the table is full now (the last dup failed with EMFILE).
  bool full() const { return lowered_ && full_; }
  /// The soft RLIMIT_NOFILE in force while filled.
  rlim_t limit() const {
    rlimit now{};
    return ::getrlimit(RLIMIT_NOFILE, &now) == 0 ? now.rlim_cur : 0;
  }
  /// Closes `count` of the fillers (the table has that many free slots again).
  void release(std::size_t count) {
    for (; count > 0 && !fillers_.empty(); --count) {
      ::close(fillers_.back());
      fillers_.pop_back();
    }
  }
  /// Closes every filler and puts the previous limit back.
  void release_all() {
    release(fillers_.size());
    if (lowered_) (void)::setrlimit(RLIMIT_NOFILE, &previous_);
    lowered_ = false;
  }

 private:
  static constexpr int kHeadroom = 16;

  static int highest_open_descriptor() {
    int highest = 2;
    for (int fd = 0; fd < 4096; ++fd) {
      if (::fcntl(fd, F_GETFD) >= 0) highest = fd;
    }
    return highest;
  }

  rlimit previous_{};
  bool lowered_ = false;
  bool full_ = false;
  std::vector<int> fillers_;
};

}  // namespace soma_test::ipc
