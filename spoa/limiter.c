/*
 * limiter - asks Redis for decisions: hiredis 0.14 async on one thread's
 * libev loop.
 *
 * Life of a call (struct limiter_call):
 *   limiter_check() validates, looks in the local deny cache, and either
 *   answers at once (queued, delivered on the next loop iteration) or takes
 *   a call from the pool, sends EVALSHA and arms the call's own deadline.
 *   The call is answered exactly once, by whichever comes first: the reply,
 *   the deadline, the loss of the connection, or limiter_free(). hiredis
 *   holds the call as privdata until it hands it back (reply or NULL), so a
 *   call answered by its deadline stays out of the pool until then, and its
 *   late reply is ignored.
 *
 * Connection: IDLE (waiting to retry) -> CONNECTING (TCP, then AUTH, SELECT
 * and SCRIPT LOAD pipelined) -> READY (SCRIPT LOAD answered with a SHA).
 * Anything else goes back to IDLE with exponential backoff and jitter. Our
 * own timer bounds CONNECTING; a READY connection on which nothing has been
 * answered for max(1 s, 10 x timeout) while calls wait (a frozen Redis) is
 * dropped, so new calls are answered "unavailable" at once instead of
 * piling up in hiredis's output buffer.
 *
 * Clock: every time kept here (latency, stall detection, deny cache
 * deadlines) is CLOCK_MONOTONIC, not ev_now(): libev's ev_now() follows the
 * wall clock, and a deny cached across a wall-clock step back would outlive
 * what Redis would answer. The per-call deadlines are ev_timers, which libev
 * runs on its own monotonic clock.
 *
 * Never call limiter_free() from inside a limiter_cb: the callback may be
 * running inside hiredis, which still holds the limiter's calls.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libev.h>

#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "window.h"

#define LIMITER_MAX_HELD        65536u  /* calls hiredis may hold at once */
#define LIMITER_POOL_CHUNK      256u    /* calls allocated together */
#define LIMITER_CACHE_SLOTS     16384u  /* deny cache entries, power of two */
#define LIMITER_CACHE_PROBES    8u      /* slots looked at per key */
#define LIMITER_MEMBER_MAX      40      /* "<16 hex>-<4 hex>-<16 hex>" + NUL */
#define LIMITER_BACKOFF_MIN_MS  100
#define LIMITER_BACKOFF_MAX_MS  2000
#define LIMITER_STALL_MIN_MS    1000    /* floor of connect and stall limits */
#define LIMITER_ADDR_MAX        300
#define LIMITER_SECRET_MAX      256
#define LIMITER_SHA_MAX         64

enum limiter_state {
	LIMITER_ST_IDLE = 0,    /* not connected; the retry timer may run */
	LIMITER_ST_CONNECTING,  /* TCP connect or AUTH/SELECT/SCRIPT LOAD pending */
	LIMITER_ST_READY,       /* EVALSHA may be sent */
	LIMITER_ST_COUNT
};

static const char *const limiter_state_names[LIMITER_ST_COUNT] = {
	[LIMITER_ST_IDLE] = "idle",
	[LIMITER_ST_CONNECTING] = "connecting",
	[LIMITER_ST_READY] = "ready",
};

/* A parsed Redis address. <addr> is what logs show: never the password. */
struct limiter_url {
	bool is_unix;
	char host[LIMITER_ADDR_MAX];    /* TCP host, or the unix socket path */
	int port;
	char user[LIMITER_SECRET_MAX];  /* "" = no ACL user */
	char pass[LIMITER_SECRET_MAX];  /* "" = no AUTH */
	bool has_pass;
	int db;                         /* -1 = no SELECT */
	char addr[LIMITER_ADDR_MAX + 16];
};

struct limiter_call {
	struct limiter *l;
	struct limiter_call *next;      /* pool freelist */
	limiter_cb cb;                  /* NULL once answered */
	void *arg;
	ev_timer deadline;
	int64_t sent_us;                /* monotonic, when EVALSHA was queued */
	bool retried;                   /* already re-sent as EVAL */
	bool cacheable;                 /* a deny may go to the deny cache */
	unsigned policy_index;          /* UINT_MAX = unknown */
	uint64_t cost;
	/* Copies: <p> and <key> are only borrowed during limiter_check(). The
	 * policy's own limits are replaced by those that apply to <key>, so
	 * the copy needs no override table. */
	struct window_policy policy;
	size_t key_len;
	char key[WINDOW_KEY_MAX];
	char member[LIMITER_MEMBER_MAX];
};

struct limiter_chunk {
	struct limiter_chunk *next;
	struct limiter_call calls[LIMITER_POOL_CHUNK];
};

/* An answer that did not need Redis, delivered on the next loop iteration. */
struct limiter_answer {
	limiter_cb cb;
	void *arg;
	struct window_decision d;
};

struct limiter_cache_entry {
	uint64_t hash;                  /* 0 = empty slot */
	int64_t deadline_us;            /* monotonic: the request may pass from here */
	int64_t reset_us;               /* monotonic: the oldest entry leaves */
	uint64_t cost;                  /* denied cost; a smaller one may fit earlier */
	int64_t limit;
	int64_t remaining;
	unsigned window;
	unsigned name_len;
	unsigned key_len;
	char name[WINDOW_NAME_MAX];
	char key[WINDOW_KEY_MAX];
};

struct limiter {
	struct ev_loop *loop;
	enum limiter_state state;
	redisAsyncContext *ac;          /* NULL when IDLE */
	struct limiter_url url;
	uint64_t timeout_ms;
	const char *script;             /* borrowed from the settings */
	size_t script_len;
	char sha[LIMITER_SHA_MAX];      /* "" until SCRIPT LOAD answered */
	bool script_loading;            /* a re-load after NOSCRIPT is in flight */
	struct metrics *metrics;

	ev_timer retry;                 /* IDLE: next connect attempt */
	ev_timer connect_timer;         /* CONNECTING: give up */
	ev_timer kick;                  /* deliver queued answers */
	unsigned backoff_ms;
	bool attempted;                 /* a first connect was tried */
	unsigned failures;              /* failed attempts since last ready */
	bool closing;                   /* inside limiter_free() */

	/* member prefix: random per limiter, thread id, counter */
	uint64_t instance;
	unsigned thread_id;
	uint64_t counter;
	uint64_t rng;                   /* xorshift state for jitter */

	/* calls */
	struct limiter_chunk *chunks;
	struct limiter_call *free_calls;
	unsigned ncalls;                /* allocated */
	unsigned held;                  /* held by hiredis */
	unsigned unanswered;            /* held and not answered yet */
	int64_t quiet_since_us;         /* last reply, or when <held> left 0 */

	struct limiter_answer *answers;
	size_t nanswers, answers_cap;

	/* deny cache */
	bool cache_on;
	uint64_t cache_seed;
	struct limiter_cache_entry *cache;   /* LIMITER_CACHE_SLOTS, lazily */

	/* policy names, for cache_denies[index] */
	size_t npolicies;
	size_t policy_name_len[CONFIG_MAX_POLICIES];
	char policy_names[CONFIG_MAX_POLICIES][WINDOW_NAME_MAX];

	int64_t warn_last_us;           /* script-error log rate limit */
	uint64_t warn_suppressed;
};

static void limiter_connect(struct limiter *l);
static void limiter_drop(struct limiter *l, const char *why);

/* Name of connection state <s>, for logs. */
static const char *limiter_state_str(enum limiter_state s)
{
	return s < LIMITER_ST_COUNT ? limiter_state_names[s] : "?";
}

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

/* Microseconds of CLOCK_MONOTONIC (see "Clock" above). */
static int64_t limiter_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* 64 random bits from the kernel, or a weaker mix of <salt>, time and pid
 * when getrandom() is unavailable (uniqueness, not secrecy, is needed). */
static uint64_t limiter_random64(uint64_t salt)
{
	uint64_t v = 0;
	struct timespec ts;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v)
		return v;
	clock_gettime(CLOCK_REALTIME, &ts);
	v = salt ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
	    ((uint64_t)getpid() << 40);
	return v ? v : 0x9e3779b97f4a7c15ULL;
}

/* Next value of the jitter generator in <l> (xorshift64*). */
static uint64_t limiter_rand(struct limiter *l)
{
	l->rng ^= l->rng >> 12;
	l->rng ^= l->rng << 25;
	l->rng ^= l->rng >> 27;
	return l->rng * 0x2545f4914f6cdd1dULL;
}

/* The stall limit and the connect timeout: max(1 s, 10 x <l>'s timeout). */
static int64_t limiter_stall_us(const struct limiter *l)
{
	uint64_t ms = l->timeout_ms * 10;

	if (ms < LIMITER_STALL_MIN_MS)
		ms = LIMITER_STALL_MIN_MS;
	return (int64_t)ms * 1000;
}

/* Count one failed Redis call of <kind> in <l>'s metrics, if any. */
static void limiter_count_error(struct limiter *l, enum metrics_redis_error kind)
{
	if (l->metrics)
		metrics_add(&l->metrics->redis_errors[kind], 1);
}

/* Set <l>'s connected gauge to <up>. */
static void limiter_set_connected(struct limiter *l, bool up)
{
	if (l->metrics)
		atomic_store_explicit(&l->metrics->redis_connected, up ? 1 : 0,
		                      memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* URL parsing                                                         */

/* Decode %XX escapes of <src>/<len> into <dst>/<cap> (NUL-terminated).
 * Returns 0, or -1 on a bad escape or when it does not fit. */
static int limiter_unescape(const char *src, size_t len, char *dst, size_t cap)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		int c = (unsigned char)src[i];

		if (c == '%') {
			char hex[3];
			char *end;

			if (i + 2 >= len)
				return -1;
			hex[0] = src[i + 1];
			hex[1] = src[i + 2];
			hex[2] = '\0';
			c = (int)strtol(hex, &end, 16);
			if (end != hex + 2)
				return -1;
			i += 2;
		}
		if (n + 1 >= cap)
			return -1;
		dst[n++] = (char)c;
	}
	dst[n] = '\0';
	return 0;
}

/*
 * Parse <s> into <u>: "redis://[user[:password]@]host[:port][/db]" (an IPv6
 * host in brackets, user and password %-escaped if need be, port 6379 by
 * default) or "unix:///absolute/path". Returns 0, or -1 with <err>. The
 * error text never contains the password.
 */
static int limiter_parse_url(const char *s, struct limiter_url *u, char *err, size_t errlen)
{
	static const char tcp_scheme[] = "redis://";
	static const char unix_scheme[] = "unix://";
	const char *p, *at, *host, *host_end, *port_s = NULL, *slash;
	size_t len;

	memset(u, 0, sizeof(*u));
	u->db = -1;
	if (!s || !*s) {
		snprintf(err, errlen, "empty redis address");
		return -1;
	}
	if (strncmp(s, unix_scheme, sizeof(unix_scheme) - 1) == 0) {
		p = s + sizeof(unix_scheme) - 1;
		len = strlen(p);
		if (len < 2 || p[0] != '/') {
			snprintf(err, errlen, "redis unix address needs an absolute path (unix:///path)");
			return -1;
		}
		if (len >= sizeof(u->host) || len >= 108) {
			snprintf(err, errlen, "redis unix socket path too long");
			return -1;
		}
		u->is_unix = true;
		memcpy(u->host, p, len + 1);
		snprintf(u->addr, sizeof(u->addr), "unix:%s", u->host);
		return 0;
	}
	if (strncmp(s, tcp_scheme, sizeof(tcp_scheme) - 1) != 0) {
		snprintf(err, errlen, "redis address must start with redis:// or unix://");
		return -1;
	}
	p = s + sizeof(tcp_scheme) - 1;

	/* The last '@' ends the user info, so a password may hold '@' or '/'. */
	at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));

		if (!colon) {
			snprintf(err, errlen, "redis user info must be user:password or :password");
			return -1;
		}
		if (limiter_unescape(p, (size_t)(colon - p), u->user, sizeof(u->user)) == -1 ||
		    limiter_unescape(colon + 1, (size_t)(at - colon - 1), u->pass,
		                     sizeof(u->pass)) == -1) {
			snprintf(err, errlen, "redis user or password: bad %%-escape or too long");
			return -1;
		}
		if (!u->pass[0]) {
			snprintf(err, errlen, "redis password is empty");
			return -1;
		}
		u->has_pass = true;
		p = at + 1;
	}

	host = p;
	if (*p == '[') {
		host_end = strchr(p, ']');
		if (!host_end) {
			snprintf(err, errlen, "redis address: missing ']'");
			return -1;
		}
		host = p + 1;
		p = host_end + 1;
	} else {
		p += strcspn(p, ":/");
		host_end = p;
	}
	len = (size_t)(host_end - host);
	if (len == 0 || len >= sizeof(u->host)) {
		snprintf(err, errlen, "redis address: bad host");
		return -1;
	}
	memcpy(u->host, host, len);
	u->host[len] = '\0';

	u->port = 6379;
	if (*p == ':') {
		char *end;
		long v;

		port_s = p + 1;
		errno = 0;
		v = strtol(port_s, &end, 10);
		if (end == port_s || errno || v < 1 || v > 65535 || (*end && *end != '/')) {
			snprintf(err, errlen, "redis address: bad port");
			return -1;
		}
		u->port = (int)v;
		p = end;
	}
	if (*p && *p != '/') {
		snprintf(err, errlen, "redis address: unexpected text after the host");
		return -1;
	}
	slash = p;
	if (*slash == '/' && slash[1]) {
		char *end;
		long v;

		errno = 0;
		v = strtol(slash + 1, &end, 10);
		if (end == slash + 1 || *end || errno || v < 0 || v > 65535) {
			snprintf(err, errlen, "redis address: bad database number");
			return -1;
		}
		u->db = (int)v;
	}
	if (strchr(u->host, ':'))
		snprintf(u->addr, sizeof(u->addr), "[%s]:%d", u->host, u->port);
	else
		snprintf(u->addr, sizeof(u->addr), "%s:%d", u->host, u->port);
	if (u->db >= 0) {
		size_t n = strlen(u->addr);

		snprintf(u->addr + n, sizeof(u->addr) - n, "/%d", u->db);
	}
	return 0;
}

/* Same target and credentials? (a change means reconnecting) */
static bool limiter_url_same(const struct limiter_url *a, const struct limiter_url *b)
{
	return a->is_unix == b->is_unix && a->port == b->port && a->db == b->db &&
	       a->has_pass == b->has_pass && strcmp(a->host, b->host) == 0 &&
	       strcmp(a->user, b->user) == 0 && strcmp(a->pass, b->pass) == 0;
}

/* ------------------------------------------------------------------ */
/* answers that need no Redis                                          */

/* Queue <d> for <cb>/<arg>, delivered on the next loop iteration (never from
 * inside limiter_check(), so callers need not be reentrant). The queue is
 * owned by <l>, grows by doubling and is reused. Returns 0, or -1 when
 * memory runs out. */
static int limiter_defer(struct limiter *l, limiter_cb cb, void *arg,
                         const struct window_decision *d)
{
	struct limiter_answer *a;

	if (l->nanswers == l->answers_cap) {
		size_t cap = l->answers_cap ? l->answers_cap * 2 : 64;

		a = realloc(l->answers, cap * sizeof(*a));
		if (!a)
			return -1;
		l->answers = a;
		l->answers_cap = cap;
	}
	a = &l->answers[l->nanswers++];
	a->cb = cb;
	a->arg = arg;
	a->d = *d;
	if (!ev_is_active(&l->kick))
		ev_timer_start(l->loop, &l->kick);
	return 0;
}

/* Deliver the answers queued before this iteration. A callback may queue
 * new ones (it may call limiter_check()); they wait for the next round. */
static void limiter_on_kick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	size_t n = l->nanswers, i;

	(void)loop;
	(void)revents;
	for (i = 0; i < n; i++) {
		/* a copy: a callback may grow (move) the array */
		struct limiter_answer a = l->answers[i];

		a.cb(a.arg, &a.d);
	}
	memmove(l->answers, l->answers + n, (l->nanswers - n) * sizeof(*l->answers));
	l->nanswers -= n;
	if (l->nanswers && !ev_is_active(&l->kick))
		ev_timer_start(l->loop, &l->kick);
}

/* ------------------------------------------------------------------ */
/* call pool                                                           */

/* Take a call from <l>'s pool, growing it by a chunk when empty; the pool
 * owns the memory (freed by limiter_free()). NULL when memory runs out. */
static struct limiter_call *limiter_call_get(struct limiter *l)
{
	struct limiter_call *c;

	if (!l->free_calls) {
		struct limiter_chunk *ch = calloc(1, sizeof(*ch));
		unsigned i;

		if (!ch)
			return NULL;
		ch->next = l->chunks;
		l->chunks = ch;
		for (i = LIMITER_POOL_CHUNK; i-- > 0;) {
			ch->calls[i].next = l->free_calls;
			l->free_calls = &ch->calls[i];
		}
		l->ncalls += LIMITER_POOL_CHUNK;
	}
	c = l->free_calls;
	l->free_calls = c->next;
	c->next = NULL;
	c->l = l;
	return c;
}

/* Give <c> back to its limiter's pool, which owns it (hiredis no longer
 * holds it). */
static void limiter_call_put(struct limiter_call *c)
{
	struct limiter *l = c->l;

	c->cb = NULL;
	c->arg = NULL;
	c->next = l->free_calls;
	l->free_calls = c;
}

/* Answer <c> with <d>, once: later answers of the same call are no-ops. */
static void limiter_call_answer(struct limiter_call *c, const struct window_decision *d)
{
	struct limiter *l = c->l;
	limiter_cb cb = c->cb;

	if (!cb)
		return;
	c->cb = NULL;
	ev_timer_stop(l->loop, &c->deadline);
	l->unanswered--;
	cb(c->arg, d);
}

/* ------------------------------------------------------------------ */
/* deny cache                                                          */

/* Hash of (<name>, <key>), seeded per limiter so keys chosen by clients
 * cannot aim at one probe window; never 0 (0 marks an empty slot). */
static uint64_t limiter_cache_hash(const struct limiter *l, const char *name, size_t name_len,
                                   const char *key, size_t key_len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ l->cache_seed;
	size_t i;

	for (i = 0; i < name_len; i++)
		h = (h ^ (unsigned char)name[i]) * 0x100000001b3ULL;
	h = (h ^ 0xff) * 0x100000001b3ULL;   /* separator: no byte of a name */
	for (i = 0; i < key_len; i++)
		h = (h ^ (unsigned char)key[i]) * 0x100000001b3ULL;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	return h ? h : 1;
}

/* Does entry <e> hold (<name>, <key>) with hash <h>? */
static bool limiter_cache_match(const struct limiter_cache_entry *e, uint64_t h,
                                const char *name, size_t name_len,
                                const char *key, size_t key_len)
{
	return e->hash == h && e->name_len == name_len && e->key_len == key_len &&
	       memcmp(e->name, name, name_len) == 0 && memcmp(e->key, key, key_len) == 0;
}

/* Frees <l>'s deny cache table; the next deny allocates a new one. */
static void limiter_cache_clear(struct limiter *l)
{
	free(l->cache); l->cache = NULL;
}

/*
 * Is (<p>, <key>) known to be denied for <cost> at <now>? Fills <d> with a
 * deny whose retry_after and reset count down from the cached deadlines.
 * Entries found expired are emptied on the way.
 */
static bool limiter_cache_lookup(struct limiter *l, const struct window_policy *p,
                                 const char *key, size_t key_len, uint64_t cost,
                                 int64_t now, struct window_decision *d)
{
	uint64_t h;
	unsigned i;

	if (!l->cache)
		return false;
	h = limiter_cache_hash(l, p->name, p->name_len, key, key_len);
	for (i = 0; i < LIMITER_CACHE_PROBES; i++) {
		struct limiter_cache_entry *e =
			&l->cache[(h + i) & (LIMITER_CACHE_SLOTS - 1)];
		int64_t left;

		if (!limiter_cache_match(e, h, p->name, p->name_len, key, key_len))
			continue;
		if (e->deadline_us <= now) {
			e->hash = 0;
			return false;
		}
		if (cost < e->cost)
			return false;
		left = e->deadline_us - now;
		memset(d, 0, sizeof(*d));
		d->status = WINDOW_DENY;
		d->has_quota = true;
		d->limit = e->limit;
		d->remaining = e->remaining;
		d->retry_after_us = left;
		d->retry_after = window_us_to_s_ceil(left);
		if (d->retry_after < 1)
			d->retry_after = 1;
		d->reset = e->reset_us > now ? window_us_to_s_ceil(e->reset_us - now) : 0;
		d->window = e->window;
		return true;
	}
	return false;
}

/*
 * Remember that (<c>'s policy, key) was denied (copied into the table, which
 * <l> owns and allocates on the first deny): it cannot pass before
 * <c>->sent_us + retry_after. The deadline counts from when the request was
 * sent, before Redis read its clock, so it can only expire early, never
 * deny what Redis would allow. Replaces the same key's entry, else an empty
 * or expired slot, else the entry that expires first.
 */
static void limiter_cache_store(struct limiter *l, const struct limiter_call *c,
                                const struct window_decision *d, int64_t now)
{
	const struct window_policy *p = &c->policy;
	struct limiter_cache_entry *same = NULL, *unused = NULL, *oldest = NULL, *e;
	int64_t reset_us;
	uint64_t h;
	unsigned i;

	if (d->retry_after_us <= 0 || c->sent_us + d->retry_after_us <= now)
		return;
	if (!l->cache) {
		l->cache = calloc(LIMITER_CACHE_SLOTS, sizeof(*l->cache));
		if (!l->cache)
			return;
	}
	h = limiter_cache_hash(l, p->name, p->name_len, c->key, c->key_len);
	for (i = 0; i < LIMITER_CACHE_PROBES; i++) {
		e = &l->cache[(h + i) & (LIMITER_CACHE_SLOTS - 1)];
		if (limiter_cache_match(e, h, p->name, p->name_len, c->key, c->key_len)) {
			same = e;
			break;
		}
		if (e->hash == 0 || e->deadline_us <= now) {
			if (!unused)
				unused = e;
		} else if (!oldest || e->deadline_us < oldest->deadline_us) {
			oldest = e;
		}
	}
	e = same ? same : unused ? unused : oldest;
	e->hash = h;
	e->deadline_us = c->sent_us + d->retry_after_us;
	/* <reset> came rounded up to seconds: never past the retry deadline */
	reset_us = d->reset * 1000000;
	if (reset_us > d->retry_after_us || reset_us < 0)
		reset_us = d->retry_after_us;
	e->reset_us = c->sent_us + reset_us;
	e->cost = c->cost;
	e->limit = d->limit;
	e->remaining = d->remaining;
	e->window = d->window;
	e->name_len = (unsigned)p->name_len;
	e->key_len = (unsigned)c->key_len;
	memcpy(e->name, p->name, p->name_len);
	memcpy(e->key, c->key, c->key_len);
}

/* Index of policy <p> in the table given by the settings, or UINT_MAX. */
static unsigned limiter_policy_index(const struct limiter *l, const struct window_policy *p)
{
	size_t i;

	for (i = 0; i < l->npolicies; i++)
		if (l->policy_name_len[i] == p->name_len &&
		    memcmp(l->policy_names[i], p->name, p->name_len) == 0)
			return (unsigned)i;
	return UINT_MAX;
}

/* Copy the policy names of <s> into <l> (nothing stays borrowed). */
static void limiter_copy_policy_names(struct limiter *l, const struct limiter_settings *s)
{
	size_t i, n = s->policies ? s->npolicies : 0;

	if (n > CONFIG_MAX_POLICIES)
		n = CONFIG_MAX_POLICIES;
	for (i = 0; i < n; i++) {
		size_t len = s->policies[i].name_len;

		if (len > WINDOW_NAME_MAX)
			len = WINDOW_NAME_MAX;
		memcpy(l->policy_names[i], s->policies[i].name, len);
		l->policy_name_len[i] = len;
	}
	l->npolicies = n;
}

/* ------------------------------------------------------------------ */
/* connection                                                          */

/* Arm the retry timer: 100 ms doubling to 2 s, each wait drawn in
 * [d/2, d] so threads and agents do not reconnect in step. */
static void limiter_schedule_retry(struct limiter *l)
{
	unsigned d = l->backoff_ms;
	unsigned wait = d / 2 + (unsigned)(limiter_rand(l) % (d / 2 + 1));

	if (l->closing)
		return;
	l->backoff_ms = d * 2 > LIMITER_BACKOFF_MAX_MS ? LIMITER_BACKOFF_MAX_MS : d * 2;
	ev_timer_stop(l->loop, &l->retry);
	ev_timer_set(&l->retry, (double)wait / 1000.0, 0.);
	ev_timer_start(l->loop, &l->retry);
}

/* Forget the context (hiredis frees it, or already did) and plan a retry. */
static void limiter_lost(struct limiter *l)
{
	l->ac = NULL;
	l->state = LIMITER_ST_IDLE;
	l->sha[0] = '\0';
	l->script_loading = false;
	ev_timer_stop(l->loop, &l->connect_timer);
	limiter_set_connected(l, false);
	limiter_schedule_retry(l);
}

/*
 * Close and free <l>'s connection now: every call hiredis holds comes back
 * with a NULL
 * reply (answered "unavailable" unless already answered) before this
 * returns, except when we are inside one of this context's callbacks, where
 * hiredis finishes the job once the callback returns.
 */
static void limiter_drop(struct limiter *l, const char *why)
{
	redisAsyncContext *ac = l->ac;

	if (!ac)
		return;
	log_info("redis_disconnected", "addr=%s state=%s reason=\"%s\"", l->url.addr,
	         limiter_state_str(l->state), why);
	limiter_lost(l);
	redisAsyncFree(ac);
}

/* One failed connect attempt: the first of a streak at info, the others at
 * debug (a Redis that stays away would otherwise log every 2 s a thread). */
static void limiter_log_failure(struct limiter *l, const char *why)
{
	l->failures++;
	if (l->failures == 1)
		log_info("redis_connect_failed", "addr=%s reason=\"%s\"", l->url.addr, why);
	else
		log_debug("redis_connect_failed", "addr=%s reason=\"%s\" attempt=%u",
		          l->url.addr, why, l->failures);
}

/* hiredis: the TCP (or unix) connect of <ac> finished with <status>. On
 * failure hiredis frees <ac> once this returns: never free it here. */
static void limiter_on_connect(const redisAsyncContext *ac, int status)
{
	struct limiter *l = ac->data;

	if (ac != l->ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees <ac> right after this callback */
		limiter_log_failure(l, ac->errstr ? ac->errstr : "connect failed");
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		limiter_lost(l);
		return;
	}
	log_debug("redis_socket_connected", "addr=%s", l->url.addr);
}

/* hiredis: connected context <ac> is going away (its pending calls have
 * had their NULL replies already); hiredis frees it once this returns. */
static void limiter_on_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter *l = ac->data;

	(void)status;
	if (ac != l->ac)
		return;   /* we dropped it ourselves and said so */
	log_info("redis_disconnected", "addr=%s reason=\"%s\"", l->url.addr,
	         ac->errstr && ac->err ? ac->errstr : "closed");
	limiter_lost(l);
}

/* AUTH or SELECT during setup: anything but +OK drops the connection. */
static void limiter_on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter *l = ac->data;
	const redisReply *reply = r;
	const char *what = privdata;

	if (ac != l->ac || !reply)
		return;
	l->quiet_since_us = limiter_now_us();
	if (reply->type == REDIS_REPLY_STATUS && reply->str && strcmp(reply->str, "OK") == 0)
		return;
	/* a misconfiguration repeats on every attempt: warn once a streak */
	if (l->failures++ == 0)
		log_warn("redis_setup_failed", "addr=%s step=%s reply=\"%.*s\"", l->url.addr, what,
		         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
		         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
	limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
	limiter_drop(l, "setup failed");
}

/* SCRIPT LOAD answered: at setup this makes the connection ready; later
 * (after a NOSCRIPT, or a reload with a new script) it refreshes the SHA. */
static void limiter_on_script_load(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter *l = ac->data;
	const redisReply *reply = r;

	(void)privdata;
	if (ac != l->ac || !reply)
		return;
	l->quiet_since_us = limiter_now_us();
	l->script_loading = false;
	if (reply->type != REDIS_REPLY_STRING || reply->len == 0 ||
	    reply->len >= sizeof(l->sha)) {
		if (l->state != LIMITER_ST_CONNECTING || l->failures++ == 0)
			log_warn("redis_script_load_failed", "addr=%s reply=\"%.*s\"", l->url.addr,
			         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
			         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		limiter_count_error(l, METRICS_REDIS_ERR_SCRIPT);
		if (l->state == LIMITER_ST_CONNECTING)
			limiter_drop(l, "script load failed");
		return;
	}
	memcpy(l->sha, reply->str, reply->len);
	l->sha[reply->len] = '\0';
	if (l->state != LIMITER_ST_CONNECTING)
		return;
	ev_timer_stop(l->loop, &l->connect_timer);
	l->state = LIMITER_ST_READY;
	l->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	limiter_set_connected(l, true);
	log_info("redis_connected", "addr=%s attempts=%u script=%s", l->url.addr,
	         l->failures + 1, l->sha);
	l->failures = 0;
}

/* Queue SCRIPT LOAD on the current connection. Returns 0 or -1. */
static int limiter_send_script_load(struct limiter *l)
{
	const char *argv[3] = { "SCRIPT", "LOAD", l->script };
	size_t argvlen[3] = { 6, 4, l->script_len };

	if (redisAsyncCommandArgv(l->ac, limiter_on_script_load, NULL, 3, argv, argvlen) != REDIS_OK)
		return -1;
	l->script_loading = true;
	return 0;
}

/* CONNECTING lasted longer than the stall limit (e.g. a frozen Redis that
 * still accepts TCP): give up this attempt. */
static void limiter_on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;

	(void)loop;
	(void)revents;
	if (l->state != LIMITER_ST_CONNECTING)
		return;
	log_warn("redis_connect_timeout", "addr=%s", l->url.addr);
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	limiter_drop(l, "connect timeout");
}

/* The backoff wait is over: try to connect again. */
static void limiter_on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;

	(void)loop;
	(void)revents;
	if (l->state == LIMITER_ST_IDLE)
		limiter_connect(l);
}

/*
 * Start one connection attempt for <l> (the context it creates is owned by
 * <l>, freed through limiter_drop() or by hiredis on a connection error):
 * non-blocking connect, then AUTH, SELECT and
 * SCRIPT LOAD pipelined behind it (hiredis sends them once connected). On
 * an immediate failure, plan the next attempt. (A host name is resolved
 * with a blocking getaddrinfo() inside hiredis: use addresses.)
 */
static void limiter_connect(struct limiter *l)
{
	struct limiter_url *u = &l->url;
	redisAsyncContext *ac;
	int64_t stall = limiter_stall_us(l);

	if (l->attempted && l->metrics)
		metrics_add(&l->metrics->redis_reconnects, 1);
	l->attempted = true;
	ac = u->is_unix ? redisAsyncConnectUnix(u->host) : redisAsyncConnect(u->host, u->port);
	if (!ac) {
		limiter_log_failure(l, "out of memory");
		limiter_schedule_retry(l);
		return;
	}
	if (ac->err) {
		limiter_log_failure(l, ac->errstr);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		redisAsyncFree(ac);
		limiter_schedule_retry(l);
		return;
	}
	ac->data = l;
	if (redisLibevAttach(l->loop, ac) != REDIS_OK) {
		redisAsyncFree(ac);
		limiter_schedule_retry(l);
		return;
	}
	redisAsyncSetConnectCallback(ac, limiter_on_connect);
	redisAsyncSetDisconnectCallback(ac, limiter_on_disconnect);
	l->ac = ac;
	l->state = LIMITER_ST_CONNECTING;
	l->sha[0] = '\0';
	log_debug("redis_connecting", "addr=%s", u->addr);

	if (u->has_pass) {
		/* "AUTH user pass" (ACL) or "AUTH pass" */
		const char *argv[3];
		size_t argvlen[3];
		int argc = 0;

		argv[argc] = "AUTH";
		argvlen[argc++] = 4;
		if (u->user[0]) {
			argv[argc] = u->user;
			argvlen[argc++] = strlen(u->user);
		}
		argv[argc] = u->pass;
		argvlen[argc++] = strlen(u->pass);
		redisAsyncCommandArgv(ac, limiter_on_setup_reply, (void *)"auth", argc, argv, argvlen);
	}
	if (u->db >= 0)
		redisAsyncCommand(ac, limiter_on_setup_reply, (void *)"select", "SELECT %d", u->db);
	limiter_send_script_load(l);

	ev_timer_set(&l->connect_timer, (double)stall / 1e6, 0.);
	ev_timer_start(l->loop, &l->connect_timer);
}

/* ------------------------------------------------------------------ */
/* calls                                                               */

static void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata);

/*
 * Re-send call <c> as EVAL with the full script (after NOSCRIPT: Redis lost
 * its script cache, e.g. restarted or SCRIPT FLUSH), and re-load the script
 * once so later calls find it again. Returns 0, or -1 when it cannot be sent.
 */
static int limiter_call_retry_eval(struct limiter *l, redisAsyncContext *ac,
                                   struct limiter_call *c)
{
	struct window_args a;
	enum window_reason why;

	if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost, c->member,
	                      &a, &why) == -1)
		return -1;
	a.argv[0] = "EVAL";
	a.argvlen[0] = 4;
	a.argv[1] = l->script;
	a.argvlen[1] = l->script_len;
	if (redisAsyncCommandArgv(ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK)
		return -1;
	c->retried = true;
	if (!l->script_loading && ac == l->ac && l->state == LIMITER_ST_READY)
		limiter_send_script_load(l);
	return 0;
}

/* Log a script error at warn, at most once a second (with a count of those
 * left out), so a broken script cannot flood the log. */
static void limiter_warn_reply(struct limiter *l, const redisReply *reply, int64_t now)
{
	if (l->warn_last_us && now - l->warn_last_us < 1000000) {
		l->warn_suppressed++;
		return;
	}
	log_warn("redis_script_error", "addr=%s reply=\"%.*s\" suppressed=%llu", l->url.addr,
	         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
	         reply->type == REDIS_REPLY_ERROR ? reply->str : "",
	         (unsigned long long)l->warn_suppressed);
	l->warn_last_us = now;
	l->warn_suppressed = 0;
}

/*
 * hiredis hands call <privdata> back on <ac>: with the script's reply <r>
 * (borrowed: hiredis frees it after this returns), or NULL when the
 * connection is gone. The call is answered if it still waits, then returns
 * to the pool (or is re-sent once as EVAL after NOSCRIPT).
 */
static void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_call *c = privdata;
	struct limiter *l = c->l;
	const redisReply *reply = r;
	struct window_decision d;
	int64_t now = limiter_now_us();

	if (!reply) {
		/* The connection is going. A callback below may call
		 * limiter_check(): hiredis refuses new commands on a dying context,
		 * so those are answered "unavailable" too. */
		if (c->cb) {
			limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
			window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
			limiter_call_answer(c, &d);
		}
		goto recycle;
	}
	l->quiet_since_us = now;
	if (window_reply_is_noscript(reply)) {
		limiter_count_error(l, METRICS_REDIS_ERR_NOSCRIPT);
		if (!c->cb) {
			/* answered already: nothing to retry, but reload for the others */
			if (!l->script_loading && ac == l->ac && l->state == LIMITER_ST_READY)
				limiter_send_script_load(l);
			goto recycle;
		}
		if (!c->retried) {
			if (limiter_call_retry_eval(l, ac, c) == 0)
				return;   /* hiredis holds it again */
		}
	}
	if (!c->cb)
		goto recycle;   /* the deadline answered first: a late reply */

	if (l->metrics)
		metrics_observe_redis_latency(l->metrics, (uint64_t)(now - c->sent_us));
	if (window_decide_reply(&c->policy, reply, &d) == -1) {
		limiter_count_error(l, METRICS_REDIS_ERR_SCRIPT);
		limiter_warn_reply(l, reply, now);
	} else if (c->cacheable && d.status == WINDOW_DENY) {
		limiter_cache_store(l, c, &d, now);
	}
	limiter_call_answer(c, &d);

recycle:
	l->held--;
	limiter_call_put(c);
}

/* A call's deadline passed: answer "timeout" now; hiredis keeps the call
 * until Redis replies or the connection goes. If nothing at all has been
 * answered for the stall limit while calls wait, Redis is frozen: drop it. */
static void limiter_on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_call *c = w->data;
	struct limiter *l = c->l;
	struct window_decision d;

	(void)loop;
	(void)revents;
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	window_decide_error(&c->policy, WINDOW_REASON_REDIS_TIMEOUT, &d);
	limiter_call_answer(c, &d);
	/* <c> may be recycled by limiter_drop() below: not used after this */
	if (l->ac && l->held > 0 && limiter_now_us() - l->quiet_since_us >= limiter_stall_us(l)) {
		log_warn("redis_stalled", "addr=%s waiting=%u", l->url.addr, l->held);
		limiter_drop(l, "no reply within the stall limit");
	}
}

/* Member prefix of the next request into <dst>/<cap>: unique per limiter
 * instance (random), thread and request; at most 38 bytes and the NUL. The
 * random part is drawn per limiter, not once per process: a limiter
 * re-created for the same thread restarts its counter, and would otherwise
 * repeat members still in a window (ZADD would then move, not add, them). */
static void limiter_next_member(struct limiter *l, char *dst, size_t cap)
{
	snprintf(dst, cap, "%016llx-%x-%llx", (unsigned long long)l->instance,
	         l->thread_id & 0xffffu, (unsigned long long)l->counter++);
}

/* Borrows <p> and <key> for the call only: a call sent to Redis keeps its
 * own copies (in a pool call owned by <l>). Contract in limiter.h. */
int limiter_check(struct limiter *l, const struct window_policy *p,
                  const char *key, size_t key_len, uint64_t cost,
                  limiter_cb cb, void *arg)
{
	struct window_args a;
	struct window_decision d;
	struct limiter_call *c;
	enum window_reason why;
	char member[LIMITER_MEMBER_MAX];
	const struct window_limit *lim;
	unsigned nwin;
	int64_t now;

	if (l->closing || !p || !cb)
		return -1;

	/* Step 1: the request itself must be valid (never fails open). */
	limiter_next_member(l, member, sizeof(member));
	if (window_build_args(p, l->sha, key, key_len, cost, member, &a, &why) == -1) {
		window_decide_error(p, why, &d);
		if (why == WINDOW_REASON_BAD_KEY || why == WINDOW_REASON_BAD_COST)
			d.status = WINDOW_ERROR;
		return limiter_defer(l, cb, arg, &d);
	}

	/* Step 2: an account known to be denied is answered here. */
	now = limiter_now_us();
	if (l->cache_on && !p->shadow &&
	    limiter_cache_lookup(l, p, key, key_len, cost, now, &d)) {
		unsigned idx = limiter_policy_index(l, p);

		if (l->metrics && idx < CONFIG_MAX_POLICIES)
			metrics_add(&l->metrics->cache_denies[idx], 1);
		log_debug("deny_cache_hit", "policy=%.*s retry_after=%lld", (int)p->name_len,
		          p->name, (long long)d.retry_after);
		return limiter_defer(l, cb, arg, &d);
	}

	/* Step 3: without a ready connection, or over the bound, no queue. */
	if (l->state != LIMITER_ST_READY || !l->ac) {
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	if (l->held >= LIMITER_MAX_HELD || !(c = limiter_call_get(l))) {
		window_decide_error(p, WINDOW_REASON_OVERLOAD, &d);
		return limiter_defer(l, cb, arg, &d);
	}

	/* Step 4: send, and arm the call's own deadline. */
	c->cb = cb;
	c->arg = arg;
	c->sent_us = now;
	c->retried = false;
	c->cacheable = l->cache_on && !p->shadow;
	c->cost = cost;
	c->policy = *p;
	lim = window_limits_for(p, key, key_len, &nwin);
	c->policy.nwin = nwin;
	memcpy(c->policy.win, lim, nwin * sizeof(*lim));
	c->policy.overrides = NULL;
	c->policy.noverrides = 0;
	memcpy(c->key, key, key_len);
	c->key_len = key_len;
	memcpy(c->member, member, sizeof(member));
	if (redisAsyncCommandArgv(l->ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK) {
		limiter_call_put(c);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	if (l->held == 0)
		l->quiet_since_us = now;
	l->held++;
	l->unanswered++;
	ev_timer_init(&c->deadline, limiter_on_deadline, (double)l->timeout_ms / 1000.0, 0.);
	c->deadline.data = c;
	ev_timer_start(l->loop, &c->deadline);
	return 0;
}

/* ------------------------------------------------------------------ */
/* lifecycle                                                           */

/* Allocates the limiter; the caller owns it and frees it with limiter_free(). */
struct limiter *limiter_new(struct ev_loop *loop, const struct limiter_settings *s,
                            char *err, size_t errlen)
{
	struct limiter *l;

	if (!loop || !s || !s->script || !s->script_len) {
		snprintf(err, errlen, "limiter: missing loop or script");
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (limiter_parse_url(s->redis_url, &l->url, err, errlen) == -1) {
		free(l);
		return NULL;
	}
	l->loop = loop;
	l->state = LIMITER_ST_IDLE;
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	l->script = s->script;
	l->script_len = s->script_len;
	l->metrics = s->metrics;
	l->thread_id = s->thread_id;
	l->instance = limiter_random64((uint64_t)(uintptr_t)l);
	l->rng = limiter_random64(l->instance ^ 0x5bd1e995u);
	l->cache_seed = limiter_random64(l->rng);
	l->cache_on = true;
	l->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	limiter_copy_policy_names(l, s);
	ev_timer_init(&l->retry, limiter_on_retry, 0., 0.);
	l->retry.data = l;
	ev_timer_init(&l->connect_timer, limiter_on_connect_timeout, 1., 0.);
	l->connect_timer.data = l;
	ev_timer_init(&l->kick, limiter_on_kick, 0., 0.);
	l->kick.data = l;
	limiter_set_connected(l, false);
	limiter_connect(l);
	return l;
}

/* Borrows <s>'s script until limiter_free() or the next reconfigure; the URL
 * and policy names are copied. Contract in limiter.h. */
int limiter_reconfigure(struct limiter *l, const struct limiter_settings *s,
                        char *err, size_t errlen)
{
	struct limiter_url u;
	bool script_changed;

	if (!s || !s->script || !s->script_len) {
		snprintf(err, errlen, "limiter: missing script");
		return -1;
	}
	if (limiter_parse_url(s->redis_url, &u, err, errlen) == -1)
		return -1;
	script_changed = s->script_len != l->script_len ||
	                 memcmp(s->script, l->script, s->script_len) != 0;
	l->script = s->script;
	l->script_len = s->script_len;
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	if (s->metrics != l->metrics) {
		limiter_set_connected(l, false);
		l->metrics = s->metrics;
		limiter_set_connected(l, l->state == LIMITER_ST_READY);
	}
	limiter_copy_policy_names(l, s);
	/* limits or policies may have changed what a cached deny means */
	limiter_cache_clear(l);

	if (!limiter_url_same(&u, &l->url)) {
		log_info("redis_address_changed", "from=%s to=%s", l->url.addr, u.addr);
		limiter_drop(l, "address changed");
		l->url = u;
		l->backoff_ms = LIMITER_BACKOFF_MIN_MS;
		ev_timer_stop(l->loop, &l->retry);
		if (l->state == LIMITER_ST_IDLE)
			limiter_connect(l);
	} else {
		l->url = u;
		/* calls in flight keep the old SHA, which Redis still knows */
		if (script_changed && l->state == LIMITER_ST_READY)
			limiter_send_script_load(l);
	}
	explicit_bzero(&u, sizeof(u));
	return 0;
}

/* Turning <on> off frees the cache table of <l>. */
void limiter_set_deny_cache(struct limiter *l, bool on)
{
	l->cache_on = on;
	if (!on)
		limiter_cache_clear(l);
}

/* Calls of <l> whose callback has not run yet: sent and unanswered, plus
 * answers queued for the next loop iteration. */
unsigned limiter_pending(const struct limiter *l)
{
	return l->unanswered + (unsigned)l->nanswers;
}

/* Frees <l> and everything it owns; every call still waiting is answered
 * first (Redis calls with "unavailable", queued answers with theirs). */
void limiter_free(struct limiter *l)
{
	struct limiter_chunk *ch;

	if (!l)
		return;
	l->closing = true;
	ev_timer_stop(l->loop, &l->retry);
	ev_timer_stop(l->loop, &l->connect_timer);
	if (l->ac) {
		redisAsyncContext *ac = l->ac;

		l->ac = NULL;
		l->state = LIMITER_ST_IDLE;
		/* answers every call hiredis holds with a NULL reply */
		redisAsyncFree(ac);
		log_info("redis_disconnected", "addr=%s reason=\"shutdown\"", l->url.addr);
	}
	limiter_set_connected(l, false);
	ev_timer_stop(l->loop, &l->kick);
	while (l->nanswers)
		limiter_on_kick(l->loop, &l->kick, 0);
	ev_timer_stop(l->loop, &l->kick);
	while ((ch = l->chunks)) {
		l->chunks = ch->next;
		free(ch);
	}
	free(l->answers); l->answers = NULL;
	limiter_cache_clear(l);
	explicit_bzero(&l->url, sizeof(l->url));
	free(l);
}

