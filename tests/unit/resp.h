/*
 * resp.h - canned Redis replies for unit tests: RESP text parsed into the
 * struct cluster_view that cluster.c reads (what limiter_cluster.c makes of
 * hiredis's reply), without hiredis. The nodes live in a static pool that
 * each resp_parse() reuses: a reply is valid until the next call.
 */
#ifndef TESTS_UNIT_RESP_H
#define TESTS_UNIT_RESP_H

#include <stdlib.h>
#include <string.h>

#include "cluster.h"

#define RESP_NODES_MAX 1024

static struct cluster_view resp_nodes[RESP_NODES_MAX];
static size_t resp_used;

/* Parse the one value at <p> into <v>; returns what follows it. Fails the
 * test on text a reply never has. */
static const char *resp_node(const char *p, struct cluster_view *v)
{
	const char *eol = strstr(p, "\r\n");
	struct cluster_view *el;
	long long n, i;

	assert_non_null(eol);
	memset(v, 0, sizeof(*v));
	n = strtoll(p + 1, NULL, 10);
	switch (*p) {
	case ':':
		v->type = CLUSTER_VIEW_INTEGER;
		v->integer = n;
		return eol + 2;
	case '+':
		v->type = CLUSTER_VIEW_OTHER;
		return eol + 2;
	case '-':
		v->type = CLUSTER_VIEW_ERROR;
		v->str = p + 1;
		v->len = (size_t)(eol - p - 1);
		return eol + 2;
	case '$':
		if (n < 0) {
			v->type = CLUSTER_VIEW_NIL;
			return eol + 2;
		}
		v->type = CLUSTER_VIEW_STRING;
		v->str = eol + 2;
		v->len = (size_t)n;
		return eol + 2 + n + 2;
	case '*':
		if (n < 0) {
			v->type = CLUSTER_VIEW_NIL;
			return eol + 2;
		}
		assert_true(resp_used + (size_t)n <= RESP_NODES_MAX);
		v->type = CLUSTER_VIEW_ARRAY;
		v->elements = (size_t)n;
		v->element = el = &resp_nodes[resp_used];
		resp_used += (size_t)n;
		for (i = 0, p = eol + 2; i < n; i++)
			p = resp_node(p, &el[i]);
		return p;
	default:
		fail_msg("not RESP: %.20s", p);
		return p;
	}
}

/* The view of the one reply in RESP text <resp>, borrowed from <resp> and
 * the pool until the next call. */
static inline const struct cluster_view *resp_parse(const char *resp)
{
	resp_used = 1;
	resp_node(resp, &resp_nodes[0]);
	return &resp_nodes[0];
}

#endif /* TESTS_UNIT_RESP_H */
