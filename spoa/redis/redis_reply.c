/*
 * redis_reply - hiredis reply objects carved from one block per reply (see
 * redis_reply.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"
#include <hiredis/hiredis.h>

#include "redis_reply.h"

#define REDIS_REPLY_MIN    16384u   /* a block's first room: a batch of 32 decisions */
#define REDIS_REPLY_KEEP   65536u   /* the largest block kept as a spare */
#define REDIS_REPLY_CHUNK  65536u   /* room of a further chunk, at least */
#define REDIS_REPLY_SPARES 4u       /* spare blocks kept per thread */
/* every piece starts on this boundary (redisReply holds pointers, a long
 * long and, in 1.x, a double) */
#define REDIS_REPLY_ALIGN  16u
#define REDIS_REPLY_ROUND(n) (((n) + (REDIS_REPLY_ALIGN - 1)) & ~(size_t)(REDIS_REPLY_ALIGN - 1))

/* A further chunk of a reply's block; its room follows the header. */
struct redis_reply_chunk {
	struct redis_reply_chunk *next;
};

/* One reply's block; its own room (<cap> bytes) follows the header, and the
 * root object is the first thing carved from it. */
struct redis_reply_block {
	char *at, *end;                 /* free room where carving goes on */
	struct redis_reply_chunk *more; /* further chunks, freed with the reply */
	size_t cap;                     /* the block's own room */
	size_t total;                   /* bytes carved for this reply, all chunks */
};

#define REDIS_REPLY_HEAD REDIS_REPLY_ROUND(sizeof(struct redis_reply_block))
#define REDIS_REPLY_CHUNK_HEAD REDIS_REPLY_ROUND(sizeof(struct redis_reply_chunk))

/* The calling thread's spares (owned by the thread, freed by
 * redis_reply_release() or at its end). <want>: the room a new block gets,
 * grown to the largest reply seen, up to REDIS_REPLY_KEEP. */
static __thread struct {
	struct redis_reply_block *spare[REDIS_REPLY_SPARES];
	unsigned n;
	size_t want;
	bool keyed;                     /* the thread's end will release them */
} redis_reply_tls;

static pthread_key_t redis_reply_key;
static bool redis_reply_key_made;
static pthread_once_t redis_reply_once = PTHREAD_ONCE_INIT;

_Static_assert(_Alignof(redisReply) <= REDIS_REPLY_ALIGN, "a reply object needs more alignment");

/* A thread ends: its spares go (pthread key destructor). */
static void redis_reply_thread_end(void *unused)
{
	(void)unused;
	redis_reply_release();
}

/* Once per process: the key whose destructor frees a thread's spares. */
static void redis_reply_key_make(void)
{
	redis_reply_key_made = pthread_key_create(&redis_reply_key, redis_reply_thread_end) == 0;
}

/* See redis_reply.h. */
void redis_reply_release(void)
{
	while (redis_reply_tls.n)
		free(redis_reply_tls.spare[--redis_reply_tls.n]);
}

/* A block for a new reply, a spare or new (the caller owns it until it is
 * handed to redis_reply_block_put()); NULL when memory runs out. */
static struct redis_reply_block *redis_reply_block_get(void)
{
	struct redis_reply_block *b;
	size_t cap = redis_reply_tls.want ? redis_reply_tls.want : REDIS_REPLY_MIN;

	if (redis_reply_tls.n) {
		b = redis_reply_tls.spare[--redis_reply_tls.n];
	} else {
		b = malloc(REDIS_REPLY_HEAD + cap);
		if (!b)
			return NULL;
		b->cap = cap;
	}
	b->at = (char *)b + REDIS_REPLY_HEAD;
	b->end = b->at + b->cap;
	b->more = NULL;
	b->total = 0;
	return b;
}

/* The reply of block <b> is freed: its further chunks go; <b> becomes a
 * spare of the thread unless it is smaller than the replies seen need, or
 * the spares are full. */
static void redis_reply_block_put(struct redis_reply_block *b)
{
	struct redis_reply_chunk *c;

	while ((c = b->more)) {
		b->more = c->next;
		free(c);
	}
	if (b->total > b->cap && b->total <= REDIS_REPLY_KEEP) {
		/* the next block gets room for a reply like this one */
		size_t want = REDIS_REPLY_MIN;

		while (want < b->total)
			want *= 2;
		if (want > redis_reply_tls.want)
			redis_reply_tls.want = want;
	}
	if (b->cap < redis_reply_tls.want || redis_reply_tls.n >= REDIS_REPLY_SPARES) {
		free(b);
		return;
	}
	if (!redis_reply_tls.keyed) {
		pthread_once(&redis_reply_once, redis_reply_key_make);
		if (redis_reply_key_made &&
		    pthread_setspecific(redis_reply_key, &redis_reply_tls) == 0)
			redis_reply_tls.keyed = true;
	}
	redis_reply_tls.spare[redis_reply_tls.n++] = b;
}

/* <n> bytes of <b>'s reply (owned by the block, freed with it), aligned;
 * NULL when the reply would pass REDIS_REPLY_MAX or memory runs out. */
static void *redis_reply_carve(struct redis_reply_block *b, size_t n)
{
	struct redis_reply_chunk *c;
	size_t room;
	char *p;

	/* rounded first, so that <total> never passes REDIS_REPLY_MAX */
	if (n > REDIS_REPLY_MAX)
		return NULL;
	n = REDIS_REPLY_ROUND(n);
	if (n > REDIS_REPLY_MAX - b->total)
		return NULL;
	b->total += n;
	if ((size_t)(b->end - b->at) >= n) {
		p = b->at;
		b->at += n;
		return p;
	}
	room = n > REDIS_REPLY_CHUNK ? n : REDIS_REPLY_CHUNK;
	c = malloc(REDIS_REPLY_CHUNK_HEAD + room);
	if (!c)
		return NULL;
	c->next = b->more;
	b->more = c;
	p = (char *)c + REDIS_REPLY_CHUNK_HEAD;
	b->at = p + n;
	b->end = p + room;
	return p;
}

/* The block of root object <root>. */
static struct redis_reply_block *redis_reply_block_of(void *root)
{
	return (struct redis_reply_block *)(void *)((char *)root - REDIS_REPLY_HEAD);
}

/*
 * A new object of <type> for <task>: the root of a reply (a new block,
 * the object at its start) or an element (in its root's block, set in its
 * parent as hiredis's own functions do). <str>/<len>: a copy of the string
 * to hold, NUL-terminated (NULL: none). NULL when memory runs out: a root's
 * block is given back here; an element's goes when hiredis frees the root.
 */
static redisReply *redis_reply_new(const redisReadTask *task, int type, const char *str,
                                   size_t len)
{
	const redisReadTask *t = task;
	struct redis_reply_block *b;
	redisReply *r;

	while (t->parent)
		t = t->parent;
	if (t == task) {
		b = redis_reply_block_get();
		if (!b)
			return NULL;
	} else {
		b = redis_reply_block_of(t->obj);
	}
	/* alone first: a root must sit at the start of its block */
	r = redis_reply_carve(b, sizeof(*r));
	if (r) {
		memset(r, 0, sizeof(*r));
		r->type = type;
	}
	if (r && str) {
		if (len == SIZE_MAX || !(r->str = redis_reply_carve(b, len + 1))) {
			r = NULL;
		} else {
			memcpy(r->str, str, len);
			r->str[len] = '\0';
			r->len = len;
		}
	}
	if (!r) {
		if (t == task)
			redis_reply_block_put(b);
		return NULL;
	}
	if (task->parent)
		((redisReply *)task->parent->obj)->element[task->idx] = r;
	return r;
}

/* hiredis: an error, status or bulk string (1.x: also a verbatim string,
 * its "txt:" kept in vtype, and a big number). */
static void *redis_reply_string(const redisReadTask *task, char *str, size_t len)
{
#if SPOA_HIREDIS_AT_LEAST(1, 0)
	if (task->type == REDIS_REPLY_VERB) {
		redisReply *r;

		if (len < 4)
			return NULL;
		r = redis_reply_new(task, task->type, str + 4, len - 4);
		if (r)
			memcpy(r->vtype, str, 3);   /* vtype[3] is 0 already */
		return r;
	}
#endif
	return redis_reply_new(task, task->type, str, len);
}

/* hiredis: an array of <count> elements (1.x: also a map, counted twice,
 * a set, a push), the element pointers zeroed. The count is an int in
 * 0.14's signature, a size_t in 1.x's. */
#if SPOA_HIREDIS_AT_LEAST(1, 0)
static void *redis_reply_array(const redisReadTask *task, size_t count)
#else
static void *redis_reply_array(const redisReadTask *task, int count)
#endif
{
	redisReply *r = redis_reply_new(task, task->type, NULL, 0);
	const redisReadTask *t = task;
	size_t elements = count > 0 ? (size_t)count : 0;

	if (!r || elements == 0)
		return r;
	while (t->parent)
		t = t->parent;
	if (elements > REDIS_REPLY_MAX / sizeof(*r->element) ||
	    !(r->element = redis_reply_carve(redis_reply_block_of(t == task ? (void *)r : t->obj),
	                                     elements * sizeof(*r->element)))) {
		if (t == task)
			redis_reply_block_put(redis_reply_block_of(r));
		return NULL;
	}
	memset(r->element, 0, elements * sizeof(*r->element));
	r->elements = elements;
	return r;
}

/* hiredis: an integer. */
static void *redis_reply_integer(const redisReadTask *task, long long value)
{
	redisReply *r = redis_reply_new(task, REDIS_REPLY_INTEGER, NULL, 0);

	if (r)
		r->integer = value;
	return r;
}

/* hiredis: a nil. */
static void *redis_reply_nil(const redisReadTask *task)
{
	return redis_reply_new(task, REDIS_REPLY_NIL, NULL, 0);
}

#if SPOA_HIREDIS_AT_LEAST(1, 0)
/* hiredis 1.x: a double, its text kept in str as hiredis keeps it. */
static void *redis_reply_double(const redisReadTask *task, double value, char *str, size_t len)
{
	redisReply *r = redis_reply_new(task, REDIS_REPLY_DOUBLE, str, len);

	if (r)
		r->dval = value;
	return r;
}

/* hiredis 1.x: a boolean, 0 or 1 in integer. */
static void *redis_reply_bool(const redisReadTask *task, int bval)
{
	redisReply *r = redis_reply_new(task, REDIS_REPLY_BOOL, NULL, 0);

	if (r)
		r->integer = bval != 0;
	return r;
}
#endif

/* hiredis: free the reply whose root is <reply> (hiredis never frees an
 * element alone): its block. */
static void redis_reply_free(void *reply)
{
	if (reply)
		redis_reply_block_put(redis_reply_block_of(reply));
}

redisReplyObjectFunctions redis_reply_functions = {
	.createString = redis_reply_string,
	.createArray = redis_reply_array,
	.createInteger = redis_reply_integer,
#if SPOA_HIREDIS_AT_LEAST(1, 0)
	.createDouble = redis_reply_double,
	.createBool = redis_reply_bool,
#endif
	.createNil = redis_reply_nil,
	.freeObject = redis_reply_free,
};

/* See redis_reply.h: <r> is the context's; only its functions change. */
void redis_reply_use(redisReader *r)
{
	if (r)
		r->fn = &redis_reply_functions;
}
