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

#define NET_HOST_MAX 256

static int net_listen_unix(const char *addr, char *unix_path, size_t unix_path_len,
                           char *err, size_t errlen)
{
	struct sockaddr_un sun;
	const char *path = addr + 5;
	int fd;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (path[0] == '\0' || strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(err, errlen, "listen %s: bad unix socket path", addr);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		goto fail;
	unlink(path);   /* a stale socket from a previous run */
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1)
		goto fail;
	/* HAProxy usually runs as another user in the same group */
	chmod(path, 0660);
	snprintf(unix_path, unix_path_len, "%s", path);
	return fd;
fail:
	snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
	if (fd != -1)
		close(fd);
	return -1;
}

int net_listen(const char *addr, char *unix_path, size_t unix_path_len,
               char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char host[NET_HOST_MAX];
	char *port;
	int fd = -1, one = 1, rc;

	if (unix_path_len)
		unix_path[0] = '\0';
	if (strncmp(addr, "unix:", 5) == 0) {
		fd = net_listen_unix(addr, unix_path, unix_path_len, err, errlen);
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
	return -1;
}
