/*
 * denied - per-account denial counts, flushed to Redis each second
 * (denied.h). The tables are owned here; workers and the live-control
 * thread share them through each shard's lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"

#include "denied.h"
#include "live_rule.h"
#include "redis_sync.h"

struct denied_entry {
	uint32_t count;                 /* 0: free */
	uint16_t len;
	char member[LIVE_FIELD_MAX];    /* "<policy> <account>" */
};

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

	if (!d || len > LIVE_FIELD_MAX)
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

/* Send <n> entries of <t> as one pipeline of ZINCRBY to minute key <key>
 * and its EXPIRE. Returns 0 or -1 with <err>. */
static int denied_send(struct redis_sync *rs, const char *key, size_t keylen,
                       const struct denied_entry *const *t, size_t n, char *err, size_t errlen)
{
	size_t i, total = n + 1;
	int *argc = calloc(total, sizeof(*argc));
	const char *(*argv)[4] = calloc(total, sizeof(*argv));
	size_t (*len)[4] = calloc(total, sizeof(*len));
	const char *const **pv = calloc(total, sizeof(*pv));
	const size_t **pl = calloc(total, sizeof(*pl));
	char (*num)[16] = calloc(total, sizeof(*num));
	struct redisReply **out = calloc(total, sizeof(*out));
	char ttl[16];
	int rc = -1;

	if (!argc || !argv || !len || !pv || !pl || !num || !out) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		snprintf(num[i], sizeof(num[i]), "%u", t[i]->count);
		argc[i] = 4;
		argv[i][0] = "ZINCRBY"; len[i][0] = 7;
		argv[i][1] = key; len[i][1] = keylen;
		argv[i][2] = num[i]; len[i][2] = strlen(num[i]);
		argv[i][3] = t[i]->member; len[i][3] = t[i]->len;
	}
	snprintf(ttl, sizeof(ttl), "%d", LIVE_DENIED_TTL_S);
	argc[n] = 3;
	argv[n][0] = "EXPIRE"; len[n][0] = 6;
	argv[n][1] = key; len[n][1] = keylen;
	argv[n][2] = ttl; len[n][2] = strlen(ttl);
	for (i = 0; i < total; i++) {
		pv[i] = argv[i];
		pl[i] = len[i];
	}
	if (redis_sync_pipeline(rs, key, keylen, total, argc, pv, pl, out, err, errlen) == -1)
		goto out;
	rc = 0;
	for (i = 0; i < total; i++) {
		if (out[i]->type == REDIS_REPLY_ERROR && rc == 0) {
			snprintf(err, errlen, "%s", out[i]->str);
			rc = -1;
		}
		freeReplyObject(out[i]);
	}
out:
	free(argc);
	free(argv);
	free(len);
	free(pv);
	free(pl);
	free(num);
	free(out);
	return rc;
}

/* See denied.h: borrows <rs>; the tables swapped out are recycled or freed here. */
int denied_flush(struct denied *d, struct redis_sync *rs, char *err, size_t errlen)
{
	const struct denied_entry **t = NULL;
	struct denied_entry *taken[DENIED_SHARDS] = { 0 };
	size_t n = 0, i, j;
	char key[96];
	int64_t now_ms;
	int rc = -1, klen;

	/* swap each busy shard's table for an empty one, then write outside
	 * the locks: a worker waits at most for a swap */
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
	if (n == 0) {
		rc = 0;
		goto out;
	}
	t = calloc(n, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0, n = 0; i < DENIED_SHARDS; i++)
		for (j = 0; taken[i] && j < DENIED_SLOTS; j++)
			if (taken[i][j].count)
				t[n++] = &taken[i][j];
	/* the minute on Redis's clock, as ctl top-denied reads it */
	now_ms = redis_sync_time_ms(rs, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1, err, errlen);
	if (now_ms < 0)
		goto out;
	klen = snprintf(key, sizeof(key), "%s%lld", LIVE_KEY_DENIED, (long long)(now_ms / 60000));
	if (denied_send(rs, key, (size_t)klen, t, n, err, errlen) == 0)
		rc = (int)n;
out:
	for (i = 0; i < DENIED_SHARDS; i++) {
		if (!taken[i])
			continue;
		if (rc < 0)
			for (j = 0; j < DENIED_SLOTS; j++)
				atomic_fetch_add(&d->dropped, taken[i][j].count);
		/* keep one table for the next swap, give the rest back */
		if (!d->spare) {
			memset(taken[i], 0, DENIED_SLOTS * sizeof(*taken[i]));
			d->spare = taken[i];
		} else {
			free(taken[i]);
		}
	}
	free(t);
	return rc;
}
