/*
 * fake_redis - a scripted Redis for the limiter's unit tests, served on a
 * loopback TCP port inside the test process and driven by the test's own
 * libev loop (no thread, no child process: what happens, and in which
 * order, is decided by the script). hiredis-cluster's simulated-redis is
 * the model.
 *
 * A fake has:
 *   - an ordered script of steps: EXPECT <command prefix>, then what to do
 *     when it arrives: SEND <raw RESP> (a reply, or half of one), CLOSE the
 *     connection, or STALL (never answer on that connection again);
 *   - rules, "whenever <command prefix> arrives, answer <RESP>", for what
 *     may come at any time or any number of times (the link's setup:
 *     ROLE, CONFIG GET maxmemory-policy, INFO stats, SCRIPT LOAD; CLUSTER SLOTS).
 * A command is matched against the script's next EXPECT first, then the
 * rules; anything else is counted as unexpected (and answered with an
 * error, so the limiter does not wait for it).
 *
 * Commands are read with hiredis's own redisReader (a command is a RESP
 * array of bulk strings) and seen as their words joined by spaces.
 * Everything is static so a test that uses part of it still builds with
 * -Werror.
 */
#ifndef TESTS_UNIT_FAKE_REDIS_H
#define TESTS_UNIT_FAKE_REDIS_H

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <hiredis/hiredis.h>

#define FAKE_CONNS_MAX  16
#define FAKE_STEPS_MAX  32
#define FAKE_RULES_MAX  16
#define FAKE_LOG_MAX    8192

/* INFO stats's reply with evicted_keys:<n> (one digit). */
#define FAKE_INFO(n) "$30\r\n# Stats\r\nevicted_keys:" #n "\r\nx:0\r\n\r\n"

/* COMMAND INFO ratelimit.decide without the module (a nil), and with it
 * (the start of the command's description is enough). */
#define FAKE_NO_MODULE "*1\r\n*-1\r\n"
#define FAKE_MODULE "*1\r\n*2\r\n$16\r\nratelimit.decide\r\n:-2\r\n"
/* RATELIMIT.VERSION of a module speaking protocol <p>. */
#define FAKE_VERSION(p) "*2\r\n:" #p "\r\n+1.9.0\r\n"

/* The SHA every fake answers SCRIPT LOAD with. */
#define FAKE_SHA "0123456789abcdef0123456789abcdef01234567"

enum fake_op {
	FAKE_EXPECT = 0,   /* wait for a command starting with <text> */
	FAKE_SEND,         /* write <text> as it is (RESP, whole or not) */
	FAKE_CLOSE,        /* close the connection the last command came on */
	FAKE_STALL,        /* ignore everything on that connection from now on */
	FAKE_OP_COUNT
};

struct fake_step {
	enum fake_op op;
	const char *text;
};

struct fake_rule {
	char prefix[64];
	char reply[512];
	unsigned hits;
};

struct fake_redis;

struct fake_conn {
	struct fake_redis *srv;
	int fd;                 /* -1: closed */
	bool stalled;
	ev_io io;
	redisReader *rd;
};

struct fake_redis {
	struct ev_loop *loop;
	int lfd;
	int port;
	ev_io accept_io;
	struct fake_conn conns[FAKE_CONNS_MAX];
	unsigned nconns;        /* accepted so far */
	struct fake_step steps[FAKE_STEPS_MAX];
	unsigned nsteps, cur;
	struct fake_rule rules[FAKE_RULES_MAX];
	unsigned nrules;
	unsigned unexpected;
	/* An EXPECT followed by another EXPECT holds its reply back: rule
	 * replies to commands that come meanwhile (the limiter's eviction poll)
	 * wait here, and go out right after the held reply, in the order a
	 * real Redis answers. */
	bool holding;
	char held[1024];
	size_t heldlen;
	char log[FAKE_LOG_MAX]; /* every command seen, one a line */
	size_t loglen;
};

/* Add "whenever a command starts with <prefix>, answer <reply>"; a later
 * rule with the same prefix replaces the earlier one. */
static void fake_rule(struct fake_redis *f, const char *prefix, const char *reply)
{
	unsigned i;

	for (i = 0; i < f->nrules; i++)
		if (strcmp(f->rules[i].prefix, prefix) == 0)
			break;
	if (i == f->nrules) {
		if (f->nrules == FAKE_RULES_MAX)
			return;
		f->nrules++;
	}
	snprintf(f->rules[i].prefix, sizeof(f->rules[i].prefix), "%s", prefix);
	snprintf(f->rules[i].reply, sizeof(f->rules[i].reply), "%s", reply);
	f->rules[i].hits = 0;
}

/* How many times the rule for <prefix> answered (0 without such a rule). */
static unsigned fake_hits(const struct fake_redis *f, const char *prefix)
{
	unsigned i;

	for (i = 0; i < f->nrules; i++)
		if (strcmp(f->rules[i].prefix, prefix) == 0)
			return f->rules[i].hits;
	return 0;
}

/* Append one step to <f>'s script. <text> is borrowed: a literal, or
 * storage that outlives the fake. */
static void fake_step(struct fake_redis *f, enum fake_op op, const char *text)
{
	if (f->nsteps < FAKE_STEPS_MAX)
		f->steps[f->nsteps++] = (struct fake_step){ op, text };
}

/* Has the whole script run? */
static bool fake_done(const struct fake_redis *f)
{
	return f->cur == f->nsteps;
}

/* How many commands starting with <prefix> <f> has seen. */
static unsigned fake_count(const struct fake_redis *f, const char *prefix)
{
	const char *p = f->log;
	size_t n = strlen(prefix);
	unsigned hits = 0;

	while (*p) {
		if (strncmp(p, prefix, n) == 0)
			hits++;
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	return hits;
}

/* Borrows <c>: close it (the peer sees EOF). */
static void fake_conn_close(struct fake_conn *c)
{
	if (c->fd < 0)
		return;
	ev_io_stop(c->srv->loop, &c->io);
	close(c->fd);
	c->fd = -1;
	redisReaderFree(c->rd);
	c->rd = NULL;
}

static void fake_write(struct fake_conn *c, const char *text)
{
	size_t len = strlen(text), off = 0;

	while (off < len) {
		ssize_t n = write(c->fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;   /* the test's replies are small: a full buffer is a bug */
		off += (size_t)n;
	}
}

/* Run the steps after a matched EXPECT, up to the next EXPECT. */
static void fake_run_steps(struct fake_redis *f, struct fake_conn *c)
{
	while (f->cur < f->nsteps && f->steps[f->cur].op != FAKE_EXPECT) {
		const struct fake_step *s = &f->steps[f->cur++];

		switch (s->op) {
		case FAKE_SEND:
			if (c->fd >= 0)
				fake_write(c, s->text);
			if (f->holding && c->fd >= 0 && f->heldlen) {
				f->held[f->heldlen] = '\0';
				fake_write(c, f->held);
			}
			f->holding = false;
			f->heldlen = 0;
			break;
		case FAKE_CLOSE:
			fake_conn_close(c);
			break;
		case FAKE_STALL:
			c->stalled = true;
			break;
		default:
			break;
		}
	}
}

/* One command <cmd> (words joined by spaces) arrived on <c>. */
static void fake_command(struct fake_conn *c, const char *cmd)
{
	struct fake_redis *f = c->srv;
	unsigned i;

	if (c->stalled)
		return;
	f->loglen += (size_t)snprintf(f->log + f->loglen, sizeof(f->log) - f->loglen, "%.200s\n", cmd);
	if (f->loglen >= sizeof(f->log))
		f->loglen = sizeof(f->log) - 1;
	if (f->cur < f->nsteps && f->steps[f->cur].op == FAKE_EXPECT &&
	    strncmp(cmd, f->steps[f->cur].text, strlen(f->steps[f->cur].text)) == 0) {
		f->cur++;
		if (f->cur < f->nsteps && f->steps[f->cur].op == FAKE_EXPECT)
			f->holding = true;
		fake_run_steps(f, c);
		return;
	}
	for (i = 0; i < f->nrules; i++) {
		if (strncmp(cmd, f->rules[i].prefix, strlen(f->rules[i].prefix)) == 0) {
			size_t n = strlen(f->rules[i].reply);

			f->rules[i].hits++;
			if (f->holding && f->heldlen + n < sizeof(f->held)) {
				memcpy(f->held + f->heldlen, f->rules[i].reply, n);
				f->heldlen += n;
			} else {
				fake_write(c, f->rules[i].reply);
			}
			return;
		}
	}
	f->unexpected++;
	fprintf(stderr, "# fake redis :%d: unexpected command \"%.80s\"\n", f->port, cmd);
	fake_write(c, "-ERR fake redis: unexpected command\r\n");
}

/* libev: bytes (or EOF) on a connection: feed them to its reader and play
 * every whole command. */
static void fake_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	struct fake_conn *c = w->data;
	char buf[4096], cmd[1024];
	ssize_t n;
	void *r;

	(void)loop;
	(void)revents;
	n = read(c->fd, buf, sizeof(buf));
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		fake_conn_close(c);
		return;
	}
	if (n < 0 || redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK)
		return;
	while (c->fd >= 0 && redisReaderGetReply(c->rd, &r) == REDIS_OK && r) {
		const redisReply *a = r;
		size_t i, len = 0;

		cmd[0] = '\0';
		for (i = 0; a->type == REDIS_REPLY_ARRAY && i < a->elements; i++)
			len += (size_t)snprintf(cmd + len, len < sizeof(cmd) ? sizeof(cmd) - len : 0,
			                        "%s%.*s", i ? " " : "", (int)a->element[i]->len,
			                        a->element[i]->str);
		freeReplyObject(r);
		fake_command(c, cmd);
	}
}

/* libev: a client connects. */
static void fake_on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct fake_redis *f = w->data;
	struct fake_conn *c;
	int fd;

	(void)revents;
	fd = accept4(f->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (f->nconns == FAKE_CONNS_MAX) {
		close(fd);
		return;
	}
	c = &f->conns[f->nconns++];
	c->srv = f;
	c->fd = fd;
	c->stalled = false;
	c->rd = redisReaderCreate();
	ev_io_init(&c->io, fake_on_read, fd, EV_READ);
	c->io.data = c;
	ev_io_start(loop, &c->io);
}

/* Start <f> listening on 127.0.0.1 (an ephemeral port, in f->port) on
 * <loop>, with the rules every Redis of a test answers alike: ROLE master,
 * maxmemory-policy noeviction, INFO stats with evicted_keys:0, no module
 * (COMMAND INFO ratelimit.decide: nil; RATELIMIT.VERSION unknown), SCRIPT LOAD
 * -> FAKE_SHA, AUTH/SELECT +OK.
 * <f> owns its sockets until fake_stop(). Returns 0 or -1. */
static int fake_start(struct fake_redis *f, struct ev_loop *loop)
{
	struct sockaddr_in sa;
	socklen_t salen = sizeof(sa);

	memset(f, 0, sizeof(*f));
	f->loop = loop;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (f->lfd < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) == -1 || listen(f->lfd, 16) == -1 ||
	    getsockname(f->lfd, (struct sockaddr *)&sa, &salen) == -1) {
		close(f->lfd);
		return -1;
	}
	f->port = ntohs(sa.sin_port);
	ev_io_init(&f->accept_io, fake_on_accept, f->lfd, EV_READ);
	f->accept_io.data = f;
	ev_io_start(loop, &f->accept_io);
	fake_rule(f, "ROLE", "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
	fake_rule(f, "CONFIG GET maxmemory-policy",
	          "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n");
	fake_rule(f, "SCRIPT LOAD", "$40\r\n" FAKE_SHA "\r\n");
	fake_rule(f, "INFO stats", FAKE_INFO(0));
	fake_rule(f, "COMMAND INFO ratelimit.decide", FAKE_NO_MODULE);
	fake_rule(f, "RATELIMIT.VERSION", "-ERR unknown command 'RATELIMIT.VERSION'\r\n");
	fake_rule(f, "AUTH", "+OK\r\n");
	fake_rule(f, "SELECT", "+OK\r\n");
	return 0;
}

/* Close every connection of <f> and its listening socket. */
static void fake_stop(struct fake_redis *f)
{
	unsigned i;

	for (i = 0; i < f->nconns; i++)
		fake_conn_close(&f->conns[i]);
	ev_io_stop(f->loop, &f->accept_io);
	close(f->lfd);
	f->lfd = -1;
}

#endif /* TESTS_UNIT_FAKE_REDIS_H */
