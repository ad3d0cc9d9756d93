/* worker/ckpt/ckpt_internal.h - what the checkpoint's files share, private
 * to worker/ckpt/ (ckpt.h is the API every caller uses).
 *
 * Owns: the manifest's format name, the CRC of a block, the reading of a
 * step folder's object names (ckpt_list.c) and the check of a step's
 * shards against its manifest (ckpt_reader.c) that the writer's retention
 * and the listing use.
 * Must not: be included outside worker/ckpt/; declare the API (ckpt.h) or
 * the manifest's fields (opaque outside ckpt_reader.c).
 */
#ifndef VITJOB_CKPT_INTERNAL_H
#define VITJOB_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <isa-l/crc.h>

#include "ckpt.h"

#define CKPT_FORMAT "vitjob-checkpoint-1"

/* CRC-32 as in gzip and zlib's crc32() (the manifest's "crc32"), by
 * ISA-L: PCLMULQDQ where the CPU has it, about 3x zlib's table code. */
static inline uint32_t ckpt_crc(const unsigned char *p, size_t n)
{
    return crc32_gzip_refl(0, p, n);
}

/* A step folder's object: the step and the name in the folder; 0 for an
 * object outside the steps (a fence). */
int ckpt_step_object(const char *name, long *step, const char **base);

/* A step's shards against its manifest m, under a listing (names, sizes:
 * n objects): every shard present with its size and, with read_blocks,
 * every block matching its CRC (one streamed read per shard). CKPT_OK;
 * else why says "torn: ..." (CKPT_NOT_FOUND: a shard missing), "corrupt:
 * ..." (CKPT_PERMANENT) or "unreadable: ..." (CKPT_RETRY: storage failing
 * now). */
ckpt_status ckpt_verify_shards(ckpt_store *store, const ckpt_manifest *m, char **names,
                               const uint64_t *sizes, size_t n, int read_blocks, char *why,
                               size_t len);

#endif
