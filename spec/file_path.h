// File name arguments and file writes shared by the trace files and the library's slot files.
// A name with a NUL byte names another file (the system reads it up to the NUL), so every
// function that opens a file by name refuses one (path_nul_problem). A file is replaced all or
// nothing where the file system allows it (ReplacingFile).
#pragma once

#include <streambuf>
#include <string>
#include <vector>

namespace specstate::spec {

// "name = '<path, NULs shown as \0>' holds a NUL byte (at i): no file has that name", or an
// empty string when `path` has no NUL byte.
std::string path_nul_problem(const char* name, const std::string& path);

// The writer of one file, all or nothing where it can be: a regular file (or a new one) is
// written to a temporary file beside it (`<path>.tmp-XXXXXX`, mkstemp: a name of its own), which
// commit() renames over it once complete, so a write that fails (a full disk, a file size limit)
// leaves the old file as it was and no temporary file stays. Through a link, the file it names
// is replaced (the link stays) and keeps its permissions; a new file gets 0666 less the umask. A
// file the caller may not write is refused (error()) and left as it was. Written in place
// instead (truncated, then written): anything that is not a regular file (`/dev/null`, a FIFO),
// a link to no file (which creates the file it names), and a file with no room for a temporary
// beside it (a folder the caller may not write, a name at the length limit). Nothing is thrown:
// ok() / error() and commit()'s result say what failed; the destructor removes a temporary file
// not committed (an exception between the two).
class ReplacingFile {
 public:
  explicit ReplacingFile(const std::string& path);
  ~ReplacingFile();
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;

  bool ok() const noexcept { return fd_ >= 0; }
  // Why the file could not be opened for writing ("Permission denied"); empty when ok().
  const std::string& error() const noexcept { return error_; }
  // The descriptor to write (the temporary's, or the file's in place).
  int fd() const noexcept { return fd_; }
  // A regular file written in place: a failed write leaves it incomplete (false for a temporary,
  // and for a device or a FIFO, which hold no file).
  bool in_place() const noexcept { return in_place_; }
  // Closes the descriptor and, for a temporary, sets its mode and renames it over the file:
  // finish() then replace(). `written`: every write of the caller succeeded (else the temporary
  // is removed; `write_errno`, the failed write's errno, is named). Returns an empty string, or
  // what failed ("writing failed: No space left on device", "renaming ...").
  // A file of another owner or with hard links is written in place (a new file would change its
  // owner and its links). All or nothing against a write that fails (a full disk), not against
  // a crash of the machine (no fsync: an export would wait for the disk).
  std::string commit(bool written, int write_errno = 0);
  // The two steps of commit(), for several files replaced together (write and finish each, then
  // replace each): finish() closes the descriptor (the temporary removed where the writes or the
  // close failed); replace() sets the temporary's mode and renames it over the file (nothing
  // to do in place).
  std::string finish(bool written, int write_errno = 0);
  std::string replace();

 private:
  std::string path_, final_, temp_, error_;
  int fd_ = -1;
  bool in_place_ = false;
  bool replace_mode_ = false;  // an existing file: its permissions go to the temporary
  unsigned mode_ = 0;
};

// An output stream buffer over a file descriptor (ReplacingFile::fd()): 64 KiB buffered, write()
// until each buffer is out; ok() false once a write failed (a full disk, a file size limit).
class FdStreamBuf : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd);
  bool ok() const noexcept { return ok_; }
  int error() const noexcept { return error_; }  // the failed write's errno (0: none)

 protected:
  int_type overflow(int_type c) override;
  int sync() override;

 private:
  bool drain();
  void reset();
  int fd_;
  bool ok_ = true;
  int error_ = 0;
  std::vector<char> buf_;
};

// Writes all `size` bytes to `fd` (retrying short writes and EINTR); false on an error, with
// errno set (EIO for a write that made no progress).
bool write_all(int fd, const void* data, std::size_t size);

}  // namespace specstate::spec
