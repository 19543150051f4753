/*
 * denied - per-account denial counts (denied.h): the workers' side, no
 * Redis. The tables are owned here; workers and the flusher
 * (denied_flush.c, on the live-control thread) share them through each
 * shard's lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "denied.h"
#include "live_rule.h"

struct denied_shard {
	pthread_mutex_t mu;
	struct denied_entry *slots;     /* DENIED_SLOTS, NULL until the first denial */
	unsigned used;
};

/* Owned by its creator. */
struct denied {
	struct denied_shard shard[DENIED_SHARDS];
	struct denied_entry *spare;     /* the flusher's: swapped with a shard's */
	_Atomic uint64_t dropped;
};

/* See denied.h: the caller owns the result; tables come at first use. */
struct denied *denied_new(void)
{
	struct denied *d = calloc(1, sizeof(*d));
	unsigned i;

	if (!d)
		return NULL;
	for (i = 0; i < DENIED_SHARDS; i++)
		pthread_mutex_init(&d->shard[i].mu, NULL);
	return d;
}

/* See denied.h: frees <d> and every table it owns. */
void denied_free(struct denied *d)
{
	unsigned i;

	if (!d)
		return;
	for (i = 0; i < DENIED_SHARDS; i++) {
		pthread_mutex_destroy(&d->shard[i].mu);
		free(d->shard[i].slots);
	}
	free(d->spare);
	free(d);
}

/* See denied.h; reads <d> only. */
uint64_t denied_dropped(const struct denied *d)
{
	return d ? atomic_load(&d->dropped) : 0;
}

/* FNV-1a of <p>/<n> continuing from <h>: the shard and the slot (cheap: a
 * denial on the deny cache's path costs a few hundred nanoseconds). */
static uint32_t denied_hash(uint32_t h, const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 16777619u;
	return h;
}

/* See denied.h: copies <policy> and <key> into a shard's table. */
void denied_note(struct denied *d, const char *policy, size_t policy_len, const char *key,
                 size_t key_len)
{
	size_t len = policy_len + 1 + key_len;
	uint32_t h;
	struct denied_shard *s;
	unsigned i, at;

	if (!d || len > DENIED_MEMBER_MAX)
		return;
	h = denied_hash(denied_hash(2166136261u, policy, policy_len), key, key_len);
	s = &d->shard[h % DENIED_SHARDS];
	pthread_mutex_lock(&s->mu);
	if (!s->slots)
		s->slots = calloc(DENIED_SLOTS, sizeof(*s->slots));
	for (i = 0; s->slots && i < DENIED_SLOTS; i++) {
		struct denied_entry *e;

		/* open addressing, linear probing from the hash's own slot */
		at = (h / DENIED_SHARDS + i) % DENIED_SLOTS;
		e = &s->slots[at];
		if (e->count == 0) {
			if (s->used >= DENIED_SHARD_MAX)
				break;
			memcpy(e->member, policy, policy_len);
			e->member[policy_len] = ' ';
			memcpy(e->member + policy_len + 1, key, key_len);
			e->len = (uint16_t)len;
			e->count = 1;
			s->used++;
			pthread_mutex_unlock(&s->mu);
			return;
		}
		if (e->len == len && memcmp(e->member + policy_len + 1, key, key_len) == 0 &&
		    memcmp(e->member, policy, policy_len) == 0 && e->member[policy_len] == ' ') {
			if (e->count < UINT32_MAX)
				e->count++;
			pthread_mutex_unlock(&s->mu);
			return;
		}
	}
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add(&d->dropped, 1);
}

/* See denied.h: the busy shards' tables pass to <taken>, each shard gets
 * an empty one (the spare, or a new one). */
size_t denied_take(struct denied *d, struct denied_entry *taken[DENIED_SHARDS])
{
	size_t n = 0, i, j;

	/* swap each busy shard's table for an empty one: the caller writes
	 * outside the locks, and a worker waits at most for a swap */
	memset(taken, 0, DENIED_SHARDS * sizeof(*taken));
	for (i = 0; i < DENIED_SHARDS; i++) {
		struct denied_shard *s = &d->shard[i];

		if (!d->spare && !(d->spare = calloc(DENIED_SLOTS, sizeof(*d->spare))))
			break;
		pthread_mutex_lock(&s->mu);
		if (s->used) {
			taken[i] = s->slots;
			s->slots = d->spare;
			s->used = 0;
			d->spare = NULL;
		}
		pthread_mutex_unlock(&s->mu);
	}
	for (i = 0; i < DENIED_SHARDS; i++)
		for (j = 0; taken[i] && j < DENIED_SLOTS; j++)
			n += taken[i][j].count != 0;
	return n;
}

/* See denied.h: takes <taken> back, keeps one table as the spare. */
void denied_give_back(struct denied *d, struct denied_entry *taken[DENIED_SHARDS], bool lost)
{
	size_t i, j;

	for (i = 0; i < DENIED_SHARDS; i++) {
		if (!taken[i])
			continue;
		if (lost)
			for (j = 0; j < DENIED_SLOTS; j++)
				atomic_fetch_add(&d->dropped, taken[i][j].count);
		/* keep one table for the next swap, give the rest back */
		if (!d->spare) {
			memset(taken[i], 0, DENIED_SLOTS * sizeof(*taken[i]));
			d->spare = taken[i];
		} else {
			free(taken[i]);
		}
		taken[i] = NULL;
	}
}

/* See denied.h. */
void denied_note_pool(struct denied *d, const char *policy, size_t policy_len,
                      const char *reason, const char *key, size_t key_len)
{
	char tagged[WINDOW_NAME_MAX + 16];
	int n = snprintf(tagged, sizeof(tagged), "%.*s/%s", (int)policy_len, policy, reason);

	if (n > 0 && (size_t)n < sizeof(tagged))
		denied_note(d, tagged, (size_t)n, key, key_len);
}
