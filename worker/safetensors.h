/* worker/safetensors.h - reading and writing safetensors files.
 *
 * Owns: the file format (8-byte little-endian header length, a JSON header
 * naming each tensor's dtype, shape and byte range, then raw little-endian
 * data), validated on read, written atomically (temp file, fsync, rename).
 * Must not: know model names; model_io.c maps tensors to the model.
 * No well-kept C library for this format is packaged; the header is cJSON.
 */
#ifndef VITJOB_SAFETENSORS_H
#define VITJOB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_I64, ST_I32, ST_BF16 } st_dtype;

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data;     /* borrowed */
} st_tensor;

/* Writes the tensors (in the given order) and optional string metadata pairs
 * (meta_kv[2*i] = key, meta_kv[2*i+1] = value) to path, atomically. Returns 0,
 * or -1 with a message naming the path in err. */
int st_write(const char *path, const st_tensor *tensors, int n, const char *const *meta_kv,
             int n_meta, char *err, size_t errlen);

typedef struct st_file st_file;

/* Reads and validates a whole file. On success *out is the caller's, freed
 * with st_close. Returns 0 or -1 with a message naming the path in err. */
int st_open(st_file **out, const char *path, char *err, size_t errlen);
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

#endif
