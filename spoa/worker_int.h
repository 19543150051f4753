/*
 * worker_int - what the worker's files share, and nobody else:
 *   worker.c         the thread: lifecycle, loop, mailbox, heartbeat (worker.h)
 *   worker_reload.c  the reload on the worker's side: prepare, verdict,
 *                    commit or abort, the limiters a reload retires; the
 *                    configuration generations (cfg_gen, worker_cfg)
 * Which file owns which part of struct worker: the table above struct
 * worker_mailbox below.
 */
#ifndef SPOA_WORKER_INT_H
#define SPOA_WORKER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ev.h>

#include "conn.h"
#include "conn_notify.h"
#include "limiter.h"
#include "metrics.h"
#include "reload.h"
#include "worker.h"

#define WORKER_FDQ_MAX 4096
#define WORKER_RETIRED_MAX 8            /* old limiters draining after reloads */

/* The per-worker view of a generation: requests in flight hold it. */
struct worker_cfg {
	struct conn_cfg_ref ref;
	struct cfg_gen *gen;
};

/*
 * The worker's state, by owner: only the owner writes a part, the others
 * read it or call the owner's functions (docs/architecture.md's table):
 *   w->mbox      other threads, under mbox.lock (worker.h's calls); emptied
 *                by worker_on_wake on the worker's thread (worker.c)
 *   w->reload    worker_reload.c, on the worker's thread; its verdict under
 *                mbox.lock, read by main (worker_config_result)
 *   w->limiter   the reload: only a commit replaces the serving limiter
 *   w->health    the heartbeat (worker_on_beat); read by any thread
 *   w->env       the connections (conn/: the transport); a commit replaces
 *                the timeouts
 *   w->notify    the NOTIFY side (conn/conn_notify.c), set up here once; a
 *                commit replaces its cfg
 *   w->metrics   the decisions (conn/, limiter/); a commit moves per-policy
 *                counters; the metrics scraper reads them
 *   the rest     worker.c: the lifecycle (worker_new .. worker_free), the
 *                loop's own watchers
 */

/* What other threads post (worker.h), under <lock>, then <wake>. */
struct worker_mailbox {
	pthread_mutex_t lock;
	ev_async wake;                  /* something was posted */
	int fdq[WORKER_FDQ_MAX];
	unsigned nfdq;
	struct cfg_gen *prep_gen;       /* reload: prepare this (seq prep_seq) */
	unsigned prep_seq;
	enum reload_cmd finish;         /* reload: commit or abort seq finish_seq */
	unsigned finish_seq;
	bool drain;
	double drain_grace;
};

/* One reload as this worker sees it: <state> changes only through
 * worker_reload_step(); <staged> is held from prepare to commit or abort. */
struct worker_reload {
	enum reload_state state;
	struct cfg_gen *staged;         /* prepared, not committed yet */
	unsigned seq;                   /* <staged>'s reload */
	struct limiter *next;           /* the new Redis being set up, or NULL */
	ev_timer poll;                  /* polls <next> until ready or the deadline */
	double deadline;
	struct limiter *retired[WORKER_RETIRED_MAX];   /* draining old limiters */
	unsigned nretired;
	/* the verdict, under mbox.lock; main reads it (worker_config_result) */
	unsigned verdict_seq;           /* verdict posted for this seq */
	bool verdict_ok;
	char verdict_err[256];
	struct ev_loop *main_loop;      /* where verdicts are announced: main's, set by
	                                 * worker_set_reply() before the thread starts */
	struct ev_async *main_async;
};

/* Proof that the loop turns, and whether the limiter can decide. */
struct worker_health {
	ev_timer beat;
	_Atomic int64_t beat_us;        /* monotonic, last turn of <beat> */
	_Atomic bool ready;             /* the serving limiter can decide (/readyz) */
	char not_ready_why[160];        /* why not, under mbox.lock */
	uint64_t live_epoch;            /* live_epoch() when the deny cache was last emptied */
};

struct worker {
	unsigned id;
	pthread_t thread;
	bool started;
	struct ev_loop *loop;
	const char *script;
	size_t script_len;
	ev_prepare flush;               /* write coalesced output once per iteration */
	ev_timer grace;                 /* drain deadline */
	ev_timer trim;                  /* WORKER_TRIM_S, repeating */

	struct worker_mailbox mbox;
	struct worker_reload reload;
	struct limiter *limiter;        /* the one that serves */
	struct worker_health health;
	struct conn_env env;
	struct conn_notify_env notify;
	struct metrics metrics;
};

/* worker_reload.c, for worker.c */

/* Wrap <g> for this worker (takes a reference). NULL on ENOMEM. */
struct worker_cfg *worker_cfg_new(struct cfg_gen *g);
/* conn_cfg_ref.release: drops the generation, frees <ref>. */
void worker_cfg_release(struct conn_cfg_ref *ref);
void worker_fill_settings(struct worker *w, const struct config *c,
                          struct limiter_settings *s);
/* worker_new: the reload's watcher, on <w>'s loop. */
void worker_reload_init(struct worker *w);
/* Phase one: <g>'s reference (the mailbox's) passes to the worker. */
void worker_reload_prepare(struct worker *w, struct cfg_gen *g, unsigned seq);
/* Phase two: commit or abort reload <seq>. */
void worker_reload_finish(struct worker *w, unsigned seq, enum reload_cmd cmd);
/* Free the retired limiters that no call holds any more. */
void worker_reload_reap(struct worker *w);
/* Free every limiter: serving, being prepared, retired. */
void worker_reload_free_limiters(struct worker *w);

#endif /* SPOA_WORKER_INT_H */
