/*
 * worker - one thread, one libev loop, its limiter (Redis links), its HAProxy
 * connections. Nothing in a worker is touched by another thread except
 * through worker_* calls below, which go through a locked mailbox and an
 * ev_async (a libev loop belongs to one thread; ev_async_send() is the one
 * call another thread may make on it: ev(3), "THREADS AND COROUTINES").
 */
#ifndef SPOA_WORKER_H
#define SPOA_WORKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "reload.h"

struct ev_async;
struct ev_loop;
struct worker;
struct metrics;

/* A configuration generation, shared read-only by all workers. Freed (with
 * config_release) when the last reference goes. */
struct cfg_gen {
	_Atomic unsigned refs;
	struct config cfg;
};

/* Allocate a generation holding a deep copy of <c>, with one reference for
 * the caller. Returns NULL on allocation failure. */
struct cfg_gen *cfg_gen_new(const struct config *c);
void cfg_gen_get(struct cfg_gen *g);
void cfg_gen_put(struct cfg_gen *g);

/* Create worker <id> (not started) on generation <g> (it takes its own
 * reference). <script> is borrowed for the worker's lifetime, and so is
 * <admitted>, the process-wide count of connections (see conn_env). */
struct worker *worker_new(unsigned id, struct cfg_gen *g, const char *script,
                          size_t script_len, _Atomic unsigned *admitted,
                          char *err, size_t errlen);
int worker_start(struct worker *w, char *err, size_t errlen);

/* From another thread: give connected socket <fd>, already counted in the
 * worker's <admitted>, to the worker. */
void worker_give_fd(struct worker *w, int fd);
/*
 * Reloads, in two phases, so that a reload is all or nothing:
 *   worker_prepare_config(w, g, seq)  the worker checks <g> and, when the
 *       Redis address or credentials change, connects and sets up the new
 *       Redis beside the old one (decisions keep going to the old one);
 *       then it posts its verdict and wakes <main_async> on <main_loop>.
 *   worker_config_result(w, seq, ...) main reads that verdict.
 *   worker_finish_config(w, seq, cmd)  RELOAD_CMD_COMMIT: switch to <g>
 *       (new decisions use it and the new Redis; the old one drains);
 *       RELOAD_CMD_ABORT: drop what was prepared. Cannot fail.
 * Main runs one reload at a time. All from main's thread. Main and each
 * worker keep the reload's state in the machine of reload.h: IDLE,
 * PREPARING (staged), READY or FAILED (the verdict), IDLE again.
 */
void worker_set_reply(struct worker *w, struct ev_loop *main_loop, struct ev_async *main_async);
/* The live overrides and the denial counts its decisions use (live.h,
 * denied.h), before worker_start(); borrowed, may be NULL. */
struct live;
struct denied;
void worker_set_live(struct worker *w, struct live *live, struct denied *denied);
void worker_prepare_config(struct worker *w, struct cfg_gen *g, unsigned seq);
/* 1 with <*ok> and <err> when the verdict on <seq> is in, else 0. */
int worker_config_result(struct worker *w, unsigned seq, bool *ok, char *err, size_t errlen);
void worker_finish_config(struct worker *w, unsigned seq, enum reload_cmd cmd);
/* The one function that changes a reload's state, main's (<worker> -1) or
 * worker <worker>'s: reload_step(), an illegal move logged as the bug it
 * is ("reload_bug", reload <seq>) and refused: -1, <*st> unchanged. */
int worker_reload_step(enum reload_state *st, enum reload_event ev, int worker, unsigned seq);
/* From another thread: stop taking work, finish in flight, then exit the
 * thread (at the latest after <grace> seconds). */
void worker_drain(struct worker *w, double grace);
void worker_join(struct worker *w);
void worker_free(struct worker *w);

/* The worker's counters (read by the metrics scraper). */
const struct metrics *worker_metrics(const struct worker *w);
/* Any thread: the worker can decide: every Redis link it needs is set up
 * with the script loaded, and none evicts keys unless allowed (/readyz).
 * If not, <why> gets the reason (as of the last heartbeat, 0.25 s). */
bool worker_ready(struct worker *w, char *why, size_t whylen);
/* Any thread: the worker's loop turned within <max_silence_us> (/healthz). */
bool worker_alive(const struct worker *w, uint64_t max_silence_us);

#endif /* SPOA_WORKER_H */
