/*
 * net - listening sockets.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "net.h"

/* config_check.c measures listen paths with NET_UNIX_PATH_MAX: one size. */
_Static_assert(NET_UNIX_PATH_MAX == sizeof(((struct sockaddr_un *)0)->sun_path),
               "NET_UNIX_PATH_MAX is sizeof(sun_path)");

#define NET_HOST_MAX 256

/*
 * Make <path> free for bind(): nothing there, or a stale socket (one that
 * refuses connections: its listener is gone), which is removed. A live
 * socket, a path we cannot probe, or anything else is left alone and
 * refused with a reason in <err>. Returns 0 or -1.
 */
static int net_unix_claim(const char *addr, const struct sockaddr_un *sun,
                          char *err, size_t errlen)
{
	struct stat st;
	int fd, rc;

	if (lstat(sun->sun_path, &st) == -1) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
		return -1;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "listen %s: the path exists and is not a socket; "
		         "refusing to remove it", addr);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
		return -1;
	}
	/* a live listener accepts (or, backlog full, answers EAGAIN) */
	rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	if (rc == -1 && errno == ECONNREFUSED) {
		close(fd);
		if (unlink(sun->sun_path) == -1 && errno != ENOENT) {
			snprintf(err, errlen, "listen %s: cannot remove the stale socket: %s", addr,
			         strerror(errno));
			return -1;
		}
		return 0;
	}
	if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS)
		snprintf(err, errlen, "listen %s: the socket is in use by another process "
		         "(another agent?); refusing to take it over", addr);
	else
		snprintf(err, errlen, "listen %s: cannot tell whether the socket is in use: %s",
		         addr, strerror(errno));
	close(fd);
	return -1;
}

/* Bind a unix socket at <addr>'s path (see net_unix_claim), recorded in <u>. */
static int net_listen_unix(const char *addr, struct net_unix *u, char *err, size_t errlen)
{
	struct sockaddr_un sun;
	const char *path = addr + 5;
	struct stat st;
	int fd;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (path[0] == '\0' || strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(err, errlen, "listen %s: bad unix socket path", addr);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path));
	if (net_unix_claim(addr, &sun, err, errlen) == -1)
		return -1;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		goto fail;
	/* EADDRINUSE here: another process bound the path since the claim */
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1)
		goto fail;
	if (stat(path, &st) == -1) {
		int e = errno;

		unlink(path);
		errno = e;
		goto fail;
	}
	/* HAProxy usually runs as another user in the same group */
	chmod(path, 0660);
	snprintf(u->path, sizeof(u->path), "%s", path);
	u->dev = st.st_dev;
	u->ino = st.st_ino;
	return fd;
fail:
	snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
	if (fd != -1)
		close(fd);
	return -1;
}

void net_unix_remove(struct net_unix *u)
{
	struct stat st;

	if (!u->path[0])
		return;
	if (lstat(u->path, &st) == 0 && st.st_dev == u->dev && st.st_ino == u->ino)
		unlink(u->path);
	u->path[0] = '\0';
}

int net_listen(const char *addr, struct net_unix *u, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char host[NET_HOST_MAX];
	char *port;
	int fd = -1, one = 1, rc;

	memset(u, 0, sizeof(*u));
	if (strncmp(addr, "unix:", 5) == 0) {
		fd = net_listen_unix(addr, u, err, errlen);
		if (fd == -1)
			return -1;
	} else {
		snprintf(host, sizeof(host), "%s", addr);
		port = strrchr(host, ':');
		if (!port) {
			snprintf(err, errlen, "listen %s: expected host:port", addr);
			return -1;
		}
		*port++ = '\0';
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			host[strlen(host) - 1] = '\0';
			memmove(host, host + 1, strlen(host));
		}
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
		rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
		if (rc != 0) {
			snprintf(err, errlen, "listen %s: %s", addr, gai_strerror(rc));
			return -1;
		}
		fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd == -1)
			goto fail;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, res->ai_addr, res->ai_addrlen) == -1)
			goto fail;
		freeaddrinfo(res);
		res = NULL;
	}
	/* HAProxy reconnects in bursts on reload (#2868): a deep backlog */
	if (listen(fd, 1024) == -1)
		goto fail;
	return fd;
fail:
	snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
	if (res)
		freeaddrinfo(res);
	if (fd != -1)
		close(fd);
	net_unix_remove(u);
	return -1;
}
