/*
 * deny_cache - accounts known to be denied (see deny_cache.h). No I/O.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "deny_cache.h"

struct deny_cache_entry {
	uint64_t hash;                  /* 0 = empty slot */
	int64_t deadline_us;            /* monotonic: the request may pass from here */
	int64_t reset_us;               /* monotonic: the oldest entry leaves, and
	                                 * with it the numbers below may change */
	uint64_t cost;                  /* denied cost: the only one answered */
	uint64_t rule;                  /* deny_cache_rule(): the only one answered */
	int64_t limit;
	int64_t remaining;
	unsigned window;
	unsigned name_len;
	unsigned key_len;
	char name[WINDOW_NAME_MAX];
	char key[WINDOW_KEY_MAX];
};

/* Hash of (<name>, <key>), seeded per cache so keys chosen by clients
 * cannot aim at one probe window; never 0 (0 marks an empty slot). */
static uint64_t deny_cache_hash(const struct deny_cache *dc, const char *name, size_t name_len,
                                const char *key, size_t key_len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ dc->seed;
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
static bool deny_cache_match(const struct deny_cache_entry *e, uint64_t h,
                             const char *name, size_t name_len,
                             const char *key, size_t key_len)
{
	return e->hash == h && e->name_len == name_len && e->key_len == key_len &&
	       memcmp(e->name, name, name_len) == 0 && memcmp(e->key, key, key_len) == 0;
}

/* Mixes 64-bit word <v> into fingerprint <h>. */
static uint64_t deny_cache_mix(uint64_t h, uint64_t v)
{
	h = (h ^ v) * 0x100000001b3ULL;
	h ^= h >> 29;
	return h * 0xbf58476d1ce4e5b9ULL;
}

/* Borrows <p> and <lim> for the call. See deny_cache.h. */
uint64_t deny_cache_rule(const struct window_policy *p, const struct window_limit *lim,
                         unsigned nwin)
{
	uint64_t h = deny_cache_mix(0xcbf29ce484222325ULL, (uint64_t)p->algorithm);
	unsigned i;

	h = deny_cache_mix(h, p->precision_ms);
	h = deny_cache_mix(h, nwin);
	for (i = 0; i < nwin; i++) {
		h = deny_cache_mix(h, lim[i].limit);
		h = deny_cache_mix(h, lim[i].window_ms);
		h = deny_cache_mix(h, lim[i].burst);
	}
	return h;
}

size_t deny_cache_entry_size(void)
{
	return sizeof(struct deny_cache_entry);
}

/* <dc> owns nothing until the first deny. */
void deny_cache_init(struct deny_cache *dc, uint64_t seed)
{
	dc->seed = seed;
	dc->nslots = DENY_CACHE_SLOTS;
	dc->slots = NULL;
	dc->live_until = 0;
}

/* Unmaps <dc>'s table. The table is mapped, not malloc'ed: unmapping gives
 * its pages to the kernel at once, where free() of a block this size can
 * leave it resident in the arena (glibc raises its mmap threshold after
 * the first such free), and pages no entry touched are never resident. */
void deny_cache_clear(struct deny_cache *dc)
{
	if (dc->slots)
		munmap(dc->slots, deny_cache_bytes(dc));
	dc->slots = NULL;
	dc->live_until = 0;
}

/* A new size unmaps <dc>'s table (the next deny maps one of that size). */
void deny_cache_set_size(struct deny_cache *dc, unsigned n)
{
	unsigned p = DENY_CACHE_PROBES;

	while (p < n && p < (1u << 30))
		p <<= 1;
	if (p == dc->nslots)
		return;
	deny_cache_clear(dc);
	dc->nslots = p;
}

/* Unmaps <dc>'s table once <now> is past every deadline stored in it. */
unsigned deny_cache_trim(struct deny_cache *dc, int64_t now)
{
	if (!dc->slots || now < dc->live_until)
		return 0;
	deny_cache_clear(dc);
	return 1;
}

size_t deny_cache_bytes(const struct deny_cache *dc)
{
	return dc->slots ? (size_t)dc->nslots * sizeof(struct deny_cache_entry) : 0;
}

/* The slot of <dc> holding (<name>, <key>), or NULL. Borrows <name> and
 * <key> for the call. */
static struct deny_cache_entry *deny_cache_find(struct deny_cache *dc, const char *name,
                                                size_t name_len, const char *key, size_t key_len)
{
	uint64_t h;
	unsigned i;

	if (!dc->slots)
		return NULL;
	h = deny_cache_hash(dc, name, name_len, key, key_len);
	for (i = 0; i < DENY_CACHE_PROBES; i++) {
		struct deny_cache_entry *e = &dc->slots[(h + i) & (dc->nslots - 1)];

		if (deny_cache_match(e, h, name, name_len, key, key_len))
			return e;
	}
	return NULL;
}

/* Borrows <name> and <key> for the call. See deny_cache.h. */
bool deny_cache_lookup(struct deny_cache *dc, const char *name, size_t name_len,
                       const char *key, size_t key_len, uint64_t rule, uint64_t cost,
                       int64_t now, struct window_decision *d)
{
	struct deny_cache_entry *e = deny_cache_find(dc, name, name_len, key, key_len);
	int64_t left;

	if (!e)
		return false;
	/* Another cost has another Retry-After (and may even pass); other
	 * limits (a live override began or ended) give another answer on the
	 * same data; once the reset passed, an entry left the window and
	 * remaining grew. Each way Redis answers, and its answer may change
	 * the window: empty. */
	if (cost != e->cost || rule != e->rule || e->deadline_us <= now || e->reset_us <= now) {
		e->hash = 0;
		return false;
	}
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
	d->reset_us = e->reset_us - now;
	d->reset = window_us_to_s_ceil(d->reset_us);
	d->window = e->window;
	return true;
}

/* Borrows <name> and <key> for the call. See deny_cache.h. */
void deny_cache_forget(struct deny_cache *dc, const char *name, size_t name_len,
                       const char *key, size_t key_len)
{
	struct deny_cache_entry *e = deny_cache_find(dc, name, name_len, key, key_len);

	if (e)
		e->hash = 0;
}

/* Copies <name> and <key> into the table <dc> owns (mapped on the first
 * deny). See deny_cache.h. */
void deny_cache_store(struct deny_cache *dc, const char *name, size_t name_len,
                      const char *key, size_t key_len, uint64_t rule, uint64_t cost,
                      int64_t sent_us, const struct window_decision *d, int64_t now)
{
	struct deny_cache_entry *same = NULL, *unused = NULL, *oldest = NULL, *e;
	int64_t until;
	uint64_t h;
	unsigned i;

	/* the entry answers until its deadline or its reset, the first */
	until = d->reset_us < d->retry_after_us ? d->reset_us : d->retry_after_us;
	if (until <= 0 || sent_us + until <= now)
		return;
	if (name_len > WINDOW_NAME_MAX || key_len > WINDOW_KEY_MAX)
		return;
	if (!dc->slots) {
		/* anonymous pages come zeroed: every slot empty */
		void *m = mmap(NULL, (size_t)dc->nslots * sizeof(*dc->slots), PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (m == MAP_FAILED)
			return;
		dc->slots = m;
	}
	h = deny_cache_hash(dc, name, name_len, key, key_len);
	for (i = 0; i < DENY_CACHE_PROBES; i++) {
		e = &dc->slots[(h + i) & (dc->nslots - 1)];
		if (deny_cache_match(e, h, name, name_len, key, key_len)) {
			same = e;
			break;
		}
		if (e->hash == 0 || e->deadline_us <= now || e->reset_us <= now) {
			if (!unused)
				unused = e;
		} else if (!oldest || e->deadline_us < oldest->deadline_us) {
			oldest = e;
		}
	}
	e = same ? same : unused ? unused : oldest;
	e->hash = h;
	e->deadline_us = sent_us + d->retry_after_us;
	e->reset_us = sent_us + d->reset_us;
	if (sent_us + until > dc->live_until)
		dc->live_until = sent_us + until;
	e->cost = cost;
	e->rule = rule;
	e->limit = d->limit;
	e->remaining = d->remaining;
	e->window = d->window;
	e->name_len = (unsigned)name_len;
	e->key_len = (unsigned)key_len;
	memcpy(e->name, name, name_len);
	memcpy(e->key, key, key_len);
}
