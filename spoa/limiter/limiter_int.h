/*
 * limiter_int - what the limiter's own files share, and nobody else:
 *   limiter.c          limiter_check() and the lifecycle (limiter.h)
 *   limiter_call.c     calls: the pool, answers, waiting, send, results, deadlines
 *   limiter_reply.c    a reply acted on, one call's or a batch's
 *   limiter_verdict.c  (pure, its own header) what a reply says
 *   limiter_batch.c    redis-batch: a loop iteration's calls as one
 *   limiter_link.c     one connection's life: connect, setup, backoff, stall, retire
 *   limiter_health.c   the gauges and each link's eviction watch
 *   limiter_engine_*.c how a decision is asked (limiter_engine.h)
 *   limiter_sentinel.c where a sentinel says the primary is, +switch-master
 *   limiter_cluster.c  Redis Cluster: the slot map's links, routing, redirects
 *   deny_cache.c       (pure, its own header) accounts known to be denied
 * Which file owns which part of the state: the table above struct
 * limiter_link_watch below.
 * Single-threaded: everything here runs on the one loop of the limiter's
 * worker thread.
 *
 * Clock: every time kept here (latency, stall detection, deny cache
 * deadlines) is CLOCK_MONOTONIC, not ev_now(): libev's ev_now() follows the
 * wall clock, and a deny cached across a wall-clock step back would outlive
 * what Redis would answer. The per-call deadlines are ev_timers, which libev
 * runs on its own monotonic clock.
 */
#ifndef SPOA_LIMITER_INT_H
#define SPOA_LIMITER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "cluster.h"
#include "deny_cache.h"
#include "limiter_engine.h"
#include "limiter.h"
#include "metrics.h"
#include "redis_tls.h"
#include "redis_url.h"
#include "resolve.h"
#include "window.h"

#define LIMITER_MAX_HELD        65536u  /* calls hiredis may hold at once */
#define LIMITER_WAIT_MAX        4096u   /* calls waiting for a link to be ready
                                         * (592 bytes each on x86-64: 2.4 MiB per worker) */
#define LIMITER_MODULE_PROTOCOL 6       /* the RATELIMIT.DECIDE protocols this agent speaks:
                                         * 1 .. this */
#define LIMITER_MODULE_PROTOCOL_GCRA 2  /* the first that decides algorithm=gcra */
#define LIMITER_MODULE_PROTOCOL_POOL 3  /* the first that decides a pool (pool=) */
#define LIMITER_MODULE_PROTOCOL_LEASES 4 /* the first with leases (inflight=) */
#define LIMITER_MODULE_PROTOCOL_QUOTA 4 /* the first that decides a calendar quota */
#define LIMITER_MODULE_PROTOCOL_SETTLE 5 /* the first that settles (settle=); from 6 its
                                          * reply also says what the windows have left */
#define LIMITER_BATCH_MAX       CONFIG_REDIS_BATCH_MAX
#define LIMITER_POOL_CHUNK      256u    /* calls allocated together */
#define LIMITER_POOL_KEEP       1u      /* idle chunks kept after a burst */
#define LIMITER_ANSWERS_KEEP    64u     /* queued-answer slots kept */
#define LIMITER_BATCH_KEEP      4u      /* idle batches kept after a burst */
#define LIMITER_CMD_MIN         4096u   /* the command buffer's first size */
#define LIMITER_CMD_KEEP        65536u  /* a command buffer larger than this is
                                         * given back after a burst */
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
#define LIMITER_EVICT_POLL_MS   500     /* a ready link asks the eviction policy and
                                         * evicted_keys this often (the bound of
                                         * docs/security.md: seen within 1 s) */
#define LIMITER_EVICT_HOLD_MS   10000   /* evicted_keys growth refuses this long */

enum limiter_state {
	LIMITER_ST_IDLE = 0,    /* not connected; the retry timer may run */
	LIMITER_ST_CONNECTING,  /* TCP connect or AUTH/SELECT/SCRIPT LOAD pending */
	LIMITER_ST_READY,       /* EVALSHA may be sent */
	LIMITER_ST_COUNT
};


/*
 * The limiter's state, by the file that owns it: only the owner writes a
 * part (the others read it, or call the owner's functions); each part is
 * its own struct, named below, and struct limiter at the end is only the
 * sum of the parts.
 *
 *   part                              owner
 *   struct limiter_link               limiter_link.c (one connection)
 *     .watch (limiter_link_watch)     limiter_health.c (its eviction watch)
 *     .script (limiter_link_script)   limiter_engine_script.c (a load in flight)
 *     .module (limiter_link_module)   limiter_engine_module.c (probe, protocol)
 *   struct limiter_links   l->links   limiter_link.c (every link, the held count)
 *   struct limiter_calls   l->calls   limiter_call.c (pool, answers, waiting, parked,
 *                                     the deny cache)
 *   struct limiter_call, _chunk       limiter_call.c
 *   struct limiter_batcher l->batch   limiter_batch.c (redis-batch's queue)
 *   struct limiter_batch              limiter_batch.c
 *   struct limiter_health  l->health  limiter_health.c (gauges, last error)
 *   struct limiter_script  l->script  limiter_engine_script.c (source, SHA)
 *   struct limiter_cluster l->cluster limiter_cluster.c (with l->topo while on)
 *   struct limiter_sentinel l->sentinel limiter_sentinel.c (with l->topo while on)
 *   the rest of struct limiter        limiter.c (settings, lifecycle, the engines
 *                                     redis-engine runs: l->engines)
 */

/* A link's eviction watch (limiter_health.c owns it, the link resets it
 * through limiter_link_watch_reset()): <evicts> is what decisions see,
 * true while the policy evicts or evicted_keys grew within the hold time. */
struct limiter_link_watch {
	bool evicts;
	bool policy_evicts;             /* CONFIG GET: maxmemory-policy is not noeviction */
	bool evict_asking;              /* a CONFIG GET maxmemory-policy is in flight */
	bool config_refused;            /* this connection may not CONFIG GET */
	bool info_asking;               /* an INFO stats is in flight */
	bool info_refused;              /* this connection may not INFO */
	bool info_warned;               /* said so once for this link */
	long long evicted_base;         /* evicted_keys last seen, -1: none yet */
	int64_t evicted_seen_us;        /* when it last grew, 0: never */
	ev_timer poll;                  /* READY: LIMITER_EVICT_POLL_MS, repeating */
};

/* What the engines keep per link, each its own (limiter_engine_script.c,
 * limiter_engine_module.c), reset by their link_reset op. */
struct limiter_link_script {
	bool loading;                   /* a SCRIPT LOAD is in flight */
};
struct limiter_link_module {
	bool probe_warned;              /* said once that COMMAND INFO is refused */
	bool probe_present;             /* COMMAND INFO found RATELIMIT.DECIDE; read by
	                                 * the RATELIMIT.VERSION reply that follows it */
	long long protocol;             /* RATELIMIT.VERSION's protocol, -1 unknown */
};

/* One connection to one Redis server (the only one, a sentinel's primary,
 * or a cluster primary), owned by limiter_link.c. <addr> is what logs show:
 * never a password. */
struct limiter_link {
	struct limiter *l;
	enum limiter_state state;
	redisAsyncContext *ac;          /* NULL when IDLE */
	bool in_use;                    /* false: retired, may be reused */
	bool is_unix;
	char host[REDIS_URL_HOST_MAX];  /* TCP host, or the unix socket path */
	int port;
	char addr[REDIS_URL_ADDR_MAX];
	const struct limiter_engine *engine;    /* what this connection's decisions use
	                                         * (set by the engines' setup) */
	unsigned setup_pending;         /* engines whose part of the setup is not through */
	struct limiter_link_script script;  /* limiter_engine_script.c's */
	struct limiter_link_module module;  /* limiter_engine_module.c's */
	ev_timer retry;                 /* IDLE: next connect attempt */
	ev_timer connect_timer;         /* CONNECTING: give up */
	unsigned backoff_ms;
	bool attempted;                 /* a first connect was tried */
	bool was_ready;                 /* ready since it was made (or moved to a new
	                                 * primary): once it was, a decision no
	                                 * longer waits for it (an outage answers at
	                                 * once, as before decisions could wait),
	                                 * unless its topology waits for lost links
	                                 * (limiter_topo_ops.wait_lost: Cluster) */
	unsigned failures;              /* failed attempts since last ready */
	unsigned held;                  /* calls hiredis holds on this link */
	int64_t quiet_since_us;         /* last reply, or when <held> left 0 */
	struct limiter_link_watch watch;    /* limiter_health.c's */
	/* A name is resolved before every attempt (a managed endpoint moves
	 * on failover) and each of its addresses tried in turn. */
	struct resolve_req *resolving;  /* lookup in flight, or NULL */
	struct resolve_result addrs;    /* the last answer */
	unsigned addr_next;             /* next of <addrs> to try */
	char ip[RESOLVE_IP_MAX];        /* the address this attempt uses */
};

/* Every link of a limiter (limiter_link.c). Link structs are never freed
 * before limiter_free(): a retired one is reused for a new target. */
struct limiter_links {
	struct limiter_link *all[LIMITER_LINKS_MAX];    /* retired ones included */
	unsigned n;                     /* allocated */
	struct limiter_link *main;      /* the one link, unless cluster:// */
	unsigned held;                  /* calls hiredis holds, all links */
	uint64_t rng;                   /* xorshift state for the backoff's jitter */
};

/* One decision's call (limiter_call.c). */
struct limiter_call {
	struct limiter *l;
	struct limiter_call *next;      /* pool freelist, the parked list, or the waiting list */
	struct limiter_call *prev;      /* the waiting list (doubly linked: a deadline unlinks) */
	limiter_cb cb;                  /* NULL once answered */
	void *arg;
	ev_timer deadline;
	int64_t sent_us;                /* monotonic, when EVALSHA was queued */
	bool retried;                   /* already re-sent as EVAL */
	bool asking;                    /* last sent after ASKING */
	bool cacheable;                 /* a deny may go to the deny cache */
	bool waiting;                   /* on the waiting list: no link was ready for it yet */
	bool pinned;                    /* waits for <link> (an ASK target), not its key's link */
	unsigned redirects;             /* MOVED/ASK/TRYAGAIN hops so far */
	struct limiter_link *link;      /* where hiredis holds it */
	const struct limiter_engine *engine;    /* what it was last sent with */
	struct limiter_chunk *chunk;    /* the pool chunk it lives in */
	unsigned policy_index;          /* UINT_MAX = unknown */
	uint64_t cost;
	/* Copies: <p> and <key> are only borrowed during limiter_check(). The
	 * policy's own limits are replaced by those that apply to <key>, so
	 * the copy needs no override table. */
	struct window_policy policy;
	size_t key_len;
	char key[WINDOW_KEY_MAX];
};

/* limiter_call.c's pool allocates calls by the chunk. */
struct limiter_chunk {
	struct limiter_chunk *next;
	unsigned nfree;                 /* of its calls, on the freelist */
	bool trim;                      /* being freed by limiter_call_trim() */
	struct limiter_call calls[LIMITER_POOL_CHUNK];
};

/* An answer that did not need Redis, delivered on the next loop iteration. */
struct limiter_answer {
	limiter_cb cb;
	void *arg;
	struct window_decision d;
};

/* The calls of a limiter (limiter_call.c): the pool, the answers queued
 * for the next loop iteration, the calls waiting for a link, the calls
 * parked by TRYAGAIN. */
struct limiter_calls {
	struct limiter_chunk *chunks;
	struct limiter_call *free;
	unsigned n;                     /* allocated */
	unsigned unanswered;            /* armed and not answered yet */
	struct limiter_answer *answers;
	size_t nanswers, answers_cap;
	ev_timer kick;                  /* deliver the queued answers */
	ev_timer park;                  /* re-send calls parked by TRYAGAIN */
	struct limiter_call *parked;
	/* the RESP text of the command being sent (resp_cmd.h), grown to the
	 * largest; hiredis copies it out before limiter_call_command() returns */
	char *cmd;
	size_t cmd_cap;
	/* calls that arrived while their link was not ready (start-up, a
	 * reconnect): sent when a link becomes ready (limiter_wake()),
	 * answered "unavailable" at their deadline; at most LIMITER_WAIT_MAX */
	struct limiter_call *waiting, *waiting_tail;
	unsigned nwaiting;
	/* the deny cache: the denials Redis gave, answered again without it
	 * (looked up by limiter_call_cached(), stored from the replies), and
	 * the policy names of its metric's index */
	bool cache_on;
	struct deny_cache cache;
	size_t npolicies;
	size_t policy_name_len[CONFIG_MAX_POLICIES];
	char policy_names[CONFIG_MAX_POLICIES][WINDOW_NAME_MAX];
};

/* Calls sent together as one script call (redis-batch), limiter_batch.c's:
 * hiredis holds the batch as privdata; each call keeps its own deadline and
 * is answered from its element of the reply. From the batch pool (no
 * malloc per batch once warm), back there when hiredis hands it back. */
struct limiter_batch {
	struct limiter *l;
	struct limiter_batch *next;     /* pool freelist */
	struct limiter_link *link;
	const struct limiter_engine *engine;    /* what it was last sent with */
	bool retried;                   /* already re-sent as EVAL */
	unsigned n;
	struct limiter_call *calls[LIMITER_BATCH_MAX];
};

/* redis-batch (limiter_batch.c): calls made in this loop iteration wait in
 * <queue> for <flush>, an ev_prepare that runs before the loop next blocks
 * (no added wait). <queue> holds up to <size> calls, all for one link. */
struct limiter_batcher {
	unsigned size;                  /* 1: one script call per decision */
	struct limiter_call *queue[LIMITER_BATCH_MAX];
	unsigned nqueued;
	ev_prepare flush;
	struct limiter_batch *free;     /* the batch pool */
	/* the queued calls' requests as limiter_check() built them: args[i]
	 * is queue[i]'s when <kept> (copied by limiter_batch_submit(), so a
	 * batch is not built twice); grown to <size> while the queue is empty
	 * (each entry's argv points into itself) */
	struct window_args *args;
	size_t args_cap;
	bool kept;
	/* scratch of a batch's command words, grown to the largest batch */
	const char **argv;
	size_t *argvlen;
	char *nums;
	size_t cap;
};

/* What the links report (limiter_health.c). */
struct limiter_health {
	bool connected;                 /* what the metrics gauge says */
	bool evicting;                  /* a link in use evicts keys */
	char last_error[160];           /* why the last attempt failed, for a reload's verdict */
};

/* The script engine's state (limiter_engine_script.c). */
struct limiter_script {
	const char *text;               /* lua/sliding_window.lua, borrowed from the settings */
	size_t len;
	char sha[LIMITER_SHA_MAX];      /* "" until a SCRIPT LOAD answered */
};

/*
 * What a topology above the links (Sentinel, Cluster) does at a link's
 * moments. A link is a leaf: it reaches the topology only through l->topo
 * (NULL: one plain Redis, every hook's default), never by name. Every hook
 * may be NULL.
 */
struct limiter_topo_ops {
	bool skip_role;                 /* no ROLE at setup (a cluster seed may be a replica) */
	bool role_required;             /* a refused ROLE fails the attempt (Sentinel) */
	bool wait_lost;                 /* a lost link's decisions wait for it or for the
	                                 * map to move, within their deadline (a Cluster
	                                 * node failing over); else only a link never
	                                 * ready yet is waited for */
	/* before a connect attempt of <k>: true when the topology takes it over */
	bool (*before_connect)(struct limiter_link *k);
	/* <k>'s connect timer fired while the topology works for it: true when
	 * the hook dealt with it */
	bool (*connect_timeout)(struct limiter_link *k);
	/* stop the lookups the topology runs for <k> */
	void (*stop_resolving)(struct limiter_link *k);
	/* <k> is set up and may take calls */
	void (*on_ready)(struct limiter_link *k);
	/* <k> lost its connection */
	void (*on_lost)(struct limiter_link *k);
	/* can <l> decide for every key: each link it needs is ready? */
	bool (*up)(const struct limiter *l);
};

/* Redis Cluster state (limiter_cluster.c): the slot map and the link of
 * each of its nodes. */
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

/* Sentinel state (limiter_sentinel.c): who the primary is, and the
 * +switch-master subscription. */
struct limiter_sentinel {
	bool master_known;              /* the link's host/port came from a sentinel */
	unsigned next;                  /* sentinel to ask next (round robin) */
	redisAsyncContext *query;       /* get-master-addr-by-name in flight */
	redisAsyncContext *sub;         /* SUBSCRIBE +switch-master */
	unsigned sub_next;
	unsigned sub_backoff_ms;
	ev_timer sub_retry;
	char err[256];                  /* why the last connect to a sentinel failed */
	/* a sentinel given by name is resolved (off the loop) before each
	 * connect; <*_idx> is the one being resolved */
	struct resolve_req *query_resolving, *sub_resolving;
	unsigned query_idx, sub_idx;
};

/* One limiter: limiter.c's settings and lifecycle, and the parts the other
 * files own (see the table above). */
struct limiter {
	/* limiter.c: the settings (read by all, written on new and reconfigure) */
	struct ev_loop *loop;
	struct redis_url url;           /* secrets included: wiped on free */
	struct config_tls tls_cfg;      /* redis-tls-*, for a TLS URL */
	struct redis_tls *tls;          /* the TLS context, with a TLS URL */
	struct resolve *resolver;       /* host names, off the loop */
	uint64_t timeout_ms;
	struct metrics *metrics;
	bool allow_eviction;            /* redis-allow-eviction yes */
	bool legacy_keys;               /* an upgrade's 1.0.x keys (limiter_legacy_on) */
	enum limiter_engine_mode engine_mode;   /* redis-engine */
	long long module_protocol_min;  /* the oldest module protocol that decides every
	                                 * policy (2 with an algorithm=gcra policy, else 1) */
	bool standby;                   /* being prepared or retired: the gauges are not ours */
	/* limiter.c: the lifecycle */
	bool closing;                   /* inside limiter_free() */
	bool in_check;                  /* inside limiter_check(): answers are deferred */
	bool stopping;                  /* a planned stop (shutdown, reload): links close at info */
	uint64_t instance;              /* random per limiter: seeds the generators */
	uint64_t counter;               /* decisions asked: rotates the topology refresh's node */
	/* limiter.c sets it: a link became ready, or the topology moved
	 * (limiter_wake(), limiter_call.c's: send what waits) */
	void (*wake)(struct limiter *l);
	/* limiter.c sets it: what hiredis hands one call's reply to
	 * (limiter_on_reply(), limiter_reply.c's); the call layer sends with
	 * it and never names it */
	redisCallbackFn *on_reply;
	/* limiter.c, from redis-engine: the engines a link runs; the link
	 * reaches them only through this table and k->engine, never by name */
	struct {
		const struct limiter_engine *first;     /* a new connection's, until its setup says */
		const struct limiter_engine *setup[LIMITER_ENGINE_COUNT];   /* whose setup runs, in order */
		unsigned n;
		const struct limiter_engine *all[LIMITER_ENGINE_COUNT];
	} engines;

	struct limiter_links links;     /* limiter_link.c */
	struct limiter_calls calls;     /* limiter_call.c */
	struct limiter_batcher batch;   /* limiter_batch.c */
	struct limiter_health health;   /* limiter_health.c */
	struct limiter_script script;   /* limiter_engine_script.c */
	/* the topology (sentinel:// and cluster://, else all NULL): set by
	 * limiter_cluster_start()/limiter_sentinel_start(), cleared by their
	 * stop */
	const struct limiter_topo_ops *topo;
	struct limiter_cluster *cluster;
	struct limiter_sentinel *sentinel;
	struct limiter_release *releases; /* limiter_lease.c: releases not yet answered */
	struct limiter_release *release_spare;  /* limiter_lease.c: answered, kept for reuse */
	unsigned nrelease_spare;
};

/* The link's own note that <k> heard from Redis at <now> (a reply of any
 * kind: the stall limit counts from there); inline so that the leaves
 * under the link (limiter_health.c) may note theirs. */
static inline void limiter_link_heard(struct limiter_link *k, int64_t now)
{
	k->quiet_since_us = now;
}

/* Microseconds of CLOCK_MONOTONIC (see "Clock" above): the one clock the
 * metrics use too, signed for the limiter's differences. */
static inline int64_t limiter_now_us(void)
{
	return (int64_t)metrics_now_us();
}


/* The stall limit and the connect timeout: max(1 s, 10 x <l>'s timeout). */
static inline int64_t limiter_stall_us(const struct limiter *l)
{
	uint64_t ms = l->timeout_ms * 10;

	if (ms < LIMITER_STALL_MIN_MS)
		ms = LIMITER_STALL_MIN_MS;
	return (int64_t)ms * 1000;
}

/* Frees the releases still waiting (limiter_lease.c), each counted as
 * release-failed: at limiter_free(). */
void limiter_releases_free(struct limiter *l);

/* Bytes of getrandom() one thread draws at once for lease ids (16 an id). */
#define LIMITER_LEASE_BLOCK 4096

/* A lease id into <out> (WINDOW_LEASE_ID_LEN + 1 bytes): 128 random bits
 * (getrandom(), drawn a block at a time per thread) in lower-case hex, so
 * that nobody can guess another request's. 0 or -1 (<out> then ""). */
int limiter_draw_lease(char *out);

/* Frees <l>'s spare release records beyond a few (limiter_lease.c), for
 * limiter_trim(). Returns how many were freed. */
unsigned limiter_releases_trim(struct limiter *l);

/* Count one failed Redis call of <kind> in <l>'s metrics, if any. */
static inline void limiter_count_error(struct limiter *l, enum metrics_redis_error kind)
{
	if (l->metrics)
		metrics_add(&l->metrics->redis_errors[kind], 1);
}

#endif /* SPOA_LIMITER_INT_H */
