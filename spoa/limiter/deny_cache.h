/*
 * deny_cache - accounts known to be denied, answered without Redis.
 *
 * No I/O, no clock of its own: the caller passes monotonic microseconds.
 * A table of a configured number of entries (deny-cache-size, a power of
 * two), mapped on the first deny and unmapped by deny_cache_clear() or by
 * deny_cache_trim() once no entry in it can be live, so an idle worker
 * holds none of it; open addressing over DENY_CACHE_PROBES slots, hashed
 * with a per-cache seed so that keys chosen by clients cannot aim at one
 * probe window.
 *
 * An answer from the cache is the one Redis would give (see
 * docs/configuration.md, deny-cache): an entry answers only the cost it
 * was denied for (another cost has another Retry-After), only before the
 * first entry of its deciding window leaves (its reset: until then the
 * window's count, so remaining and every retry deadline, cannot change
 * but by an admission), and an admission this agent sees on the key, or
 * any call this agent sends for it, empties it. An entry also answers only
 * under the limits that produced it (its rule, deny_cache_rule()): a live
 * override that starts, ends or is removed, or any other change of the
 * limits that apply to the key, empties it at its next lookup. Deadlines
 * count from when
 * the request was sent, before Redis read its clock, so an entry ends no
 * later than Redis's numbers do. Admissions by other agents (or other
 * workers) are not seen: with mixed costs they can make the true remaining
 * lower and Retry-After later than cached, until the entry's reset.
 */
#ifndef SPOA_DENY_CACHE_H
#define SPOA_DENY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "window.h"

#define DENY_CACHE_SLOTS   4096u   /* entries by default (deny-cache-size) */
#define DENY_CACHE_PROBES  8u      /* slots looked at per key */

struct deny_cache_entry;

struct deny_cache {
	uint64_t seed;
	unsigned nslots;                 /* a power of two, >= DENY_CACHE_PROBES */
	struct deny_cache_entry *slots;  /* nslots, mapped lazily; owned */
	int64_t live_until;              /* no entry can be live from here on */
};

/* Bytes of one entry: a table of N entries maps N times this (rounded up
 * to pages), and only while an entry in it may be live. */
size_t deny_cache_entry_size(void);

/* Start <dc> empty with DENY_CACHE_SLOTS, hashing with <seed>; nothing is
 * mapped yet. */
void deny_cache_init(struct deny_cache *dc, uint64_t seed);

/* Unmaps <dc>'s table; the next deny maps a new one. */
void deny_cache_clear(struct deny_cache *dc);

/* Size <dc> for <n> entries (rounded up to a power of two, at least
 * DENY_CACHE_PROBES); a change empties it. */
void deny_cache_set_size(struct deny_cache *dc, unsigned n);

/* Unmap <dc>'s table when no entry in it can be live at <now> (every
 * deadline passed). Returns 1 when it did, else 0. */
unsigned deny_cache_trim(struct deny_cache *dc, int64_t now);

/* Bytes <dc> maps now (0 when its table is given back). */
size_t deny_cache_bytes(const struct deny_cache *dc);

/* The rule of a decision: a fingerprint of what decides it besides the
 * stored data (<p>'s algorithm and precision, the limits <lim>/<nwin> that
 * apply to the key: the policy's, a config override's or a live
 * override's). Borrows everything for the call only. */
uint64_t deny_cache_rule(const struct window_policy *p, const struct window_limit *lim,
                         unsigned nwin);

/*
 * Is (<name>, <key>) known to be denied for <cost> under <rule> at <now>?
 * Fills <d> with a deny whose retry_after and reset count down from the
 * cached deadlines. Borrows <name> and <key> for the call only. An entry
 * it cannot answer exactly (another cost or rule, past its deadline or
 * reset) is emptied: the call the caller sends instead may change the
 * window.
 */
bool deny_cache_lookup(struct deny_cache *dc, const char *name, size_t name_len,
                       const char *key, size_t key_len, uint64_t rule, uint64_t cost,
                       int64_t now, struct window_decision *d);

/* Forget (<name>, <key>): this agent saw Redis admit a request on it.
 * Borrows <name> and <key> for the call only. */
void deny_cache_forget(struct deny_cache *dc, const char *name, size_t name_len,
                       const char *key, size_t key_len);

/*
 * Remember that (<name>, <key>) was denied <cost> under <rule> by <d> for a
 * request sent at <sent_us> (copied into the table, which <dc> owns): it cannot
 * pass before <sent_us> + retry_after_us, and its numbers hold until
 * <sent_us> + reset_us, whichever comes first. Replaces the same key's entry, else
 * an empty or expired slot, else the entry that expires first. Nothing is
 * stored when the deny already expired or memory runs out.
 */
void deny_cache_store(struct deny_cache *dc, const char *name, size_t name_len,
                      const char *key, size_t key_len, uint64_t rule, uint64_t cost,
                      int64_t sent_us, const struct window_decision *d, int64_t now);

#endif /* SPOA_DENY_CACHE_H */
