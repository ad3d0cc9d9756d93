/* worker/data/tar.h - tar archives read from a byte stream, and written
 * byte for byte the same every time.
 *
 * Owns: the reader of POSIX ustar archives with GNU long names (typeflag 'L')
 * and pax extended headers ('x': path and size; other keys and global 'g'
 * headers are read and ignored), pulling the archive through a read callback
 * strictly in order, never seeking (so that it can sit on an HTTP or S3
 * stream); and the deterministic writer (fixed mode, owner and mtime, names
 * in the order given).
 * Must not: know webdataset's samples (wds.h), open files or URIs itself, or
 * hold more than one member's data at a time.
 *
 * Written by hand rather than on libarchive (libarchive-dev, which also is
 * not installed where vitjob builds today): libarchive's tar reader takes a
 * stream cut at a member boundary, with no end-of-archive blocks, for a
 * whole archive, and a shard cut short by a dropped connection must be an
 * error, not silently fewer samples; its messages carry no byte offset; and
 * it would bring a runtime library into the worker's image for ~400 lines
 * of one well-specified format. What this reader refuses, each with a
 * message naming the shard, the member where there is one, and the byte
 * offset: a stream that ends anywhere before the two zero blocks that end
 * an archive (inside a header, inside a member's data or padding, or
 * between members); a header whose checksum (unsigned, or signed as old
 * tars wrote it) does not match; a header without the "ustar" magic; a
 * size field that is not octal or base-256; a regular member, long name or
 * pax header larger than its limit; a malformed pax record; a pax or long
 * name header with no member after it; a zero block followed by anything
 * but a second zero block. Directories, links and devices are skipped.
 */
#ifndef VITJOB_TAR_H
#define VITJOB_TAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TAR_BLOCK 512
/* the bound on a GNU long name or a pax header's size */
#define TAR_MAX_META (1u << 20)

/* Reads up to n bytes into buf: returns how many (0 only at the end of the
 * stream), or -1 on an error (the reader then fails, naming the offset). */
typedef ssize_t (*tar_read_fn)(void *ctx, void *buf, size_t n);

/* A stream over bytes in memory (tests, and shards already fetched whole):
 * tar_mem_read with a tar_mem as its ctx. The bytes are borrowed. */
typedef struct {
    const unsigned char *data;
    size_t len, pos;
} tar_mem;
ssize_t tar_mem_read(void *ctx, void *buf, size_t n);

typedef struct {
    const char *name;          /* pax path, else GNU long name, else ustar prefix/name */
    const unsigned char *data; /* size bytes (NULL when 0) */
    uint64_t size;
    uint64_t offset;           /* where its first header (pax or long name included) starts */
} tar_member;

typedef struct tar_reader tar_reader;

/* A reader of the archive that fn(ctx, ...) yields. shard names it in every
 * message (copied); ctx is borrowed and must outlive the reader. Regular
 * members larger than max_member bytes are refused. NULL only when out of
 * memory. Freed with tar_reader_free. */
tar_reader *tar_reader_new(const char *shard, tar_read_fn fn, void *ctx, uint64_t max_member);
void tar_reader_free(tar_reader *r); /* accepts NULL */

/* The next regular member in *m: its name and data are the reader's, valid
 * until the next call or tar_reader_free. Returns 1 (a member), 0 (the
 * archive ended properly: two zero blocks) or -1 with a message in err
 * naming the shard, the member and the byte offset; after 0 or -1 every
 * further call returns the same. */
int tar_reader_next(tar_reader *r, tar_member *m, char *err, size_t errlen);
/* Bytes taken from the stream so far (plus the start given to
 * tar_reader_start_at). */
uint64_t tar_reader_offset(const tar_reader *r);
/* Says that the stream begins at byte off of the archive (a reader resumed
 * at a member's header): offsets and messages count from there. Call
 * before the first tar_reader_next. */
void tar_reader_start_at(tar_reader *r, uint64_t off);

/* Writes n bytes: returns 0, or -1 (the writer then fails). */
typedef int (*tar_write_fn)(void *ctx, const void *buf, size_t n);

typedef struct tar_writer tar_writer;

/* The fixed fields of every member the writer writes. */
#define TAR_WRITER_MODE 0644
#define TAR_WRITER_MTIME 0

/* A writer into fn(ctx, ...); ctx is borrowed. NULL only when out of
 * memory. Freed with tar_writer_free. */
tar_writer *tar_writer_new(tar_write_fn fn, void *ctx);
void tar_writer_free(tar_writer *w); /* accepts NULL */
/* Appends a regular member: ustar (mode TAR_WRITER_MODE, uid/gid 0, no
 * owner names, mtime TAR_WRITER_MTIME); a name longer than ustar's
 * prefix/name fields hold gets a pax header ("././@PaxHeader", path=).
 * name must not be empty. Returns 0 or -1 with a message naming the member
 * in err. */
int tar_writer_add(tar_writer *w, const char *name, const void *data, size_t n, char *err,
                   size_t errlen);
/* Writes the end of the archive (two zero blocks). Returns 0 or -1. */
int tar_writer_finish(tar_writer *w, char *err, size_t errlen);

#endif
