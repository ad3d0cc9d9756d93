/* lib/file.h - files the programs read and write, opened safely.
 *
 * Owns: opening inputs without blocking (a FIFO or a device named as an
 * input never hangs a program: anything but a regular file is refused),
 * checking an output path before any work is done, and replacing an output
 * atomically through a temporary file that a later run recognises and
 * removes if its writer died.
 * Must not: log, or know what the files hold.
 *
 * Temporary files: `.vitjob-tmp.<16 hex digits>.<6 random characters>` in the
 * target's directory, where the hex digits are a hash of the target's name.
 * The writer holds an exclusive flock(2) on it while writing; whoever
 * later finds one it can lock (its writer is gone) removes it.
 *
 * Errors: functions return 0 or -1 with one line naming the path in err.
 */
#ifndef VITJOB_FILE_H
#define VITJOB_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "buf.h"

/* What a message of this module says about path, without the leading
 * "PATH: " (for callers that name the path themselves); msg itself when it
 * does not start so. Borrowed from msg. */
const char *file_reason(const char *msg, const char *path);

/* "a directory", "a FIFO", "a character device", ... for a st_mode. */
const char *file_kind(mode_t mode);

/* Opens path read-only, never blocking on a FIFO or device, and refuses
 * anything that is not a regular file ("PATH: is a directory, not a
 * regular file"). Returns the descriptor (the caller closes it) with its
 * size in *size (may be NULL), or -1. */
int file_open_regular(const char *path, off_t *size, char *err, size_t errlen);

/* Appends the whole regular file at path to b (b->max bounds it: "larger
 * than N bytes"). Returns 0 or -1. */
int file_read(buf *b, const char *path, char *err, size_t errlen);

/* Checks, before any work, that path can be written as an output: not too
 * long, its directory exists and takes new files (probed by creating and
 * removing a temporary file, so read-only file systems and permissions are
 * caught as they are), and path is absent or a regular file (not a
 * directory, device, FIFO, socket or symbolic link). Removes temporaries
 * of path left by writers that died; *removed (may be NULL) counts them.
 * Returns 0 or -1. */
int file_check_output(const char *path, int *removed, char *err, size_t errlen);

/* Creates or truncates path for writing a stream (a log of metrics), as a
 * regular file only: a device, FIFO, directory or symbolic link is refused
 * without being opened for writing. Returns the descriptor or -1. */
int file_create(const char *path, char *err, size_t errlen);

/* An atomic replacement of one file: write to file_atomic_fd(a), then
 * file_atomic_commit (fsync, rename over path, fsync the directory) or
 * file_atomic_abort (removes the temporary). Both free a. The target must
 * be absent or a regular file, else begin fails. */
typedef struct file_atomic file_atomic;
int file_atomic_begin(file_atomic **out, const char *path, char *err, size_t errlen);
int file_atomic_fd(const file_atomic *a);
int file_atomic_commit(file_atomic *a, char *err, size_t errlen);
void file_atomic_abort(file_atomic *a); /* accepts NULL */

/* Writes len bytes, retrying short writes and EINTR. Returns 0 or -1 (errno). */
int file_write_all(int fd, const void *data, size_t len);

#endif
