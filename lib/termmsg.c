/* lib/termmsg.c - see termmsg.h. Owns the choice of the termination
 * message file and the one write to it; the line itself is log_final's. */
#include "termmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char path[4096];
static int create; /* the environment named it: made if missing */

const char *termmsg_init(const char *env_path)
{
    path[0] = '\0';
    create = 0;
    if (env_path && env_path[0] && strlen(env_path) < sizeof path) {
        snprintf(path, sizeof path, "%s", env_path);
        create = 1;
    } else if (access(TERMMSG_DEFAULT_PATH, W_OK) == 0) {
        snprintf(path, sizeof path, "%s", TERMMSG_DEFAULT_PATH);
    }
    return path[0] ? path : NULL;
}

int termmsg_write(const char *text, size_t len)
{
    if (path[0] == '\0')
        return -1;
    if (len > TERMMSG_MAX) { /* back to the start of a character */
        len = TERMMSG_MAX;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80)
            len--;
    }
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    return close(fd) == 0 && done == len ? 0 : -1;
}
