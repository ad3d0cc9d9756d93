/* worker/ckpt/safetensors.h - reading and writing safetensors files.
 *
 * Owns: the file format (8-byte little-endian header length, a JSON header
 * naming each tensor's dtype, shape and byte range, then raw little-endian
 * data), validated on read by the rules of the reference implementation
 * (Hugging Face's `safetensors` crate), and written atomically through
 * lib/file.h's file_atomic_* (never over a device, FIFO or directory; a
 * killed writer's temporary is recognised and removed by file_check_output).
 * Must not: know model names; model_io.c maps tensors to the model.
 * No well-kept C library for this format is packaged; the header is cJSON.
 *
 * What st_open refuses, each with a message naming the file (and the tensor
 * where there is one): anything but a regular file (a directory, a FIFO);
 * fewer than 8 bytes; a header longer than ST_MAX_HEADER bytes or than the
 * file; a header that is not valid UTF-8, does not start with '{', is not
 * one JSON object (trailing whitespace allowed, as the writer pads with
 * spaces), or holds a control character or an escaped NUL in a string; a
 * name given twice; `__metadata__` that is not an object of strings; a
 * tensor entry without exactly one dtype, shape and data_offsets; a dtype
 * this reader does not know; a shape of more than 8 dimensions or whose
 * byte size overflows; data_offsets that are not two integers
 * begin <= end <= the data's length, or whose length is not the dtype's
 * size times the shape's element count; tensors whose ranges overlap or
 * leave a hole, or that together do not cover the data region exactly.
 */
#ifndef VITJOB_SAFETENSORS_H
#define VITJOB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* the reference implementation's bound on the header's length */
#define ST_MAX_HEADER 100000000u

typedef enum { ST_F32, ST_I64, ST_I32, ST_BF16 } st_dtype;

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data;     /* borrowed */
} st_tensor;

/* Writes the tensors (in the given order) and optional string metadata pairs
 * (meta_kv[2*i] = key, meta_kv[2*i+1] = value) to path, atomically. Names
 * must be unique and not "__metadata__". Returns 0, or -1 with a message
 * naming the path in err (path is then unchanged). */
int st_write(const char *path, const st_tensor *tensors, int n, const char *const *meta_kv,
             int n_meta, char *err, size_t errlen);

typedef struct st_file st_file;

/* Reads and validates a whole file. On success *out is the caller's, freed
 * with st_close. Returns 0 or -1 with a message naming the path in err. */
int st_open(st_file **out, const char *path, char *err, size_t errlen);
/* The same from a whole file's bytes in memory (e.g. an S3 object), named
 * `name` in messages: buf (malloc'd, len bytes) is taken over, freed by
 * st_close or here on failure; the tensors' data point into it. */
int st_open_mem(st_file **out, void *buf, size_t len, const char *name, char *err,
                size_t errlen);
void st_close(st_file *f); /* accepts NULL */
int st_count(const st_file *f);
/* The i-th tensor (header order is not kept: sorted by data offset). Its
 * name and data are borrowed from f. */
const st_tensor *st_at(const st_file *f, int i);
/* The tensor of that name, or NULL. Borrowed from f. */
const st_tensor *st_find(const st_file *f, const char *name);
/* Metadata value, or NULL. Borrowed from f. */
const char *st_meta(const st_file *f, const char *key);
size_t st_dtype_size(st_dtype t);
/* "F32", "I64", "I32", "BF16" */
const char *st_dtype_name(st_dtype t);

#endif
