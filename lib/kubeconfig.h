/* lib/kubeconfig.h - where the Kubernetes API is and how to authenticate to it.
 *
 * Owns: reading a kubeconfig file (YAML, through libyaml: current context,
 * server, namespace, bearer token or tokenFile, client certificate and key,
 * CA data or file, insecure-skip-tls-verify) and the in-cluster configuration
 * (service-account token, CA bundle and namespace under
 * /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT);
 * re-reading a token file when it is rotated.
 * Must not: talk to the network, or log or put into an error message the
 * token or the private key.
 *
 * Errors: functions return 0 on success or -1 with a one-line message naming
 * the file and the key in err.
 */
#ifndef VITJOB_KUBECONFIG_H
#define VITJOB_KUBECONFIG_H

#include <stddef.h>

#include "http.h"

typedef struct kube_config kube_config;

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* Loads the kubeconfig at path and resolves its current context.
 * *out is owned by the caller (kube_config_free). */
int kube_config_load_kubeconfig(const char *path, kube_config **out, char *err, size_t errlen);

/* Same, from YAML text already in memory; origin names it in messages and is
 * the directory relative file references resolve against (its dirname). */
int kube_config_load_kubeconfig_string(const char *text, size_t len, const char *origin,
                                       kube_config **out, char *err, size_t errlen);

/* In-cluster: root = the service-account directory (NULL = KUBE_SA_DIR; tests
 * pass a fake one) holding token, ca.crt and optionally namespace; the server
 * is https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. */
int kube_config_in_cluster(const char *root, kube_config **out, char *err, size_t errlen);

/* The usual order: $KUBECONFIG (its first path), else in-cluster when
 * KUBERNETES_SERVICE_HOST is set, else ~/.kube/config. */
int kube_config_load_default(kube_config **out, char *err, size_t errlen);

void kube_config_free(kube_config *c); /* accepts NULL; wipes the secrets */

/* Borrowed strings, valid until kube_config_free. */
const char *kube_config_server(const kube_config *c);    /* "https://host:port", no trailing / */
const char *kube_config_namespace(const kube_config *c); /* context namespace, else "default" */
const char *kube_config_source(const kube_config *c);    /* file or directory it came from */

/* The TLS settings as http_options; the pointers are borrowed from c. */
void kube_config_http_options(const kube_config *c, http_options *o);

/* The current bearer token into buf ("" when the config has none). A token
 * file (tokenFile, in-cluster token) is read again when its inode, device,
 * size, mtime or ctime (to the nanosecond) changed, or 60 s after the last
 * read, so rotated tokens are picked up, also those of the same length.
 * Returns 0, or -1 with err naming the file (never the token). */
int kube_config_token(kube_config *c, char *buf, size_t buflen, char *err, size_t errlen);

/* Decodes standard base64 (whitespace ignored) into a new buffer, NUL-terminated
 * for convenience. Returns 0 (*out owned by the caller, free()), -1 if invalid. */
int kube_base64_decode(const char *in, size_t len, char **out, size_t *out_len);

#endif
