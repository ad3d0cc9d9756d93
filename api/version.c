/* api/version.c - see version.h. The commit comes from the Makefile
 * (-DVJ_GIT_COMMIT on this file only, so a new commit relinks, never
 * recompiles the rest). */
#include "version.h"

#ifndef VJ_GIT_COMMIT
#define VJ_GIT_COMMIT "unknown"
#endif

const char *vj_git_commit(void) { return VJ_GIT_COMMIT; }
