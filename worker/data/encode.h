/* worker/data/encode.h - raw 8-bit pixels encoded as JPEG or PNG in memory.
 *
 * Owns: the encoders' settings, fixed so that the same pixels always give
 * the same bytes: JPEG through TurboJPEG with the accurate integer forward
 * DCT (libjpeg-turbo's SIMD and C versions of it agree bit for bit),
 * standard Huffman tables, baseline, grayscale as one component and RGB
 * without chroma subsampling (4:4:4), no JFIF/EXIF fields beyond the
 * library's fixed defaults; PNG through libspng, 8-bit grayscale or RGB,
 * zlib's default level, libspng's filter choice, no ancillary chunks (no
 * time, no gamma).
 * Must not: read or write files, log, or know what the images are for.
 *
 * Input: height rows of width * channels bytes, packed (channels 1: gray,
 * 3: interleaved RGB). Output: a malloc'd buffer the caller frees with
 * free(). Errors: 0 or -1 with one line "NAME: REASON" in err, NAME being
 * what the caller passed (e.g. the sample's key).
 */
#ifndef VITJOB_ENCODE_H
#define VITJOB_ENCODE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ENCODE_JPEG = 0, ENCODE_PNG } encode_format;

/* "jpg" or "png": the extension webdataset gives the format */
const char *encode_ext(encode_format f);

/* Encodes pixels (borrowed) as f; quality (1..100) is JPEG's and ignored for
 * PNG. On success *out (free()) holds *out_len bytes; on failure *out is
 * NULL. */
int encode_image(encode_format f, const uint8_t *pixels, int width, int height, int channels,
                 int quality, const char *name, unsigned char **out, size_t *out_len, char *err,
                 size_t errlen);

#endif
