/* api/version.h - the release and the build's identity, one home for both
 * programs (`vitjob-worker --version`, `vitjob-operator --version`, the
 * chart's appVersion and the images' tags follow VJ_RELEASE).
 * Must not: know what either program links; each says its own backends.
 */
#ifndef VJ_VERSION_H
#define VJ_VERSION_H

#define VJ_RELEASE "0.1.0"

/* The git commit the build came from ("unknown" outside a git checkout,
 * unless `make GIT_COMMIT=...` said it): a static string. */
const char *vj_git_commit(void);

#endif
