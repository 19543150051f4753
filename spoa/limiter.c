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
 * Links: each connection to one Redis server is a struct limiter_link.
 * IDLE (waiting to retry) -> CONNECTING (TCP, then AUTH, SELECT, ROLE (not
 * for cluster links: a seed may be a replica), CONFIG GET maxmemory-policy
 * and SCRIPT LOAD pipelined) -> READY (SCRIPT LOAD answered with a SHA).
 * Anything else (a replica included) goes back to IDLE with exponential
 * backoff and jitter. A READY link whose Redis may evict keys refuses calls
 * (redis-evicts-keys) unless redis-allow-eviction is set. Our own timer
 * bounds CONNECTING; a READY link on which nothing has been answered for
 * max(1 s, 10 x timeout) while calls wait (a frozen Redis) is dropped, so
 * new calls are answered "unavailable" at once instead of piling up in
 * hiredis's output buffer.
 *
 * Topologies (the `redis` URL, parsed by redis_url):
 *   redis:// and unix://  one link.
 *   sentinel://           one link whose address a sentinel gives
 *                         (SENTINEL get-master-addr-by-name), checked with
 *                         ROLE; asked again whenever the link is lost, and
 *                         switched at once on +switch-master (a subscription
 *                         to one sentinel). The new primary gets SCRIPT LOAD
 *                         like any new link.
 *   cluster://            one link per primary, from a slot map (CLUSTER
 *                         SLOTS, see cluster.h). A call goes to the primary
 *                         of its key's slot; MOVED patches the map and
 *                         re-sends, ASK re-sends once after ASKING, TRYAGAIN
 *                         waits a few ms and re-sends, all within the call's
 *                         deadline. The map is refreshed on redirects, and
 *                         on a timer: fast while a primary is missing, slow
 *                         otherwise. A slot whose primary is away is
 *                         answered "unavailable" (fail-closed) until the
 *                         map names a reachable one.
 * Link structs are never freed before limiter_free(): a dropped link is only
 * retired (late hiredis callbacks compare their context to link->ac).
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

#include "cluster.h"
#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "redis_url.h"
#include "window.h"

#define LIMITER_MAX_HELD        65536u  /* calls hiredis may hold at once */
#define LIMITER_POOL_CHUNK      256u    /* calls allocated together */
#define LIMITER_CACHE_SLOTS     16384u  /* deny cache entries, power of two */
#define LIMITER_CACHE_PROBES    8u      /* slots looked at per key */
#define LIMITER_MEMBER_MAX      40      /* "<16 hex>-<4 hex>-<16 hex>" + NUL */
#define LIMITER_BACKOFF_MIN_MS  100
#define LIMITER_BACKOFF_MAX_MS  2000
#define LIMITER_STALL_MIN_MS    1000    /* floor of connect and stall limits */
#define LIMITER_SHA_MAX         64
#define LIMITER_LINKS_MAX       (CLUSTER_NODES_MAX + REDIS_URL_HOSTS_MAX)
#define LIMITER_REDIRECTS_MAX   5       /* MOVED/ASK/TRYAGAIN hops per call */
#define LIMITER_TRYAGAIN_MS     5       /* wait before re-sending a TRYAGAIN */
#define LIMITER_TOPO_TICK_MS    250     /* cluster map check cadence */
#define LIMITER_TOPO_MIN_MS     100     /* no two CLUSTER SLOTS closer than this */
#define LIMITER_TOPO_IDLE_MS    5000    /* refresh at least this often */
#define LIMITER_EVICT_RECHECK_MS 1000   /* ask an evicting Redis again at most this often */

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

/* One connection to one Redis server (the only one, a sentinel's primary,
 * or a cluster primary). <addr> is what logs show: never a password. */
struct limiter_link {
	struct limiter *l;
	enum limiter_state state;
	redisAsyncContext *ac;          /* NULL when IDLE */
	bool in_use;                    /* false: retired, may be reused */
	bool is_unix;
	char host[REDIS_URL_HOST_MAX];  /* TCP host, or the unix socket path */
	int port;
	char addr[REDIS_URL_ADDR_MAX];
	bool script_loading;            /* a SCRIPT LOAD is in flight */
	ev_timer retry;                 /* IDLE: next connect attempt */
	ev_timer connect_timer;         /* CONNECTING: give up */
	unsigned backoff_ms;
	bool attempted;                 /* a first connect was tried */
	unsigned failures;              /* failed attempts since last ready */
	unsigned held;                  /* calls hiredis holds on this link */
	int64_t quiet_since_us;         /* last reply, or when <held> left 0 */
	bool evicts;                    /* maxmemory-policy is not noeviction */
	bool evict_asking;              /* a CONFIG GET maxmemory-policy is in flight */
	int64_t evict_asked_us;         /* when the last one was sent */
};

struct limiter_call {
	struct limiter *l;
	struct limiter_call *next;      /* pool freelist, or the parked list */
	limiter_cb cb;                  /* NULL once answered */
	void *arg;
	ev_timer deadline;
	int64_t sent_us;                /* monotonic, when EVALSHA was queued */
	bool retried;                   /* already re-sent as EVAL */
	bool asking;                    /* last sent after ASKING */
	bool cacheable;                 /* a deny may go to the deny cache */
	unsigned redirects;             /* MOVED/ASK/TRYAGAIN hops so far */
	struct limiter_link *link;      /* where hiredis holds it */
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

/* Redis Cluster state: the slot map and the link of each of its nodes. */
struct limiter_cluster {
	struct cluster_map map;
	struct cluster_map next;        /* scratch for a CLUSTER SLOTS reply */
	struct limiter_link *route[CLUSTER_NODES_MAX];  /* map.nodes[i] -> link */
	ev_timer topo;                  /* LIMITER_TOPO_TICK_MS, repeating */
	redisAsyncContext *topo_ac;     /* where CLUSTER SLOTS waits, or NULL */
	int64_t topo_last_us;           /* when the last refresh was sent */
	bool topo_dirty;                /* a redirect or an error asked for one */
	bool have_map;
};

/* Sentinel state: who the primary is, and the +switch-master subscription. */
struct limiter_sentinel {
	bool master_known;              /* the link's host/port came from a sentinel */
	unsigned next;                  /* sentinel to ask next (round robin) */
	redisAsyncContext *query;       /* get-master-addr-by-name in flight */
	redisAsyncContext *sub;         /* SUBSCRIBE +switch-master */
	unsigned sub_next;
	unsigned sub_backoff_ms;
	ev_timer sub_retry;
};

struct limiter {
	struct ev_loop *loop;
	struct redis_url url;           /* secrets included: wiped on free */
	uint64_t timeout_ms;
	const char *script;             /* borrowed from the settings */
	size_t script_len;
	char sha[LIMITER_SHA_MAX];      /* "" until a SCRIPT LOAD answered */
	struct metrics *metrics;

	/* every link ever made (retired ones included) */
	struct limiter_link *links[LIMITER_LINKS_MAX];
	unsigned nlinks;                /* allocated */
	struct limiter_link *main_link;     /* the one link, unless cluster:// */
	struct limiter_cluster *cluster;    /* cluster:// only */
	struct limiter_sentinel *sentinel;  /* sentinel:// only */

	ev_timer kick;                  /* deliver queued answers */
	ev_timer park;                  /* re-send calls parked by TRYAGAIN */
	struct limiter_call *parked;
	bool closing;                   /* inside limiter_free() */
	bool connected;                 /* what the metrics gauge says */
	bool allow_eviction;            /* redis-allow-eviction yes */
	bool standby;                   /* being prepared or retired: the gauges are not ours */
	bool evicting;                  /* a link in use evicts keys */
	char last_error[160];           /* why the last attempt failed, for a reload's verdict */

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
};

static void limiter_link_connect(struct limiter_link *k);
static void limiter_link_drop(struct limiter_link *k, const char *why);
static void limiter_topo_refresh(struct limiter *l, const char *why);
static void limiter_sentinel_query(struct limiter_link *k);

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
	l->connected = up;
	if (l->metrics && !l->standby)
		atomic_store_explicit(&l->metrics->redis_connected, up ? 1 : 0,
		                      memory_order_relaxed);
}

/* Recompute the redis_connected gauge: the one link is READY, or (cluster)
 * every slot has a primary whose link is READY. */
static void limiter_update_connected(struct limiter *l)
{
	struct limiter_cluster *cl = l->cluster;
	bool up = true;
	unsigned i;

	if (!cl) {
		up = l->main_link && l->main_link->state == LIMITER_ST_READY;
	} else if (!cl->have_map || cl->map.covered != CLUSTER_SLOTS) {
		up = false;
	} else {
		for (i = 0; i < cl->map.nnodes && up; i++)
			up = cl->route[i] && cl->route[i]->state == LIMITER_ST_READY;
	}
	limiter_set_connected(l, up);
}

/* Remember why <l>'s last attempt failed (<what> about <addr>), for a
 * reload that waits for a new Redis to tell why it gave up. */
static void limiter_note_error(struct limiter *l, const char *addr, const char *what)
{
	/* cut to fit: a reason in a log line, not a record */
	snprintf(l->last_error, sizeof(l->last_error), "%.80s: %.70s", addr, what);
}

/* Recompute the redis_unsafe_eviction gauge: a link in use evicts keys. */
static void limiter_update_eviction(struct limiter *l)
{
	bool any = false;
	unsigned i;

	for (i = 0; i < l->nlinks && !any; i++)
		any = l->links[i]->in_use && l->links[i]->evicts;
	l->evicting = any;
	if (l->metrics && !l->standby)
		atomic_store_explicit(&l->metrics->redis_unsafe_eviction, any ? 1 : 0,
		                      memory_order_relaxed);
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
/* links                                                               */

static void limiter_link_on_retry(struct ev_loop *loop, ev_timer *w, int revents);
static void limiter_link_on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents);

/* Point <k> at <host>:<port> (<is_unix>: <host> is a socket path). */
static void limiter_link_set_target(struct limiter_link *k, const char *host, int port,
                                    bool is_unix)
{
	snprintf(k->host, sizeof(k->host), "%s", host);
	k->port = port;
	k->is_unix = is_unix;
	if (is_unix)
		snprintf(k->addr, sizeof(k->addr), "unix:%s", host);
	else
		redis_url_format_host(host, port, k->addr, sizeof(k->addr));
}

/*
 * A link to <host>:<port> for <l>, which owns it until limiter_free(): the
 * in-use one with that target, else a retired one that hiredis no longer
 * holds anything on, else a new one. Does not connect. NULL when
 * LIMITER_LINKS_MAX are in use or memory runs out.
 */
static struct limiter_link *limiter_link_get(struct limiter *l, const char *host, int port,
                                             bool is_unix)
{
	struct limiter_link *k, *spare = NULL;
	unsigned i;

	for (i = 0; i < l->nlinks; i++) {
		k = l->links[i];
		if (k->in_use && k->port == port && k->is_unix == is_unix &&
		    strcmp(k->host, host) == 0)
			return k;
		if (!k->in_use && !k->ac && k->held == 0 && !spare)
			spare = k;
	}
	if (!spare) {
		if (l->nlinks >= LIMITER_LINKS_MAX)
			return NULL;
		spare = calloc(1, sizeof(*spare));
		if (!spare)
			return NULL;
		spare->l = l;
		ev_timer_init(&spare->retry, limiter_link_on_retry, 0., 0.);
		spare->retry.data = spare;
		ev_timer_init(&spare->connect_timer, limiter_link_on_connect_timeout, 1., 0.);
		spare->connect_timer.data = spare;
		l->links[l->nlinks++] = spare;
	}
	k = spare;
	k->in_use = true;
	k->state = LIMITER_ST_IDLE;
	k->script_loading = false;
	k->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	k->attempted = false;
	k->failures = 0;
	k->evicts = false;
	k->evict_asking = false;
	limiter_link_set_target(k, host, port, is_unix);
	return k;
}

/* hiredis now holds one more call on <k>. */
static void limiter_link_hold(struct limiter_link *k)
{
	if (k->held == 0)
		k->quiet_since_us = limiter_now_us();
	k->held++;
	k->l->held++;
}

/* Arm <k>'s retry timer: 100 ms doubling to 2 s, each wait drawn in
 * [d/2, d] so threads and agents do not reconnect in step. */
static void limiter_link_schedule_retry(struct limiter_link *k)
{
	struct limiter *l = k->l;
	unsigned d = k->backoff_ms;
	unsigned wait = d / 2 + (unsigned)(limiter_rand(l) % (d / 2 + 1));

	if (l->closing || !k->in_use)
		return;
	k->backoff_ms = d * 2 > LIMITER_BACKOFF_MAX_MS ? LIMITER_BACKOFF_MAX_MS : d * 2;
	ev_timer_stop(l->loop, &k->retry);
	ev_timer_set(&k->retry, (double)wait / 1000.0, 0.);
	ev_timer_start(l->loop, &k->retry);
}

/* Forget <k>'s context (hiredis frees it, or already did) and plan a retry. */
static void limiter_link_lost(struct limiter_link *k)
{
	struct limiter *l = k->l;

	k->ac = NULL;
	k->state = LIMITER_ST_IDLE;
	k->script_loading = false;
	k->evict_asking = false;
	ev_timer_stop(l->loop, &k->connect_timer);
	/* Whoever the primary is now, a sentinel says so on the next attempt. */
	if (l->sentinel && k == l->main_link)
		l->sentinel->master_known = false;
	if (l->cluster)
		l->cluster->topo_dirty = true;
	limiter_update_connected(l);
	limiter_link_schedule_retry(k);
}

/*
 * Close <k>'s connection now: every call hiredis holds on it comes back
 * with a NULL reply (answered "unavailable" unless already answered) before
 * this returns, except when we are inside one of this context's callbacks,
 * where hiredis finishes the job once the callback returns.
 */
static void limiter_link_drop(struct limiter_link *k, const char *why)
{
	redisAsyncContext *ac = k->ac;

	if (!ac)
		return;
	log_limited(CONFIG_LOG_WARN, "redis_disconnected", "redis_disconnected",
	            "addr=%s state=%s reason=\"%s\"", k->addr, limiter_state_str(k->state), why);
	limiter_link_lost(k);
	redisAsyncFree(ac);
}

/* Stop using <k>: drop its connection (see limiter_link_drop) and its
 * timers. The struct stays, for reuse or for late hiredis callbacks. */
static void limiter_link_retire(struct limiter_link *k, const char *why)
{
	limiter_link_drop(k, why);
	k->in_use = false;
	k->state = LIMITER_ST_IDLE;
	limiter_update_eviction(k->l);
	ev_timer_stop(k->l->loop, &k->retry);
	ev_timer_stop(k->l->loop, &k->connect_timer);
}

/* One failed connect attempt, at warn (traffic is refused meanwhile);
 * the backoff (2 s at most) and log_limited keep it to a line a second. */
static void limiter_link_log_failure(struct limiter_link *k, const char *why)
{
	k->failures++;
	limiter_note_error(k->l, k->addr, why);
	log_limited(CONFIG_LOG_WARN, "redis_connect_failed", "redis_connect_failed",
	            "addr=%s reason=\"%s\" attempt=%u", k->addr, why, k->failures);
}

/* hiredis: the TCP (or unix) connect of <ac> finished with <status>. On
 * failure hiredis frees <ac> once this returns: never free it here. */
static void limiter_link_on_connect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	if (ac != k->ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees <ac> right after this callback */
		limiter_link_log_failure(k, ac->errstr ? ac->errstr : "connect failed");
		limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_lost(k);
		return;
	}
	log_debug("redis_socket_connected", "addr=%s", k->addr);
}

/* hiredis: connected context <ac> is going away (its pending calls have
 * had their NULL replies already); hiredis frees it once this returns. */
static void limiter_link_on_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	(void)status;
	if (ac != k->ac)
		return;   /* we dropped it ourselves and said so */
	log_limited(CONFIG_LOG_WARN, "redis_disconnected", "redis_disconnected",
	            "addr=%s state=%s reason=\"%s\"", k->addr, limiter_state_str(k->state),
	            ac->errstr && ac->err ? ac->errstr : "closed");
	limiter_link_lost(k);
}

/* AUTH or SELECT during setup: anything but +OK drops the connection. */
static void limiter_link_on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r;
	const char *what = privdata;

	if (ac != k->ac || !reply)
		return;
	k->quiet_since_us = limiter_now_us();
	if (reply->type == REDIS_REPLY_STATUS && reply->str && strcmp(reply->str, "OK") == 0)
		return;
	limiter_note_error(k->l, k->addr, strcmp(what, "auth") == 0 ? "AUTH refused" : "SELECT refused");
	/* a misconfiguration repeats on every attempt: warn once a streak */
	if (k->failures++ == 0)
		log_warn("redis_setup_failed", "addr=%s step=%s reply=\"%.*s\"", k->addr, what,
		         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
		         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
	limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
	limiter_link_drop(k, "setup failed");
}

/*
 * ROLE during setup (redis://, unix://, sentinel://): writing to a replica
 * fails every call (READONLY), and a sentinel's answer may be stale, so
 * only a primary will do. Anything else is a failed attempt: logged at
 * error once per attempt, retried with the usual backoff (the link never
 * becomes ready, so neither the backoff nor the connected gauge resets).
 * A ROLE refused outright (an ACL without +role, a managed Redis that
 * renamed it) cannot tell: warn and go on, except under Sentinel, where
 * ROLE is the only check of the sentinel's word.
 */
static void limiter_link_on_role(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r;
	const redisReply *role;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	k->quiet_since_us = limiter_now_us();
	if (reply->type == REDIS_REPLY_ERROR && !k->l->sentinel) {
		log_warn("redis_role_unknown", "addr=%s reply=\"%.*s\" action=\"assuming a primary\"",
		         k->addr, (int)reply->len, reply->str);
		return;
	}
	role = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 && reply->element ?
	       reply->element[0] : NULL;
	if (role && role->type == REDIS_REPLY_STRING && role->len == 6 &&
	    memcmp(role->str, "master", 6) == 0)
		return;
	k->failures++;
	limiter_note_error(k->l, k->addr, "not a primary (ROLE)");
	log_error("redis_not_primary", "addr=%s role=\"%.*s\" attempt=%u action=\"retrying with "
	          "backoff\"", k->addr,
	          role && role->type == REDIS_REPLY_STRING ? (int)role->len : 0,
	          role && role->type == REDIS_REPLY_STRING ? role->str : "", k->failures);
	limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
	limiter_link_drop(k, "not a primary");
}

/*
 * CONFIG GET maxmemory-policy answered on <ac>: with any policy but
 * noeviction Redis may drop the windows (the only keys with a TTL go
 * first under volatile-*), and the limiter would admit everything. Such a
 * link refuses decisions (redis-evicts-keys) unless redis-allow-eviction
 * is set. Logged at error once per connection, and when it changes; a
 * refused CONFIG (ACL, managed Redis) is a warning and the link goes on.
 */
static void limiter_link_on_eviction(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	struct limiter *l = k->l;
	const redisReply *reply = r, *v;
	bool setup = k->state == LIMITER_ST_CONNECTING, evicts;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	k->quiet_since_us = limiter_now_us();
	k->evict_asking = false;
	v = reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 && reply->element &&
	    reply->element[1]->type == REDIS_REPLY_STRING ? reply->element[1] : NULL;
	if (!v) {
		if (setup)
			log_warn("redis_eviction_unknown", "addr=%s reply=\"%.*s\" action=\"deciding "
			         "without knowing maxmemory-policy (give the user +config|get)\"", k->addr,
			         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
			         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		evicts = false;
	} else {
		evicts = !(v->len == 10 && memcmp(v->str, "noeviction", 10) == 0);
		if (evicts)
			limiter_note_error(l, k->addr, "maxmemory-policy is not noeviction");
		if (evicts && (setup || !k->evicts))
			log_error("redis_unsafe_eviction", "addr=%s policy=%.*s action=\"%s\"", k->addr,
			          (int)v->len, v->str, l->allow_eviction ?
			          "deciding anyway (redis-allow-eviction yes)" :
			          "refusing decisions (reason=redis-evicts-keys)");
		else if (!evicts && k->evicts)
			log_info("redis_eviction_safe", "addr=%s policy=noeviction", k->addr);
	}
	k->evicts = evicts;
	limiter_update_eviction(l);
}

/* Queue CONFIG GET maxmemory-policy on <k>'s connection. */
static void limiter_link_ask_eviction(struct limiter_link *k)
{
	if (redisAsyncCommand(k->ac, limiter_link_on_eviction, NULL,
	                      "CONFIG GET maxmemory-policy") != REDIS_OK)
		return;
	k->evict_asking = true;
	k->evict_asked_us = limiter_now_us();
}

/* SCRIPT LOAD answered: at setup this makes the link ready; later (after a
 * NOSCRIPT, or a reload with a new script) it refreshes the SHA. */
static void limiter_link_on_script_load(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	struct limiter *l = k->l;
	const redisReply *reply = r;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	k->quiet_since_us = limiter_now_us();
	k->script_loading = false;
	if (reply->type != REDIS_REPLY_STRING || reply->len == 0 ||
	    reply->len >= sizeof(l->sha)) {
		if (k->state != LIMITER_ST_CONNECTING || k->failures++ == 0)
			log_warn("redis_script_load_failed", "addr=%s reply=\"%.*s\"", k->addr,
			         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
			         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		limiter_count_error(l, METRICS_REDIS_ERR_SCRIPT);
		limiter_note_error(l, k->addr, "SCRIPT LOAD failed");
		if (k->state == LIMITER_ST_CONNECTING)
			limiter_link_drop(k, "script load failed");
		return;
	}
	memcpy(l->sha, reply->str, reply->len);
	l->sha[reply->len] = '\0';
	if (k->state != LIMITER_ST_CONNECTING)
		return;
	ev_timer_stop(l->loop, &k->connect_timer);
	k->state = LIMITER_ST_READY;
	k->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	log_info("redis_connected", "addr=%s attempts=%u script=%s", k->addr,
	         k->failures + 1, l->sha);
	k->failures = 0;
	limiter_update_connected(l);
	if (l->cluster && (!l->cluster->have_map || l->cluster->topo_dirty))
		limiter_topo_refresh(l, "connected");
}

/* Queue SCRIPT LOAD on <k>'s connection. Returns 0 or -1. */
static int limiter_link_send_script_load(struct limiter_link *k)
{
	const struct limiter *l = k->l;
	const char *argv[3] = { "SCRIPT", "LOAD", l->script };
	size_t argvlen[3] = { 6, 4, l->script_len };

	if (redisAsyncCommandArgv(k->ac, limiter_link_on_script_load, NULL, 3, argv,
	                          argvlen) != REDIS_OK)
		return -1;
	k->script_loading = true;
	return 0;
}

/* CONNECTING lasted longer than the stall limit (e.g. a frozen Redis that
 * still accepts TCP, or a sentinel that does not answer): give up this
 * attempt. */
static void limiter_link_on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_link *k = w->data;
	struct limiter *l = k->l;

	(void)loop;
	(void)revents;
	if (k->state != LIMITER_ST_CONNECTING)
		return;
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	if (!k->ac && l->sentinel && l->sentinel->query) {
		redisAsyncContext *q = l->sentinel->query;

		/* its callbacks, run by the free, see it is no longer ours */
		l->sentinel->query = NULL;
		redisAsyncFree(q);
		limiter_link_log_failure(k, "sentinel did not answer in time");
		limiter_link_lost(k);
		return;
	}
	limiter_note_error(l, k->addr, "setup did not finish in time");
	log_warn("redis_connect_timeout", "addr=%s", k->addr);
	limiter_link_drop(k, "connect timeout");
}

/* The backoff wait is over: try to connect again. */
static void limiter_link_on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_link *k = w->data;

	(void)loop;
	(void)revents;
	if (k->in_use && k->state == LIMITER_ST_IDLE)
		limiter_link_connect(k);
}

/*
 * Start one connection attempt on <k> (the context it creates is owned by
 * <k>, freed through limiter_link_drop() or by hiredis on a connection
 * error): non-blocking connect, then AUTH, SELECT, ROLE (not for cluster
 * links), CONFIG GET maxmemory-policy and SCRIPT LOAD pipelined behind it (hiredis
 * sends them once connected). Under sentinel:// with no primary known,
 * ask a sentinel first. On an immediate failure, plan the next attempt. (A
 * host name is resolved with a blocking getaddrinfo() inside hiredis: use
 * addresses.)
 */
static void limiter_link_connect(struct limiter_link *k)
{
	struct limiter *l = k->l;
	const struct redis_url *u = &l->url;
	redisAsyncContext *ac;
	int64_t stall = limiter_stall_us(l);

	if (!k->in_use || l->closing)
		return;
	if (k->attempted && l->metrics)
		metrics_add(&l->metrics->redis_reconnects, 1);
	k->attempted = true;
	if (l->sentinel && !l->sentinel->master_known) {
		limiter_sentinel_query(k);
		return;
	}
	ac = k->is_unix ? redisAsyncConnectUnix(k->host) : redisAsyncConnect(k->host, k->port);
	if (!ac) {
		limiter_link_log_failure(k, "out of memory");
		limiter_link_schedule_retry(k);
		return;
	}
	if (ac->err) {
		limiter_link_log_failure(k, ac->errstr);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		redisAsyncFree(ac);
		limiter_link_schedule_retry(k);
		return;
	}
	ac->data = k;
	if (redisLibevAttach(l->loop, ac) != REDIS_OK) {
		redisAsyncFree(ac);
		limiter_link_schedule_retry(k);
		return;
	}
	redisAsyncSetConnectCallback(ac, limiter_link_on_connect);
	redisAsyncSetDisconnectCallback(ac, limiter_link_on_disconnect);
	k->ac = ac;
	k->state = LIMITER_ST_CONNECTING;
	log_debug("redis_connecting", "addr=%s", k->addr);

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
		redisAsyncCommandArgv(ac, limiter_link_on_setup_reply, (void *)"auth", argc, argv,
		                      argvlen);
	}
	if (u->db >= 0)
		redisAsyncCommand(ac, limiter_link_on_setup_reply, (void *)"select", "SELECT %d", u->db);
	/* a cluster's seeds may be replicas: CLUSTER SLOTS names the primaries */
	if (!l->cluster)
		redisAsyncCommand(ac, limiter_link_on_role, NULL, "ROLE");
	limiter_link_ask_eviction(k);
	limiter_link_send_script_load(k);

	ev_timer_set(&k->connect_timer, (double)stall / 1e6, 0.);
	ev_timer_start(l->loop, &k->connect_timer);
}

/* ------------------------------------------------------------------ */
/* sentinel                                                            */

/* Queue AUTH for the sentinels on <ac> when they have a password (the
 * reply is not needed: a refusal shows in the next command's reply). */
static void limiter_sentinel_auth(const struct limiter *l, redisAsyncContext *ac)
{
	if (l->url.has_sentinel_pass)
		redisAsyncCommand(ac, NULL, NULL, "AUTH %s", l->url.sentinel_pass);
}

/* Connect to the next sentinel of the URL, for <what> (logs). Returns the
 * context with <data> set, or NULL with <why> set. */
static redisAsyncContext *limiter_sentinel_connect(struct limiter *l, unsigned *next, void *data,
                                                   char *where, size_t cap, const char **why)
{
	const struct redis_url_host *h = &l->url.hosts[(*next)++ % l->url.nhosts];
	redisAsyncContext *ac;

	redis_url_format_host(h->host, h->port, where, cap);
	ac = redisAsyncConnect(h->host, h->port);
	if (!ac) {
		*why = "out of memory";
		return NULL;
	}
	if (ac->err || redisLibevAttach(l->loop, ac) != REDIS_OK) {
		*why = "connect failed";
		redisAsyncFree(ac);
		return NULL;
	}
	ac->data = data;
	return ac;
}

/* The query to a sentinel failed or the connection closed before its
 * answer: the next attempt of <k> asks the next sentinel. */
static void limiter_sentinel_query_failed(struct limiter_link *k, const char *why)
{
	char msg[REDIS_URL_ADDR_MAX + 64];

	k->l->sentinel->query = NULL;
	snprintf(msg, sizeof(msg), "sentinel: %s", why);
	limiter_link_log_failure(k, msg);
	limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
	limiter_link_lost(k);
}

/* hiredis: the query connection <ac> to a sentinel finished connecting with
 * <status>; a failure makes the next attempt ask the next sentinel. */
static void limiter_sentinel_on_query_connect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	if (!k->l->sentinel || ac != k->l->sentinel->query || status == REDIS_OK)
		return;
	limiter_sentinel_query_failed(k, ac->errstr ? ac->errstr : "connect failed");
}

/* hiredis: the query connection <ac> closed; before its answer, that is a
 * failed attempt (after it, we closed it ourselves). */
static void limiter_sentinel_on_query_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	(void)status;
	if (!k->l->sentinel || ac != k->l->sentinel->query)
		return;
	limiter_sentinel_query_failed(k, "closed before answering");
}

/* A sentinel answered get-master-addr-by-name: point the link at that
 * primary and connect (ROLE confirms it), or try again later. */
static void limiter_sentinel_on_addr(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	struct limiter *l = k->l;
	struct limiter_sentinel *s = l->sentinel;
	const redisReply *reply = r;
	char host[REDIS_URL_HOST_MAX];
	char *end;
	long port;

	(void)privdata;
	if (!s || ac != s->query)
		return;
	s->query = NULL;
	/* done with this connection: hiredis closes it once we return */
	redisAsyncDisconnect(ac);
	if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    reply->element[1]->type != REDIS_REPLY_STRING ||
	    reply->element[0]->len == 0 || reply->element[0]->len >= sizeof(host)) {
		log_warn("sentinel_no_primary", "master=%s reply=\"%.*s\"", l->url.master,
		         reply && reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
		         reply && reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		k->failures++;
		limiter_link_lost(k);
		return;
	}
	memcpy(host, reply->element[0]->str, reply->element[0]->len);
	host[reply->element[0]->len] = '\0';
	errno = 0;
	port = strtol(reply->element[1]->str, &end, 10);
	if (errno || *end || port < 1 || port > 65535) {
		k->failures++;
		limiter_link_lost(k);
		return;
	}
	if (strcmp(host, k->host) != 0 || (int)port != k->port)
		log_info("sentinel_primary", "master=%s addr=%s:%ld", l->url.master, host, port);
	limiter_link_set_target(k, host, (int)port, false);
	s->master_known = true;
	k->state = LIMITER_ST_IDLE;
	ev_timer_stop(l->loop, &k->connect_timer);
	limiter_link_connect(k);
}

/* Ask the next sentinel where the primary of the URL's master is; <k>
 * stays CONNECTING meanwhile, bounded by its connect timer. */
static void limiter_sentinel_query(struct limiter_link *k)
{
	struct limiter *l = k->l;
	struct limiter_sentinel *s = l->sentinel;
	char where[REDIS_URL_ADDR_MAX], msg[REDIS_URL_ADDR_MAX + 64];
	const char *why = NULL;
	redisAsyncContext *ac;

	ac = limiter_sentinel_connect(l, &s->next, k, where, sizeof(where), &why);
	if (!ac) {
		snprintf(msg, sizeof(msg), "sentinel %s: %s", where, why);
		limiter_link_log_failure(k, msg);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_schedule_retry(k);
		return;
	}
	redisAsyncSetConnectCallback(ac, limiter_sentinel_on_query_connect);
	redisAsyncSetDisconnectCallback(ac, limiter_sentinel_on_query_disconnect);
	s->query = ac;
	k->state = LIMITER_ST_CONNECTING;
	log_debug("sentinel_query", "sentinel=%s master=%s", where, l->url.master);
	limiter_sentinel_auth(l, ac);
	redisAsyncCommand(ac, limiter_sentinel_on_addr, NULL,
	                  "SENTINEL get-master-addr-by-name %s", l->url.master);
	ev_timer_set(&k->connect_timer, (double)limiter_stall_us(l) / 1e6, 0.);
	ev_timer_start(l->loop, &k->connect_timer);
}

static void limiter_sentinel_subscribe(struct limiter *l);

/* The subscription is gone: try the next sentinel after a backoff. */
static void limiter_sentinel_sub_lost(struct limiter *l)
{
	struct limiter_sentinel *s = l->sentinel;
	unsigned d = s->sub_backoff_ms;

	s->sub = NULL;
	if (l->closing)
		return;
	s->sub_backoff_ms = d * 2 > LIMITER_BACKOFF_MAX_MS ? LIMITER_BACKOFF_MAX_MS : d * 2;
	ev_timer_stop(l->loop, &s->sub_retry);
	ev_timer_set(&s->sub_retry, (double)(d / 2 + limiter_rand(l) % (d / 2 + 1)) / 1000.0, 0.);
	ev_timer_start(l->loop, &s->sub_retry);
}

/* hiredis: the subscription connection <ac> finished connecting with
 * <status>; on failure, retry on the next sentinel. */
static void limiter_sentinel_on_sub_connect(const redisAsyncContext *ac, int status)
{
	struct limiter *l = ac->data;

	if (!l->sentinel || ac != l->sentinel->sub || status == REDIS_OK)
		return;
	limiter_sentinel_sub_lost(l);
}

/* hiredis: the subscription connection <ac> closed: subscribe again. */
static void limiter_sentinel_on_sub_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter *l = ac->data;

	(void)status;
	if (!l->sentinel || ac != l->sentinel->sub)
		return;
	log_debug("sentinel_unsubscribed", "reason=\"%s\"", ac->err && ac->errstr ? ac->errstr : "closed");
	limiter_sentinel_sub_lost(l);
}

/*
 * A message on +switch-master: "<name> <old-ip> <old-port> <new-ip>
 * <new-port>". For our master, drop the link to the old primary (its calls
 * are answered "unavailable") and connect to the new one at once.
 */
static void limiter_sentinel_on_switch(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter *l = ac->data;
	struct limiter_sentinel *s = l->sentinel;
	const redisReply *reply = r, *kind, *msg;
	char text[REDIS_URL_NAME_MAX + 2 * REDIS_URL_HOST_MAX + 32];
	char name[REDIS_URL_NAME_MAX], oldh[REDIS_URL_HOST_MAX], newh[REDIS_URL_HOST_MAX];
	int oldp, newp;
	struct limiter_link *k;

	(void)privdata;
	if (!s || ac != s->sub || !reply)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warn("sentinel_subscribe_failed", "reply=\"%.*s\"", (int)reply->len, reply->str);
		s->sub = NULL;
		redisAsyncDisconnect(ac);
		limiter_sentinel_sub_lost(l);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3)
		return;
	kind = reply->element[0];
	msg = reply->element[2];
	if (kind->type != REDIS_REPLY_STRING)
		return;
	if (kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0) {
		s->sub_backoff_ms = LIMITER_BACKOFF_MIN_MS;
		log_debug("sentinel_subscribed", "channel=+switch-master");
		return;
	}
	if (kind->len != 7 || memcmp(kind->str, "message", 7) != 0 ||
	    msg->type != REDIS_REPLY_STRING || msg->len >= sizeof(text))
		return;
	memcpy(text, msg->str, msg->len);
	text[msg->len] = '\0';
	if (sscanf(text, "%63s %255s %d %255s %d", name, oldh, &oldp, newh, &newp) != 5 ||
	    strcmp(name, l->url.master) != 0 || newp < 1 || newp > 65535)
		return;
	log_info("sentinel_switch_master", "master=%s from=%s:%d to=%s:%d", name, oldh, oldp,
	         newh, newp);
	k = l->main_link;
	if (!k)
		return;
	limiter_link_drop(k, "+switch-master");
	if (s->query) {
		redisAsyncContext *q = s->query;

		s->query = NULL;
		redisAsyncFree(q);
	}
	limiter_link_set_target(k, newh, newp, false);
	s->master_known = true;
	k->state = LIMITER_ST_IDLE;
	k->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	ev_timer_stop(l->loop, &k->retry);
	ev_timer_stop(l->loop, &k->connect_timer);
	limiter_link_connect(k);
}

/* Subscribe to +switch-master on the next sentinel. */
static void limiter_sentinel_subscribe(struct limiter *l)
{
	struct limiter_sentinel *s = l->sentinel;
	char where[REDIS_URL_ADDR_MAX];
	const char *why = NULL;
	redisAsyncContext *ac;

	ac = limiter_sentinel_connect(l, &s->sub_next, l, where, sizeof(where), &why);
	if (!ac) {
		limiter_sentinel_sub_lost(l);
		return;
	}
	redisAsyncSetConnectCallback(ac, limiter_sentinel_on_sub_connect);
	redisAsyncSetDisconnectCallback(ac, limiter_sentinel_on_sub_disconnect);
	s->sub = ac;
	log_debug("sentinel_subscribing", "sentinel=%s", where);
	limiter_sentinel_auth(l, ac);
	redisAsyncCommand(ac, limiter_sentinel_on_switch, NULL, "SUBSCRIBE +switch-master");
}

/* The subscription's backoff wait is over: subscribe again. */
static void limiter_sentinel_on_sub_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;

	(void)loop;
	(void)revents;
	if (l->sentinel && !l->sentinel->sub && !l->closing)
		limiter_sentinel_subscribe(l);
}

/* Close the sentinel connections of <l> (their callbacks, run by the
 * frees, see they are no longer ours). */
static void limiter_sentinel_stop(struct limiter *l)
{
	struct limiter_sentinel *s = l->sentinel;
	redisAsyncContext *ac;

	if (!s)
		return;
	ev_timer_stop(l->loop, &s->sub_retry);
	if ((ac = s->query)) {
		s->query = NULL;
		redisAsyncFree(ac);
	}
	if ((ac = s->sub)) {
		s->sub = NULL;
		redisAsyncFree(ac);
	}
}

/* ------------------------------------------------------------------ */
/* cluster                                                             */

/* The link of map node <idx>, connecting it if new; NULL when out of links. */
static struct limiter_link *limiter_cluster_link(struct limiter *l, unsigned idx)
{
	struct limiter_cluster *cl = l->cluster;
	const struct cluster_addr *n = &cl->map.nodes[idx];
	struct limiter_link *k = cl->route[idx];

	if (k && k->in_use && k->port == n->port && strcmp(k->host, n->host) == 0)
		return k;
	k = limiter_link_get(l, n->host, n->port, false);
	cl->route[idx] = k;
	if (k && !k->attempted)
		limiter_link_connect(k);
	return k;
}

/* The map changed: a link for each primary in it, and the links nobody
 * routes to any more (a failed primary, a seed that is a replica) retired. */
static void limiter_cluster_apply(struct limiter *l)
{
	struct limiter_cluster *cl = l->cluster;
	unsigned i, j;

	memset(cl->route, 0, sizeof(cl->route));
	for (i = 0; i < cl->map.nnodes; i++)
		limiter_cluster_link(l, i);
	for (i = 0; i < l->nlinks; i++) {
		struct limiter_link *k = l->links[i];
		bool routed = false;

		if (!k || !k->in_use)
			continue;
		for (j = 0; j < cl->map.nnodes && !routed; j++)
			routed = cl->route[j] == k;
		if (!routed)
			limiter_link_retire(k, "not a primary in the slot map");
	}
	limiter_update_connected(l);
}

/* No link can answer CLUSTER SLOTS: (re)connect the seeds of the URL. */
static void limiter_cluster_seed(struct limiter *l)
{
	unsigned i;

	for (i = 0; i < l->url.nhosts; i++) {
		struct limiter_link *k = limiter_link_get(l, l->url.hosts[i].host,
		                                          l->url.hosts[i].port, false);

		if (k && !k->attempted)
			limiter_link_connect(k);
	}
}

/* CLUSTER SLOTS answered <r> on <ac> of link <privdata> (borrowed, freed by
 * hiredis after this returns): a new map replaces the old one and the links
 * follow it; a bad reply keeps the old map. */
static void limiter_cluster_on_slots(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = privdata;
	struct limiter *l = k->l;
	struct limiter_cluster *cl = l->cluster;
	const redisReply *reply = r;
	char err[160];

	if (!cl || ac != cl->topo_ac)
		return;
	cl->topo_ac = NULL;
	if (!reply)
		return;   /* that link went away; the tick asks another */
	if (cluster_map_from_slots(&cl->next, reply, k->host, err, sizeof(err)) == -1) {
		log_warn("cluster_slots_failed", "via=%s reason=\"%s\"", k->addr, err);
		limiter_count_error(l, METRICS_REDIS_ERR_SCRIPT);
		return;
	}
	cl->topo_dirty = false;
	if (cl->have_map && cluster_map_equal(&cl->map, &cl->next))
		return;
	log_info("cluster_topology", "via=%s primaries=%u slots=%u", k->addr, cl->next.nnodes,
	         cl->next.covered);
	memcpy(&cl->map, &cl->next, sizeof(cl->map));
	cl->have_map = true;
	limiter_cluster_apply(l);
}

/* Ask a ready link for CLUSTER SLOTS (<why> for the debug log), unless one
 * is in flight or the last was sent less than LIMITER_TOPO_MIN_MS ago (the
 * tick then asks); with no ready link, connect the seeds. */
static void limiter_topo_refresh(struct limiter *l, const char *why)
{
	struct limiter_cluster *cl = l->cluster;
	struct limiter_link *k = NULL;
	int64_t now = limiter_now_us();
	unsigned i;

	if (!cl || l->closing)
		return;
	cl->topo_dirty = true;
	if (cl->topo_ac || now - cl->topo_last_us < LIMITER_TOPO_MIN_MS * 1000)
		return;
	/* a different node each time: one with a stale view cannot hold us */
	for (i = 0; i < l->nlinks && !k; i++) {
		struct limiter_link *x = l->links[(i + (unsigned)l->counter) % l->nlinks];

		if (x->in_use && x->state == LIMITER_ST_READY && x->ac)
			k = x;
	}
	if (!k) {
		limiter_cluster_seed(l);
		return;
	}
	if (redisAsyncCommand(k->ac, limiter_cluster_on_slots, k, "CLUSTER SLOTS") != REDIS_OK)
		return;
	cl->topo_ac = k->ac;
	cl->topo_last_us = now;
	log_debug("cluster_refresh", "via=%s why=%s", k->addr, why);
}

/* Every LIMITER_TOPO_TICK_MS: refresh when a primary is missing or a
 * redirect asked for it, and at least every LIMITER_TOPO_IDLE_MS. */
static void limiter_cluster_on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	struct limiter_cluster *cl = l->cluster;

	(void)loop;
	(void)revents;
	if (!cl)
		return;
	if (!l->connected || cl->topo_dirty ||
	    limiter_now_us() - cl->topo_last_us >= LIMITER_TOPO_IDLE_MS * 1000)
		limiter_topo_refresh(l, l->connected ? "timer" : "primary missing");
}

/* The link serving the Redis key <key>/<len> now: the only one, or the
 * primary of the key's slot (NULL while the slot has none). */
static struct limiter_link *limiter_route(struct limiter *l, const char *key, size_t len)
{
	struct limiter_cluster *cl = l->cluster;
	unsigned idx;

	if (!cl)
		return l->main_link;
	if (!cl->have_map)
		return NULL;
	idx = cl->map.slot_node[cluster_key_slot(key, len)];
	if (idx == CLUSTER_NO_NODE || idx >= cl->map.nnodes)
		return NULL;
	return limiter_cluster_link(l, idx);
}

/* ------------------------------------------------------------------ */
/* calls                                                               */

static void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata);

/*
 * (Re-)send call <c> as EVALSHA on link <k> (ASKING first when <asking>),
 * or on the link its key routes to when <k> is NULL. The link may still be
 * connecting: hiredis sends once its setup is through. Returns 0 when
 * hiredis holds <c>, -1 when it could not be sent.
 */
static int limiter_call_send(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                             bool asking)
{
	struct window_args a;
	enum window_reason why;

	if (window_build_args(&c->policy, l->sha, c->key, c->key_len, c->cost, c->member,
	                      &a, &why) == -1)
		return -1;
	if (!k)
		k = limiter_route(l, a.argv[3], a.argvlen[3]);
	if (!k || !k->ac)
		return -1;
	if (asking && redisAsyncCommand(k->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (redisAsyncCommandArgv(k->ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK)
		return -1;
	c->redirects++;
	c->asking = asking;
	c->retried = false;
	c->link = k;
	limiter_link_hold(k);
	return 0;
}

/*
 * Re-send call <c> as EVAL with the full script on link <k>, whose context
 * <ac> answered NOSCRIPT (Redis lost its script cache: restarted, failed
 * over, SCRIPT FLUSH), and re-load the script there once so later calls
 * find it again. Returns 0, or -1 when it cannot be sent.
 */
static int limiter_call_retry_eval(struct limiter *l, struct limiter_link *k,
                                   redisAsyncContext *ac, struct limiter_call *c)
{
	struct window_args a;
	enum window_reason why;

	if (ac != k->ac)
		return -1;
	if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost, c->member,
	                      &a, &why) == -1)
		return -1;
	a.argv[0] = "EVAL";
	a.argvlen[0] = 4;
	a.argv[1] = l->script;
	a.argvlen[1] = l->script_len;
	if (c->asking && redisAsyncCommand(ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (redisAsyncCommandArgv(ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK)
		return -1;
	c->retried = true;
	limiter_link_hold(k);
	if (!k->script_loading && k->state == LIMITER_ST_READY)
		limiter_link_send_script_load(k);
	return 0;
}

static void limiter_call_park(struct limiter *l, struct limiter_call *c);

/*
 * A cluster node answered <c> with the MOVED or ASK in <reply>: learn it
 * (MOVED patches the map and asks for a refresh) and re-send <c> to the
 * node named, within LIMITER_REDIRECTS_MAX hops. Returns 0 when hiredis
 * holds <c> again, -1 when the caller answers it.
 */
static int limiter_cluster_redirect(struct limiter *l, struct limiter_call *c,
                                    const redisReply *reply)
{
	struct limiter_cluster *cl = l->cluster;
	struct cluster_redirect rd;
	struct limiter_link *k = NULL;
	int idx;

	if (!cl || cluster_parse_redirect(reply->str, reply->len, c->link->host, &rd) == -1)
		return -1;
	if (rd.kind == CLUSTER_REPLY_MOVED) {
		idx = cluster_map_add(&cl->map, rd.to.host, rd.to.port);
		if (idx >= 0 && cluster_map_set_slot(&cl->map, rd.slot, (unsigned)idx) == 0)
			k = limiter_cluster_link(l, (unsigned)idx);
		limiter_topo_refresh(l, "moved");
	} else {
		k = limiter_link_get(l, rd.to.host, rd.to.port, false);
		if (k && !k->attempted)
			limiter_link_connect(k);
	}
	log_debug("cluster_redirect", "kind=%s slot=%u from=%s to=%s:%d",
	          cluster_reply_kind_str(rd.kind), rd.slot, c->link->addr, rd.to.host, rd.to.port);
	if (!c->cb || !k || c->redirects >= LIMITER_REDIRECTS_MAX)
		return -1;
	/* MOVED again: two nodes disagree while a migration settles (the
	 * source already points at the target, the target not yet at itself).
	 * Give them a moment rather than bounce the call between them. */
	if (rd.kind == CLUSTER_REPLY_MOVED && c->redirects >= 2) {
		limiter_call_park(l, c);
		return 0;
	}
	return limiter_call_send(l, c, k, rd.kind == CLUSTER_REPLY_ASK);
}

/* TRYAGAIN (the keys of a slot are mid-migration): park <c>; the park
 * timer re-sends it LIMITER_TRYAGAIN_MS later, its deadline still running. */
static void limiter_call_park(struct limiter *l, struct limiter_call *c)
{
	c->next = l->parked;
	l->parked = c;
	if (!ev_is_active(&l->park)) {
		ev_timer_set(&l->park, LIMITER_TRYAGAIN_MS / 1000.0, 0.);
		ev_timer_start(l->loop, &l->park);
	}
}

/* Re-send the parked calls that still wait (else answer "unavailable"),
 * return the others to the pool. */
static void limiter_on_park(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	struct limiter_call *c = l->parked, *next;
	struct window_decision d;

	(void)loop;
	(void)revents;
	l->parked = NULL;
	for (; c; c = next) {
		next = c->next;
		c->next = NULL;
		if (c->cb && !l->closing && limiter_call_send(l, c, NULL, false) == 0)
			continue;
		if (c->cb) {
			window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
			limiter_call_answer(c, &d);
		}
		limiter_call_put(c);
	}
}

/* Log a script error (<oom>: Redis over maxmemory) at warn, rate-limited
 * (log_limited), so a broken script cannot flood the log. */
static void limiter_warn_reply(const struct limiter_link *k, const redisReply *reply, bool oom)
{
	log_limited(CONFIG_LOG_WARN, oom ? "redis_oom" : "redis_script_error",
	            oom ? "redis_oom" : "redis_script_error", "addr=%s reply=\"%.*s\"", k->addr,
	            reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
	            reply->type == REDIS_REPLY_ERROR ? reply->str : "");
}

/*
 * hiredis hands call <privdata> back on <ac>: with the script's reply <r>
 * (borrowed: hiredis frees it after this returns), or NULL when the
 * connection is gone. Cluster redirects and TRYAGAIN send it on again;
 * NOSCRIPT re-sends it once as EVAL; CLUSTERDOWN and READONLY (a primary
 * lost or demoted) are answered "unavailable"; otherwise the call is
 * answered from the reply if it still waits, then returns to the pool.
 */
static void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_call *c = privdata;
	struct limiter *l = c->l;
	struct limiter_link *k = c->link;
	const redisReply *reply = r;
	struct window_decision d;
	int64_t now = limiter_now_us();

	k->held--;
	l->held--;
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
	k->quiet_since_us = now;
	if (reply->type == REDIS_REPLY_ERROR) {
		switch (cluster_classify_error(reply->str, reply->len)) {
		case CLUSTER_REPLY_MOVED:
		case CLUSTER_REPLY_ASK:
			if (limiter_cluster_redirect(l, c, reply) == 0)
				return;   /* hiredis holds it again */
			break;
		case CLUSTER_REPLY_TRYAGAIN:
			if (c->cb && c->redirects < LIMITER_REDIRECTS_MAX) {
				limiter_call_park(l, c);
				return;
			}
			break;
		case CLUSTER_REPLY_CLUSTERDOWN:
			/* the cluster lost a primary and has not promoted its replica */
			limiter_topo_refresh(l, "clusterdown");
			goto unavailable;
		case CLUSTER_REPLY_READONLY:
			/* our primary became a replica (failover): find the new one */
			log_warn("redis_read_only", "addr=%s", k->addr);
			limiter_link_drop(k, "primary demoted to replica");
			limiter_topo_refresh(l, "readonly");
			goto unavailable;
		default:
			break;
		}
	}
	if (window_reply_is_noscript(reply)) {
		limiter_count_error(l, METRICS_REDIS_ERR_NOSCRIPT);
		if (!c->cb) {
			/* answered already: nothing to retry, but reload for the others */
			if (!k->script_loading && ac == k->ac && k->state == LIMITER_ST_READY)
				limiter_link_send_script_load(k);
			goto recycle;
		}
		if (!c->retried) {
			if (limiter_call_retry_eval(l, k, ac, c) == 0)
				return;   /* hiredis holds it again */
		}
	}
	if (!c->cb) {
		/* The deadline answered first (error/redis-timeout), yet Redis ran
		 * the script: an admission it recorded is one the client never got.
		 * Counted so that operators can size redis-timeout. */
		if (window_decide_reply(&c->policy, reply, &d) == 0 && d.status == WINDOW_ALLOW &&
		    l->metrics)
			metrics_add(&l->metrics->late_admissions, 1);
		goto recycle;
	}

	if (l->metrics)
		metrics_observe_redis_latency(l->metrics, (uint64_t)(now - c->sent_us));
	if (window_decide_reply(&c->policy, reply, &d) == -1) {
		/* over maxmemory: fail-closed like any Redis error, named apart */
		bool oom = d.reason == WINDOW_REASON_REDIS_OOM;

		limiter_count_error(l, oom ? METRICS_REDIS_ERR_OOM : METRICS_REDIS_ERR_SCRIPT);
		limiter_warn_reply(k, reply, oom);
	} else if (c->cacheable && d.status == WINDOW_DENY) {
		limiter_cache_store(l, c, &d, now);
	}
	limiter_call_answer(c, &d);
	goto recycle;

unavailable:
	/* Redis is there but cannot take writes for this key now: the same
	 * answer as a lost connection, not a script error. */
	if (c->cb) {
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		limiter_call_answer(c, &d);
	}
recycle:
	limiter_call_put(c);
}

/* A call's deadline passed: answer "timeout" now; hiredis keeps the call
 * until Redis replies or the connection goes. If nothing at all has been
 * answered on its link for the stall limit while calls wait, that Redis is
 * frozen: drop it. */
static void limiter_on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_call *c = w->data;
	struct limiter *l = c->l;
	struct limiter_link *k = c->link;
	struct window_decision d;

	(void)loop;
	(void)revents;
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	window_decide_error(&c->policy, WINDOW_REASON_REDIS_TIMEOUT, &d);
	limiter_call_answer(c, &d);
	/* <c> may be recycled by limiter_link_drop() below: not used after this */
	if (k && k->ac && k->held > 0 &&
	    limiter_now_us() - k->quiet_since_us >= limiter_stall_us(l)) {
		log_warn("redis_stalled", "addr=%s waiting=%u", k->addr, k->held);
		limiter_link_drop(k, "no reply within the stall limit");
	}
}

/* Member prefix of the next request into <dst>/<cap>: unique per limiter
 * instance (random), thread and request; at most 38 bytes and the NUL. The
 * random part is drawn per limiter, not once per process: a limiter
 * re-created for the same thread restarts its counter, and would otherwise
 * repeat members still in a window (ZADD would then move, not add, them). */
static void limiter_next_member(struct limiter *l, char *dst, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t parts[3] = { l->instance, l->thread_id & 0xffffu, l->counter++ };
	char tmp[LIMITER_MEMBER_MAX];
	size_t n = 0;
	int i, shift;

	/* "%016llx-%x-%llx" by hand: this runs once per decision */
	for (shift = 60; shift >= 0; shift -= 4)
		tmp[n++] = hex[(parts[0] >> shift) & 0xf];
	for (i = 1; i < 3; i++) {
		tmp[n++] = '-';
		for (shift = 60; shift > 0 && !((parts[i] >> shift) & 0xf); shift -= 4)
			;
		for (; shift >= 0; shift -= 4)
			tmp[n++] = hex[(parts[i] >> shift) & 0xf];
	}
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, tmp, n);
	dst[n] = '\0';
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
	struct limiter_link *k;
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

	/* Step 3: the link that serves the key (a cluster: the primary of its
	 * slot); without a ready one, or over the bound, no queue. */
	k = limiter_route(l, a.argv[3], a.argvlen[3]);
	if (!k || k->state != LIMITER_ST_READY || !k->ac) {
		if (l->cluster && !k)
			limiter_topo_refresh(l, "slot without primary");
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	if (k->evicts && !l->allow_eviction) {
		/* ask again now and then: an operator may fix it with CONFIG SET */
		if (!k->evict_asking && now - k->evict_asked_us >= LIMITER_EVICT_RECHECK_MS * 1000)
			limiter_link_ask_eviction(k);
		window_decide_error(p, WINDOW_REASON_REDIS_EVICTS, &d);
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
	c->asking = false;
	c->redirects = 0;
	c->link = k;
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
	if (redisAsyncCommandArgv(k->ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK) {
		limiter_call_put(c);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	limiter_link_hold(k);
	l->unanswered++;
	ev_timer_init(&c->deadline, limiter_on_deadline, (double)l->timeout_ms / 1000.0, 0.);
	c->deadline.data = c;
	ev_timer_start(l->loop, &c->deadline);
	return 0;
}

/* ------------------------------------------------------------------ */
/* lifecycle                                                           */

/* Start talking to what l->url names: one link (redis://, unix://), one
 * link found through the sentinels plus the +switch-master subscription
 * (sentinel://), or the seeds of a cluster (cluster://). <l> owns what is
 * allocated here; limiter_backend_stop() undoes it. Returns 0, or -1 with
 * <err> when memory runs out. */
static int limiter_backend_start(struct limiter *l, char *err, size_t errlen)
{
	const struct redis_url *u = &l->url;
	struct limiter_link *k;

	switch (u->mode) {
	case REDIS_URL_CLUSTER:
		l->cluster = calloc(1, sizeof(*l->cluster));
		if (!l->cluster)
			goto fail;
		cluster_map_init(&l->cluster->map);
		ev_timer_init(&l->cluster->topo, limiter_cluster_on_tick, LIMITER_TOPO_TICK_MS / 1000.0,
		              LIMITER_TOPO_TICK_MS / 1000.0);
		l->cluster->topo.data = l;
		ev_timer_start(l->loop, &l->cluster->topo);
		limiter_cluster_seed(l);
		limiter_update_connected(l);
		return 0;
	case REDIS_URL_SENTINEL:
		l->sentinel = calloc(1, sizeof(*l->sentinel));
		if (!l->sentinel)
			goto fail;
		l->sentinel->sub_backoff_ms = LIMITER_BACKOFF_MIN_MS;
		ev_timer_init(&l->sentinel->sub_retry, limiter_sentinel_on_sub_retry, 0., 0.);
		l->sentinel->sub_retry.data = l;
		k = limiter_link_get(l, "", 0, false);
		if (!k)
			goto fail;
		snprintf(k->addr, sizeof(k->addr), "%s", u->addr);
		l->main_link = k;
		limiter_update_connected(l);
		limiter_sentinel_subscribe(l);
		limiter_link_connect(k);
		return 0;
	default:
		k = limiter_link_get(l, u->hosts[0].host, u->hosts[0].port, u->mode == REDIS_URL_UNIX);
		if (!k)
			goto fail;
		/* the address as before: with its db */
		snprintf(k->addr, sizeof(k->addr), "%s", u->addr);
		l->main_link = k;
		limiter_update_connected(l);
		limiter_link_connect(k);
		return 0;
	}

fail:
	snprintf(err, errlen, "out of memory");
	return -1;
}

/* Stop everything limiter_backend_start() started: every call hiredis holds
 * is answered "unavailable" (as <why> says in the log). Links stay
 * allocated (retired) until limiter_free(). */
static void limiter_backend_stop(struct limiter *l, const char *why)
{
	unsigned i;

	limiter_sentinel_stop(l);
	l->main_link = NULL;
	for (i = 0; i < l->nlinks; i++)
		if (l->links[i]->in_use)
			limiter_link_retire(l->links[i], why);
	if (l->cluster) {
		ev_timer_stop(l->loop, &l->cluster->topo);
		free(l->cluster); l->cluster = NULL;
	}
	free(l->sentinel); l->sentinel = NULL;
	limiter_set_connected(l, false);
}

/* redis_url_parse() of <s> into <u>, its reason prefixed "redis: " in
 * <err>. Returns 0 or -1. */
static int limiter_parse_url(const char *s, struct redis_url *u, char *err, size_t errlen)
{
	char why[128];

	if (redis_url_parse(s, u, why, sizeof(why)) == 0)
		return 0;
	snprintf(err, errlen, "redis: %s", why);
	return -1;
}

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
	if (limiter_parse_url(s->redis_url, &l->url, err, errlen) == -1 ||
	    redis_url_load_secrets(&l->url, err, errlen) == -1) {
		redis_url_wipe(&l->url);
		free(l);
		return NULL;
	}
	l->loop = loop;
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	l->script = s->script;
	l->script_len = s->script_len;
	l->metrics = s->metrics;
	l->thread_id = s->thread_id;
	l->instance = limiter_random64((uint64_t)(uintptr_t)l);
	l->rng = limiter_random64(l->instance ^ 0x5bd1e995u);
	l->cache_seed = limiter_random64(l->rng);
	l->cache_on = true;
	l->allow_eviction = s->allow_eviction;
	l->standby = s->standby;
	limiter_copy_policy_names(l, s);
	ev_timer_init(&l->kick, limiter_on_kick, 0., 0.);
	l->kick.data = l;
	ev_timer_init(&l->park, limiter_on_park, 0., 0.);
	l->park.data = l;
	limiter_set_connected(l, false);
	if (limiter_backend_start(l, err, errlen) == -1) {
		limiter_free(l);
		return NULL;
	}
	return l;
}

/* Borrows <s>'s script until limiter_free() or the next reconfigure; the URL
 * and policy names are copied (a new URL or new secrets restart the
 * connections). Contract in limiter.h. */
int limiter_reconfigure(struct limiter *l, const struct limiter_settings *s,
                        char *err, size_t errlen)
{
	struct redis_url u;
	bool script_changed;
	unsigned i;
	int rc = 0;

	if (!s || !s->script || !s->script_len) {
		snprintf(err, errlen, "limiter: missing script");
		return -1;
	}
	if (limiter_parse_url(s->redis_url, &u, err, errlen) == -1)
		return -1;
	if (redis_url_load_secrets(&u, err, errlen) == -1) {
		rc = -1;
		goto out;
	}
	script_changed = s->script_len != l->script_len ||
	                 memcmp(s->script, l->script, s->script_len) != 0;
	l->script = s->script;
	l->script_len = s->script_len;
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	l->allow_eviction = s->allow_eviction;
	if (s->metrics != l->metrics) {
		limiter_set_connected(l, false);
		l->metrics = s->metrics;
		limiter_update_connected(l);
		limiter_set_connected(l, l->connected);
	}
	limiter_copy_policy_names(l, s);
	/* limits or policies may have changed what a cached deny means */
	limiter_cache_clear(l);

	if (!redis_url_same(&u, &l->url)) {
		log_info("redis_address_changed", "from=%s to=%s", l->url.addr, u.addr);
		limiter_backend_stop(l, "address changed");
		redis_url_wipe(&l->url);
		l->url = u;
		rc = limiter_backend_start(l, err, errlen);
	} else {
		/* calls in flight keep the old SHA, which Redis still knows */
		for (i = 0; i < l->nlinks && script_changed; i++) {
			struct limiter_link *k = l->links[i];

			if (k->in_use && k->state == LIMITER_ST_READY)
				limiter_link_send_script_load(k);
		}
		/* a reload is when an operator expects a fixed Redis to be seen */
		for (i = 0; i < l->nlinks; i++) {
			struct limiter_link *k = l->links[i];

			if (k->in_use && k->state == LIMITER_ST_READY && k->ac && !k->evict_asking)
				limiter_link_ask_eviction(k);
		}
	}
out:
	redis_url_wipe(&u);
	return rc;
}

/* Turning <on> off frees the cache table of <l>. */
void limiter_set_deny_cache(struct limiter *l, bool on)
{
	l->cache_on = on;
	if (!on)
		limiter_cache_clear(l);
}

/* Parses <url> and its secrets (the environment, password files) and
 * compares them with what <l> runs on. See limiter.h. */
int limiter_same_redis(const struct limiter *l, const char *url, char *err, size_t errlen)
{
	struct redis_url u;
	int rc = -1;

	if (limiter_parse_url(url, &u, err, errlen) == -1)
		return -1;
	if (redis_url_load_secrets(&u, err, errlen) == 0)
		rc = redis_url_same(&u, &l->url) ? 1 : 0;
	redis_url_wipe(&u);
	return rc;
}

/* See limiter.h. */
bool limiter_ready(const struct limiter *l, char *why, size_t whylen)
{
	if (l->connected && (!l->evicting || l->allow_eviction))
		return true;
	snprintf(why, whylen, "%s", l->last_error[0] ? l->last_error :
	         l->connected ? "maxmemory-policy is not noeviction" : "not connected yet");
	return false;
}

/* See limiter.h: the gauges follow <l> from now on, or no longer. */
void limiter_set_standby(struct limiter *l, bool standby)
{
	l->standby = standby;
	if (!standby) {
		limiter_set_connected(l, l->connected);
		limiter_update_eviction(l);
	}
}

/* Borrowed from <l>: the display form of its URL. */
const char *limiter_addr(const struct limiter *l)
{
	return l->url.addr;
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
	unsigned i;

	if (!l)
		return;
	l->closing = true;
	/* answers every call hiredis holds with a NULL reply */
	limiter_backend_stop(l, "shutdown");
	limiter_on_park(l->loop, &l->park, 0);
	ev_timer_stop(l->loop, &l->park);
	ev_timer_stop(l->loop, &l->kick);
	while (l->nanswers)
		limiter_on_kick(l->loop, &l->kick, 0);
	ev_timer_stop(l->loop, &l->kick);
	for (i = 0; i < l->nlinks; i++) {
		free(l->links[i]); l->links[i] = NULL;
	}
	while ((ch = l->chunks)) {
		l->chunks = ch->next;
		free(ch);
	}
	free(l->answers); l->answers = NULL;
	limiter_cache_clear(l);
	redis_url_wipe(&l->url);
	free(l);
}
