/* lib/termmsg.h - the termination message: the one line a program leaves
 * where Kubernetes reads it when its container ends (the file that the
 * container's terminationMessagePath names, default /dev/termination-log),
 * so that `kubectl describe pod`, the pod's containerStatuses and the
 * ViTJob's Failed condition carry the program's own error.
 *
 * Owns: where that file is (termmsg_init: the path the environment names,
 * as the pod template sets it; else /dev/termination-log, only when it
 * exists and is writable; else none, as outside a pod) and writing it, at
 * most TERMMSG_MAX bytes (what the kubelet keeps), cut at a whole UTF-8
 * character.
 * Must not: create any file but the one the environment names, allocate,
 * or fail its caller (a message that cannot be written is dropped: the log
 * still has the line).
 */
#ifndef VITJOB_TERMMSG_H
#define VITJOB_TERMMSG_H

#include <stddef.h>

#define TERMMSG_DEFAULT_PATH "/dev/termination-log"
#define TERMMSG_MAX 4096 /* the kubelet reads no more of the file */

/* Picks the file: env_path when non-empty (the file is created if missing),
 * else TERMMSG_DEFAULT_PATH when it exists and is writable, else none.
 * Returns the path chosen (static storage) or NULL. */
const char *termmsg_init(const char *env_path);

/* Replaces the file's content with text's first TERMMSG_MAX bytes (cut at a
 * whole UTF-8 character). 0 written, -1 no file chosen or not written. */
int termmsg_write(const char *text, size_t len);

#endif
