#include "specstate/spec/file_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace specstate::spec {

std::string path_nul_problem(const char* name, const std::string& path) {
  const std::size_t nul = path.find('\0');
  if (nul == std::string::npos) return {};
  std::string shown;
  for (char c : path) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  return std::string(name) + " = '" + shown + "' holds a NUL byte (at " + std::to_string(nul) +
         "): no file has that name";
}

namespace {
// The process's umask: from /proc/self/status (Linux), which reads it without changing it; else
// by setting it and setting it back (a moment in which another thread's create would see 0).
mode_t process_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) {
      try {
        return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8) & 0777);
      } catch (...) {
        break;
      }
    }
  }
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}
}  // namespace

ReplacingFile::ReplacingFile(const std::string& path) : path_(path), final_(path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);  // follows links
  const bool exists = fs::exists(status);
  const bool dangling = !exists && fs::is_symlink(fs::symlink_status(path, ec));
  const auto open_in_place = [&] {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      error_ = std::strerror(errno);
      return;
    }
    struct stat st {};
    in_place_ = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);  // not a device or a FIFO
  };
  if ((exists && !fs::is_regular_file(status)) || dangling) {
    open_in_place();
    return;
  }
  if (exists) {
    const fs::path real = fs::canonical(path, ec);
    if (!ec) final_ = real.string();
    if (::faccessat(AT_FDCWD, final_.c_str(), W_OK, AT_EACCESS) != 0) {
      error_ = std::strerror(errno);
      return;
    }
    // A file of another owner, or one with other names (hard links): a new file renamed over it
    // would change its owner and group (or fail in a sticky folder such as /tmp) and part it from
    // its other names, so it is written in place, as any writer of it would.
    struct stat st {};
    if (::stat(final_.c_str(), &st) == 0 && (st.st_uid != ::geteuid() || st.st_nlink > 1)) {
      open_in_place();
      return;
    }
    replace_mode_ = true;
    mode_ = static_cast<unsigned>(status.permissions()) & 07777;
  }
  // Written through mkstemp's descriptor (a umask that clears the owner's write bit would make
  // the file unopenable by name), its mode set once it is complete.
  std::string name = final_ + ".tmp-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    // No room for a temporary beside it (a folder the caller may not write, a name at the length
    // limit): the file itself. Any other failure (a full disk, no inode left) refuses: writing
    // in place then would destroy the file the temporary protects.
    const int err = errno;
    if (err == EACCES || err == EPERM || err == ENAMETOOLONG) {
      open_in_place();
    } else {
      error_ = std::strerror(err);
    }
    return;
  }
  fd_ = fd;
  temp_ = name;
}

ReplacingFile::~ReplacingFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

std::string ReplacingFile::commit(bool written, int write_errno) {
  const std::string failed = finish(written, write_errno);
  return failed.empty() ? replace() : failed;
}

std::string ReplacingFile::finish(bool written, int write_errno) {
  if (fd_ < 0) return error_.empty() ? std::string("not open") : error_;
  // No fsync: the guarantee is against a write that fails, not a crash of the machine, and a
  // slot export (tens of MB, an engine's preemption) would wait for the disk on every call.
  const int closed = ::close(fd_);
  const int close_errno = errno;
  fd_ = -1;
  if (!written || closed != 0) {
    if (!temp_.empty()) ::unlink(temp_.c_str());
    temp_.clear();
    const int err = !written ? write_errno : close_errno;
    return "writing failed" + (err != 0 ? std::string(": ") + std::strerror(err) : std::string());
  }
  return {};
}

std::string ReplacingFile::replace() {
  if (temp_.empty()) return {};
  const mode_t mode = replace_mode_ ? static_cast<mode_t>(mode_) : (0666 & ~process_umask());
  ::chmod(temp_.c_str(), mode);
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    temp_.clear();
    return std::string("renaming the written file over it failed: ") + std::strerror(err);
  }
  temp_.clear();
  return {};
}

FdStreamBuf::FdStreamBuf(int fd) : fd_(fd), buf_(1 << 16) { reset(); }

FdStreamBuf::int_type FdStreamBuf::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

int FdStreamBuf::sync() { return drain() ? 0 : -1; }

bool FdStreamBuf::drain() {
  if (ok_) {
    ok_ = write_all(fd_, pbase(), static_cast<std::size_t>(pptr() - pbase()));
    if (!ok_) error_ = errno;
  }
  reset();
  return ok_;
}

void FdStreamBuf::reset() { setp(buf_.data(), buf_.data() + buf_.size()); }

bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // no progress and no error: reported as an I/O error
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace specstate::spec
